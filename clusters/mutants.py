"""The mutation catalogue of the reference broker (issue 22, deliverable 3): data, one entry per mutant.

Each mutant breaks ONE protocol rule in ONE place of the default code path (not a FLAW_VARIANTS
switch): a bug a developer could write. It is a list of edits, each an exact snippet of one file
(it must occur exactly once: `kafkaesque mutate --check-only` and tests/unit/test_mutation.py say
which mutant and file when an edit of the broker orphans one) and its replacement. Snippets sit on
decision logic, one or two lines, so that unrelated edits of the same files (log or trace lines)
leave them applicable. A mutant is applied to a temporary copy of clusters/ at run time
(clusters/code_copy.py); the shipped broker never contains it.

`rule` is the rule broken, `cite` where it is written (PROTOCOL.md is /work/shared/PROTOCOL.md, the
seeds /work/shared/seeds/), `expect` what should catch it and how. studies/mutation.py runs them
and writes docs/MUTATION.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkaesque_harness.clusters.code_copy import Edit

REPLICA = "clusters/broker/replica.py"
SERVER = "clusters/broker/server.py"
CONTROLLER = "clusters/broker/controller.py"
EPOCHS = "clusters/broker/log/epoch_cache.py"
PRODUCERS = "clusters/broker/producer_state.py"
LOG = "clusters/broker/log/partition_log.py"
CONTROLLER_SERVER = "clusters/broker/controller_server.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    edits: tuple[Edit, ...]
    rule: str
    cite: str
    expect: str

    @property
    def files(self) -> list[str]:
        return sorted({e.file for e in self.edits})


def _m(name: str, file: str, old: str, new: str, rule: str, cite: str, expect: str) -> Mutant:
    return Mutant(name, (Edit(file, old, new),), rule, cite, expect)


MUTANTS: tuple[Mutant, ...] = (
    # --- the HWM (PROTOCOL.md 3) ------------------------------------------------------------------
    _m("hwm-leader-leo", REPLICA,
       "new = min(reached) if reached else self.leo",
       "new = self.leo",
       "the HWM is the largest offset every Maximal ISR member reached, not the leader's LEO",
       "PROTOCOL.md 3 (advance rule); 002 2.7; TLA+ LeaderCompleteness",
       "history: acks=all writes acknowledged before any follower has them are lost when the leader dies "
       "(lost-write); trace: HWM above a Maximal ISR member's LEO"),
    _m("hwm-max-of-isr", REPLICA,
       "new = min(reached) if reached else self.leo",
       "new = max(reached) if reached else self.leo",
       "the HWM is the minimum of the Maximal ISR members' LEOs, not the maximum",
       "PROTOCOL.md 3 (advance rule); 002 2.7",
       "history: lost-write after a leader kill (the HWM was the leader's LEO); trace: HWM above a member's LEO"),
    _m("hwm-min-isr-off-by-one", REPLICA,
       "return (self.role == LEADER and len(self.isr) < self.min_isr",
       "return (self.role == LEADER and len(self.isr) < self.min_isr - 1",
       "the HWM advances only while |ISR| >= min ISR (KIP-966); off by one, a lone leader advances it",
       "PROTOCOL.md 3 (advance rule), 6 (Last Replica Standing), 9.4 and 9.10",
       "history under the protocol nemesis (isolate followers, then kill the lone leader): lost-write; "
       "trace: HWM advanced with |ISR| < min ISR"),
    _m("hwm-not-monotonic", REPLICA,
       "if new > self.hwm:",
       "if new != self.hwm:",
       "the leader's HWM only moves forward (newHWM > HWM)",
       "PROTOCOL.md 3 (advance rule; True HWM monotonic), 8 (Consistent reads)",
       "history: a new leader's HWM drops to -1/its followers' LEOs, consumers see the HWM go back "
       "(stale reads, log-order); trace: HWM decrease on a leader"),
    # --- ISR changes (PROTOCOL.md 4) ----------------------------------------------------------------
    _m("isr-expand-below-hwm", REPLICA,
       "if (f.fetched_this_epoch and f.leo >= self.hwm and f.leo >= self.leso",
       "if (f.fetched_this_epoch and f.leo >= self.leso",
       "a follower joins the ISR only once its LEO reached the HWM",
       "PROTOCOL.md 4 (Expand), 8 (Leader Candidate Completeness); 002 2.9",
       "trace: ISR addition of a follower below the HWM; history only if that follower is then elected "
       "before it catches up (protocol nemesis: kill the leader right after an expansion)"),
    _m("isr-expand-stale-broker-epoch", REPLICA,
       "and not b.fenced and not b.in_controlled_shutdown and f.broker_epoch == b.broker_epoch):",
       "and not b.fenced and not b.in_controlled_shutdown):",
       "the leader proposes a follower for the ISR only if its fetch's broker epoch is the registered one",
       "PROTOCOL.md 4 (Expand, KIP-903), 9.6",
       "probably nothing: the controller checks the broker epoch again (defence in depth); trace: an "
       "AlterPartition proposing a stale broker epoch"),
    _m("follower-state-kept-across-epochs", REPLICA,
       "self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in self.replicas if r != self.node_id}",
       "self.followers = {r: self.followers.get(r) or FollowerState(last_caught_up_ms=now_ms)\n"
       "                          for r in self.replicas if r != self.node_id}",
       "the leader clears its followers' state on every epoch change: an ISR addition needs a fetch in the "
       "current leader epoch",
       "PROTOCOL.md 4 (Expand: fetched in the current leader epoch), 9.8; 002 2.9",
       "trace: ISR addition (and HWM advance) on a fetch from an older epoch; history when a re-elected "
       "leader re-admits a replica that lost its log and then that replica leads"),
    # --- acks and consumer reads (PROTOCOL.md 3, 8) ---------------------------------------------------
    _m("acks-all-at-leo", SERVER,
       "if acks != -1 or r.hwm > last:",
       "if acks != -1 or r.leo > last:",
       "acks=all is answered once the HWM passed the batch, not after the local append",
       "PROTOCOL.md 3 (acks=all: ack once HWM > offset); 002 2.5",
       "history: lost-write when the leader dies before followers fetched (kill, partition); "
       "trace: produce acknowledged above the HWM"),
    _m("ack-purgatory-off-by-one", SERVER,
       "while q and q[0].last_offset < r.hwm:",
       "while q and q[0].last_offset <= r.hwm:",
       "a waiting acks=all produce completes when HWM > its last offset (HWM is exclusive)",
       "PROTOCOL.md 3 (acks=all), offsets 0-based and HWM exclusive (PROTOCOL.md intro); 002 2.5",
       "history: lost-write of the last record of a batch acknowledged one offset early (narrow window); "
       "trace: produce acknowledged with its last offset == HWM"),
    Mutant("consumer-read-to-leo", (
        Edit(SERVER, "elif offset < r.hwm:", "elif offset < r.leo:"),
        Edit(SERVER, "min(max_bytes, MAX_FETCH_BYTES), max_offset=r.hwm)", "min(max_bytes, MAX_FETCH_BYTES), max_offset=r.leo)"),
    ), "consumers are served only records below the HWM, not up to the LEO",
        "PROTOCOL.md 8 (Consistent reads); 002 2.7",
        "history: reads of uncommitted records later truncated away (stale/future reads, log-order, "
        "inconsistent offsets); trace: consumer fetch bounded by the LEO above the HWM"),
    # --- follower fetch, divergence, truncation (PROTOCOL.md 2) -----------------------------------------
    _m("follower-hwm-unclamped", REPLICA,
       'self.hwm = min(int(resp["high_watermark"]), self.leo)',
       'self.hwm = int(resp["high_watermark"])',
       "a follower's HWM is the leader's bounded by its own LEO (HWM = min(leaderHWM, LEO))",
       "PROTOCOL.md 2 (Follower, on normal data); 002 2.7",
       "trace under `small-fetches` (kill, pause, partition; 1 KiB replica fetches, an HWM checkpoint every "
       "100 ms): hwm-above-leo at a checkpoint while a restarted follower catches up over many responses; with 4 MiB fetches one "
       "response closes the gap and nothing shows"),
    _m("truncate-to-leader-end", EPOCHS,
       "offset = min(fo, diverging_end_offset) if fe == diverging_epoch else fo",
       "offset = diverging_end_offset",
       "a follower told it diverged truncates by its own epoch cache (min(fo, end) or fo), not to the "
       "leader's end offset alone",
       "PROTOCOL.md 2 (Follower, on divergence; KIP-279), 9.3 (KAFKA-6361 fast failover)",
       "trace: truncated-past-epoch-end after the protocol nemesis's lagging-leader-then-failover (a lagging "
       "successor leads and appends, then the other follower leads); state dumps: log-divergence"),
    _m("epoch-end-off-by-one", EPOCHS,
       "end = entries[i].start_offset if i < len(entries) else log_end_offset",
       "end = entries[i].start_offset + 1 if i < len(entries) else log_end_offset",
       "EndOffsetForEpoch returns the start offset of the next higher epoch",
       "PROTOCOL.md 2 (item 2, test vectors C-G); 004 'Epoch concept'",
       "state dumps: log-divergence (a follower keeps one record of a dead epoch); history when it leads"),
    _m("no-epoch-entry-on-election", REPLICA,
       "self.log.assign_epoch(self.leader_epoch)",
       "pass  # the epoch enters the cache with the first append",
       "a new leader puts currentEpoch -> LEO into its epoch cache at once",
       "PROTOCOL.md 2 (Traps: KAFKA-7415)",
       "state dumps: log-divergence when a follower with a longer old-epoch log asks before the first "
       "append of the new epoch; possibly nothing in 5 minutes (the lookup falls back to the LEO)"),
    _m("producer-state-not-rebuilt", REPLICA,
       "self.producers = ProducerStateTable.from_headers(self.log.batch_headers(), self._read_batch)",
       "self.producers = ProducerStateTable()",
       "a new leader whose producer table does not describe its log (a restart, a truncation) rebuilds it "
       "from the log, so a retry is not appended twice (a follower keeps its table as it copies)",
       "PROTOCOL.md 3 (acks=all: producers need idempotent retries), 10 (KIP-98 producer id and sequence)",
       "nothing with the queue workload: its producers run with idempotence off and retries 0 "
       "(workloads/queue.py, so a rejected send stays definite), so no batch carries a producer id and the "
       "table is never read: equivalent under this workload. A workload with idempotent retries would show "
       "it as a duplicate after a failover"),
    _m("recovery-skips-crc", LOG,
       "if not h.crc_ok:",
       "if False:  # the header parsed, trust the batch",
       "log recovery drops a torn or corrupt tail (CRC) before the broker serves",
       "001 5 (recovery after an unclean shutdown); partition_log.py module doc (issue 2 item 4)",
       "state dumps under `disk`: corrupt-batch-kept (a bit-flipped batch kept through the restart); nothing "
       "under protocol and random: the lossy file system drops whole unsynced writes, it never tears a batch"),
    _m("truncation-not-fsynced", LOG,
       "self._flush_locked()  # earlier segments were synced at roll",
       "pass  # the page cache writes the cut back in its own time",
       "a truncation is made durable before the replica fetches past it, so a crash cannot resurrect the "
       "dropped suffix",
       "PROTOCOL.md 5.5 (lossy unclean shutdown), 9.2 (double power loss: permanent divergence); "
       "partition_log.py truncate_to",
       "state dumps: log-divergence only if a lossy crash follows a divergence truncation and the old suffix "
       "had been synced (at a segment roll); rare under flush never"),
    # --- the controller: elections, ISR, ELR, fencing (PROTOCOL.md 4, 5) --------------------------------
    _m("controller-metadata-not-fsynced", CONTROLLER_SERVER,
       "first = self.metadata.append(records, fsync=True)",
       "first = self.metadata.append(records, fsync=False)",
       "the controller makes metadata records durable before it answers or serves them",
       "002 1.2.1 (durable before acted on); controller.py module doc",
       "trace under protocol: epoch-reuse and registration-clean after power-cut-controller (the restarted "
       "controller lost its unsynced metadata and gives broker and leader epochs again)"),
    _m("elect-from-replicas", CONTROLLER,
       'for members, how in ((p.isr, "isr"), (p.elr, "elr")):',
       'for members, how in ((p.replicas, "isr"), (p.elr, "elr")):',
       "a leader is elected from the ISR (else the ELR), never from any replica",
       "PROTOCOL.md 4 (Election), 8 (Leader Completeness), 9.5 (unclean election)",
       "history: lost-write after a stale replica is elected (the unclean-election variant's loss, without the "
       "switch); trace: a leader outside ISR and ELR"),
    _m("no-leader-epoch-bump", CONTROLLER,
       "new.leader = leader\n        new.leader_epoch += 1",
       "new.leader = leader",
       "every election bumps the leader epoch",
       "PROTOCOL.md 1 (Epochs), 4 (Election: bump both epochs), 8 (Epochs: one leader per leader epoch)",
       "state dumps: log-divergence (two leaders write one epoch, the divergence check cannot see it); "
       "trace: a leader epoch reused"),
    _m("elr-drops-removed", CONTROLLER,
       "elr = (set(old.elr) | removed) - set(new.isr)",
       "elr = set(old.elr) - set(new.isr)",
       "below min ISR, the replicas the ISR just lost join the ELR",
       "PROTOCOL.md 4 (ELR), 6 (KIP-966); 001 5.2",
       "history under the protocol nemesis: the ELR is empty when the last ISR member dies, so recovery is "
       "unclean (reported) or elects a stale replica: lost-write; trace: ELR rule broken"),
    _m("elr-not-cleared", CONTROLLER,
       "new.elr, new.last_known_elr = [], []\n            return\n        removed",
       "return\n        removed",
       "at or above min ISR the ELR and LastKnownELR are cleared (their members lose the completeness "
       "guarantee once the HWM advances)",
       "PROTOCOL.md 4 (ELR), 8 (Controller structure: |ISR| >= MinISR => ELR empty)",
       "history: a stale ELR member elected after the ISR died (lost-write); trace/state: ELR non-empty "
       "with |ISR| >= min ISR"),
    _m("fenced-follower-stays-in-isr", CONTROLLER,
       "if bid in new.isr and (len(new.isr) > 1 or self.config.elr_enabled):",
       "if bid in new.isr and p.leader == bid and (len(new.isr) > 1 or self.config.elr_enabled):",
       "the controller drops a fenced broker from every ISR, not only where it led",
       "PROTOCOL.md 4 (Shrink), 5.4 (Fencing), 8 (Controller structure: no fenced broker in the ISR)",
       "history: a killed follower keeps its ISR seat and blocks the HWM until the lag timeout; a lossy "
       "restart of it can then be elected (lost-write); state dumps: fenced broker in the ISR"),
    _m("alter-partition-stale-version", CONTROLLER,
       'if int(body["partition_epoch"]) != p.partition_epoch:',
       'if int(body["partition_epoch"]) > p.partition_epoch:',
       "AlterPartition with a stale partition epoch is rejected (INVALID_UPDATE_VERSION)",
       "PROTOCOL.md 4 (AlterPartition), 9.8",
       "history when a leader's stale proposal re-adds a member the controller removed (its broker epoch "
       "is sent as -1): that replica may then be elected with a short log; trace: ISR addition without "
       "a current-epoch fetch"),
    _m("alter-partition-ignores-broker-epoch", CONTROLLER,
       "or (epoch != -1 and epoch != rb.broker_epoch):",
       ":",
       "the controller rejects an added ISR member whose broker epoch is not the registered one",
       "PROTOCOL.md 4 (AlterPartition: INELIGIBLE_REPLICA), 9.6 (KIP-903)",
       "probably nothing: the leader checks the broker epoch first (defence in depth)"),
    _m("unclean-restart-seen-as-clean", CONTROLLER,
       "clean = old is None or previous == old.broker_epoch",
       "clean = old is None or previous <= old.broker_epoch",
       "a registration is clean only with the clean-shutdown file's epoch; else the broker leaves every ELR",
       "PROTOCOL.md 5.1-5.2, 6 (Unclean Exclusion); 001 5.2",
       "history after a lossy crash of an ELR member that is then elected (lost-write); rare in 5 minutes"),
)


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}
