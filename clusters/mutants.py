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
TXN = "clusters/broker/txn_coordinator.py"
TXN_SHELL = "clusters/broker/txn_shell.py"
GROUPS = "clusters/broker/group_coordinator.py"


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
    # --- the transaction coordinator (KIP-98; txn_coordinator.py's docstring) ----------------------------
    _m("txn-init-no-epoch-bump", TXN,
       "new = TxnState(s.producer_id, s.producer_epoch + 1, timeout_ms)",
       "new = TxnState(s.producer_id, s.producer_epoch, timeout_ms)",
       "InitProducerId of a transactional id that has a producer bumps its epoch, fencing the previous "
       "producer of the id (a zombie)",
       "KIP-98 (zombie fencing), KIP-360; txn_coordinator.py docstring; the seeds leave transactions out",
       "trace: init-not-fenced on the first re-initialisation of a transactional id (the txn workload "
       "re-initialises after a fenced or failed commit); history only if a zombie's commit then lands"),
    _m("txn-abort-not-fenced", TXN,
       "return _fence(epoch)",
       "return epoch",
       "an abort the coordinator starts itself (a timeout, or InitProducerId finding the transaction open) "
       "writes its markers at a bumped epoch, so the producer is fenced",
       "KIP-98; KIP-890 (hanging transactions); Kafka's TransactionCoordinator abortTimedOutTransactions",
       "trace: txn-abort-not-fenced under stall-producer-past-txn-timeout (the protocol nemesis); history: "
       "a late produce of the aborted transaction joins the next one (aborted read)"),
    _m("txn-stale-epoch-accepted", TXN,
       "if s.producer_epoch != producer_epoch:\n            return rpc.PRODUCER_FENCED, None",
       "if s.producer_epoch < producer_epoch:\n            return rpc.PRODUCER_FENCED, None",
       "a request of a producer at an epoch other than the id's current one is refused (PRODUCER_FENCED): a "
       "fenced producer cannot add partitions or end a transaction",
       "KIP-98 (fencing), KIP-588 (PRODUCER_FENCED); Kafka's TransactionCoordinator handleEndTransaction",
       "trace: txn-marker-not-as-decided or producer-epoch-regressed when a fenced producer's EndTxn is taken "
       "for the new producer's transaction; history: a zombie's commit (aborted or duplicated reads); rare, "
       "a zombie needs a stall or a re-initialisation to exist"),
    _m("txn-load-first-record-wins", TXN,
       "self.txns[txn_id] = s",
       "self.txns.setdefault(txn_id, s)",
       "a new coordinator rebuilds each transactional id from its LAST record in __transaction_state",
       "txn_coordinator.py load(); KIP-98 (the transaction log is the coordinator's state); 002 2.8 (a "
       "fail-over is a leader change and the new leader rebuilds from its log)",
       "trace: producer-epoch-regressed and init-not-fenced after kill-txn-coordinator (the new coordinator "
       "answers an epoch it had given before); history: zombie commits"),
    _m("txn-load-skips-prepared-abort", TXN,
       "if self.partition_for(t) == partition and s.state in (PREPARE_COMMIT, PREPARE_ABORT)]",
       "if self.partition_for(t) == partition and s.state == PREPARE_COMMIT]",
       "a new coordinator finishes every transaction it loads prepared, aborts as well as commits",
       "KIP-98 (two-phase end: a decided outcome survives a fail-over); txn_coordinator.py load()",
       "trace: txn-marker-not-as-decided is not judged (nothing completes); history: the LSO of the "
       "transaction's partitions stays stuck (read_committed reads stall: unknown, not invalid) after "
       "txn-coordinator-killed-mid-commit hits an abort; likely survives in 180 s"),
    _m("txn-add-to-decided", TXN,
       "if s.state in (PREPARE_COMMIT, PREPARE_ABORT):\n            return rpc.CONCURRENT_TRANSACTIONS, None\n"
       "        wanted = frozenset(partitions)",
       "wanted = frozenset(partitions)",
       "no partition joins a transaction whose end is decided (PrepareCommit/PrepareAbort): the request waits "
       "(CONCURRENT_TRANSACTIONS)",
       "KIP-98 (transaction states); Kafka's TransactionCoordinator handleAddPartitionsToTransaction",
       "trace: txn-marker-not-as-decided (the decided transaction turns Ongoing, its Complete is never "
       "written and its markers outlive it); history: a record of the next transaction committed with the "
       "previous one, or stuck; needs a producer to add a partition while its commit's markers are in flight"),
    _m("txn-verify-any-partition", TXN,
       "return rpc.NONE if s.state == ONGOING and partition in s.partitions else rpc.INVALID_TXN_STATE",
       "return rpc.NONE if s.state == ONGOING else rpc.INVALID_TXN_STATE",
       "KIP-890 part 1: a transactional batch may open a transaction at a partition only if the producer's "
       "ongoing transaction lists that partition",
       "KIP-890 part 1 (AddPartitionsToTxn v4 verify_only); txn_shell.py verify_produce",
       "trace: produce-after-fence or read-committed-open-txn when a late produce opens a hanging transaction; "
       "probably nothing: the workload adds every partition before it sends"),
    # --- the transaction shell: markers and the state log (txn_shell.py) ----------------------------------
    _m("txn-markers-first-partition-only", TXN_SHELL,
       "left = set(job.partitions)",
       "left = set(sorted(job.partitions)[:1])",
       "every partition of a decided transaction gets its marker before the transaction is complete",
       "KIP-98 (WriteTxnMarkers to every partition); txn_shell.py _complete; issue 40",
       "trace: txn-marker-not-as-decided (a completed transaction without a marker at one of its "
       "partitions); history: records of a committed transaction never readable (read_committed stalls), "
       "an aborted read when a later marker of the producer ends them"),
    _m("txn-marker-acks-1", TXN_SHELL,
       "err, offset, _ = await self.b.produce(key[0], key[1], raw, validate_batches(raw), -1, WRITE_TIMEOUT_S)",
       "err, offset, _ = await self.b.produce(key[0], key[1], raw, validate_batches(raw), 1, WRITE_TIMEOUT_S)",
       "a partition leader writes a transaction marker with acks=all, so a leader change cannot lose it",
       "002 2.5 (acks=all); KIP-98 (markers are replicated like data); txn_shell.py write_marker",
       "trace: ack-above-hwm on the marker's produce_acked; history when the leader dies before followers "
       "copy the marker (the transaction's records never become readable, or an aborted read)"),
    _m("txn-state-acks-1", TXN_SHELL,
       "raw,\n                                         validate_batches(raw), -1, WRITE_TIMEOUT_S)",
       "raw,\n                                         validate_batches(raw), 1, WRITE_TIMEOUT_S)",
       "the coordinator applies a transaction state record (PrepareCommit above all) only once acks=all "
       "committed it, so a fail-over keeps every decided outcome",
       "002 2.5, 2.8; KIP-98 (the transaction log); txn_shell.py _write_record",
       "trace: ack-above-hwm on __transaction_state; txn-marker-not-as-decided when a new coordinator that "
       "lost the PrepareCommit aborts a transaction some of whose partitions got commit markers; history: "
       "a transaction half committed (kill-txn-coordinator)"),
    # --- the group coordinator (Kafka's classic protocol; group_coordinator.py's docstring) -----------------
    _m("group-commit-stale-generation", GROUPS,
       "m = g.members.get(member_id)\n        if m is None:\n            return rpc.UNKNOWN_MEMBER_ID\n"
       "        if generation_id != g.generation_id:",
       "m = g.members.get(member_id)\n        if m is None:\n            return rpc.UNKNOWN_MEMBER_ID\n"
       "        if generation_id > g.generation_id:",
       "an offset commit is accepted only from the group's current generation (ILLEGAL_GENERATION otherwise)",
       "Kafka's GroupCoordinator.handleCommitOffsets; KIP-98/KIP-447 (fencing zombie members)",
       "trace: offset-commit-stale-generation once a rebalance leaves a member committing with the generation "
       "before (a member paused past its session, or leaving and joining); history: records consumed twice "
       "or skipped in subscribe mode"),
    _m("group-commit-to-empty-group", GROUPS,
       "if g is None or (generation_id < 0 and g.state == EMPTY):\n            if generation_id >= 0:",
       "if g is None or g.state == EMPTY:\n            if generation_id >= 0 and g is None:",
       "a group without members takes commits only from consumers that assign partitions themselves "
       "(generation -1); a member of a generation that ended is refused",
       "Kafka's GroupCoordinator.handleCommitOffsets (Empty group: generation -1 only)",
       "trace: offset-commit-stale-generation when a member whose session expired commits after the group "
       "emptied (members paused past the session timeout); history: a rewound offset"),
    _m("group-oldest-commit-wins", GROUPS,
       "old = g.offsets.get(tp)\n        if old is None or record_offset > old.record_offset:",
       "old = g.offsets.get(tp)\n        if old is None:",
       "a group's committed offset of a partition is its newest commit (the last record in __consumer_offsets)",
       "Kafka's GroupMetadataManager (the offsets log is compacted: the last record of a key wins)",
       "trace: offset-fetch-not-committed (the group fetches an offset older than one accepted); history: "
       "records consumed again after every rebalance in subscribe mode"),
    _m("group-generation-not-bumped", GROUPS,
       "g.generation_id += 1",
       "g.generation_id += 0",
       "every completed rebalance starts a new generation (generation ids only grow)",
       "Kafka's GroupMetadata.initNextGeneration; the classic protocol's fencing of old members",
       "trace: group-generation-reused on the second rebalance of a group; history only if a member of an "
       "older generation then commits over the new owner's offsets"),
    # --- producer state: sequences, fencing, the LSO (producer_state.py) ------------------------------------
    _m("lso-ignores-open-txn", PRODUCERS,
       "return min([hwm, *self.ongoing.values()])",
       "return hwm",
       "the LSO is min(HWM, the first offset of every open transaction): read_committed reads stop below it",
       "KIP-98; 002 2.2.2 and 2.7 (the LSO); producer_state.py last_stable_offset",
       "trace: read-committed-open-txn (a read_committed fetch served records of a transaction whose marker "
       "was not yet below the HWM); history: aborted reads (G1a) with the txn workload"),
    _m("producer-stale-epoch-accepted", PRODUCERS,
       "if h.producer_epoch < e.epoch:\n            return rpc.INVALID_PRODUCER_EPOCH, None",
       "if h.producer_epoch < e.epoch:\n            pass  # an older epoch: its sequence decides",
       "a partition leader refuses a produce at a producer epoch below the one it holds for that producer",
       "KIP-98 (producer fencing); producer_state.py check",
       "trace: produce-after-fence after a fencing marker (stall-producer-past-txn-timeout); history: a "
       "zombie's records in a later transaction (aborted or phantom reads)"),
    _m("sequence-gap-accepted", PRODUCERS,
       "if h.base_sequence != (e.last_sequence + 1) % (2**31):",
       "if h.base_sequence <= e.last_sequence:",
       "a batch whose sequence does not follow the producer's last one is refused "
       "(OUT_OF_ORDER_SEQUENCE_NUMBER)",
       "KIP-98 (idempotent producer); PROTOCOL.md 10",
       "history: a reordered or lost batch of an idempotent producer (the txn workload's producers retry); "
       "probably nothing: a gap needs a lost batch before a retry"),
    _m("abort-index-lists-commits", PRODUCERS,
       "if first is not None and not commit:",
       "if first is not None and commit:",
       "the aborted-transaction index that read_committed fetches return lists the aborted transactions only",
       "KIP-98 (aborted transaction index); producer_state.py _record_marker",
       "history: committed records dropped by read_committed consumers (lost writes) and aborted ones read "
       "(G1a) with the txn workload"),
)


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}
