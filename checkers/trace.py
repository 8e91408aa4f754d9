"""The protocol's rules checked from the inside: every decision in the nodes' protocol traces.

Client histories see only what leaders serve; a broken rule in the HWM or ISR logic can leave them
clean for minutes, because the window in which it loses data is narrow. Our broker writes every
protocol decision with the facts it was made on (clusters/broker/trace.py has the format), and this
checker judges each decision against the rule it must follow, as far as the trace shows (a SIGKILL
loses the last 100 ms of a node's trace; a rule whose facts are missing is not judged):

- hwm-past-member-leo: an HWM advance passes the LEO of a Maximal ISR member, or counts a follower's
  fetch recorded in another leader epoch (002 2.7; PROTOCOL.md 3 "Advance rule (KIP-966)", 1:
  follower state is reset on every epoch change).
- hwm-advanced-below-min-isr: an HWM advance while the committed ISR is below min ISR (KIP-966;
  PROTOCOL.md 3, 9.10).
- isr-expansion-ineligible: a follower proposed for the ISR that did not fetch in the current leader
  epoch, whose LEO had not reached the HWM and the LESO, or whose fetches carried a broker epoch other
  than the one the leader's metadata registers (002 2.9; PROTOCOL.md 4 "Expand", 9.6 KIP-903, 9.8).
- ack-above-hwm: an acks=all write acknowledged before the HWM passed its last offset (002 2.5;
  PROTOCOL.md 3 "acks=all").
- ack-below-min-isr: an acks=all write acknowledged while the ISR was below min ISR (002 2.6).
- read-above-hwm: a consumer served an offset at or above the HWM (002 2.7; whatever its isolation: the
  LSO is never above the HWM, read-committed-above-lso below judges read_committed against the LSO).
- leader-not-from-isr: a clean election chose a leader outside the ISR and the ELR, or not eligible
  (002 2.8; 001 5.2; PROTOCOL.md 4 "Election"); an unclean choice must be flagged as such (004, 001
  5.3.2), and those are listed in the stats, not counted.
- leader-incomplete: a replica became leader of a clean epoch with a log end offset below an HWM a
  leader of an earlier epoch had reached (TLA+ LeaderCompleteness, PROTOCOL.md 8; the True HWM is
  counted from the last unclean election on, which may lose it by design).
- truncated-below-hwm: a replica truncated its log below its own HWM, removing committed records, with no
  unclean election of the partition before it (PROTOCOL.md 2 and 3: a replica's HWM is committed; 004
  and KIP-101: truncation only of an uncommitted divergent suffix). Not judged: a replica whose own start-up
  recovery cut that partition's log (`log-recovery-truncated`), from that cut until it is back in the ISR or
  leads the partition. Its files were damaged, and damage reaches below the cut where no CRC looks (the batch
  header's partitionLeaderEpoch is outside the CRC-32C, as in Kafka, so a flipped bit there survives recovery
  as an epoch no leader gave and a later fetch finds the divergence); such a replica is an out-of-sync
  follower, excluded from leadership, the ISR and the ELR until it has caught up, and it recovers what it
  lost by replication (001 5.1.2 Unclean Exclusion, 5.2 and its Case E; PROTOCOL.md 5.3, 6, 8; server.py
  registers the restart unclean). Those truncations are listed in the details (`repairs_after_recovery_cut`).
- log-matching: two replicas' epoch caches give one leader epoch different start offsets (TLA+
  LogMatching, PROTOCOL.md 8: records of one epoch are written by its one leader, so equal
  (offset, epoch) means the same batch).
- epoch-reuse: two brokers became leader of one partition in the same leader epoch; an active
  controller's elections of a partition did not strictly increase its leader epoch; a broker epoch
  was given twice or did not increase (PROTOCOL.md 1 "Epochs", 8 "Epochs").
- hwm-regressed: a leader moved its HWM backwards (PROTOCOL.md 3 "advance rule": newHWM > HWM; 8
  "Consistent reads": a served offset stays served).
- hwm-above-leo: a replica's HWM above its own LEO when it changed role or at an HWM checkpoint (PROTOCOL.md
  2 "Follower": HWM = min(leader's HWM, LEO); 002 2.7).
- elr-at-min-isr: a partition change left an ELR or LastKnownELR beside an ISR at or above min ISR
  (PROTOCOL.md 8 "Controller structure": |ISR| >= MinISR => ELR empty; 4 "ELR").
- elr-dropped-removed: a partition change below min ISR dropped a replica from the ISR without
  putting it into the ELR, other than by an unclean restart, an unclean election or a reassignment
  (PROTOCOL.md 4 "ELR", 6 KIP-966; 001 5.2).
- fenced-in-isr: a broker the controller fenced was still in an ISR once the controller had acted on
  the fencing (by its next broker event) (PROTOCOL.md 4 "Shrink", 5.4, 8 "Controller structure").
  The controller's state of a partition is what its partition_change lines said last, read from
  each activation on (a killed controller's unflushed tail cannot leave a stale ISR behind).
- alter-partition-stale: the controller accepted an AlterPartition whose partition epoch was not the
  partition's, or that added a member with a broker epoch other than its registered one (PROTOCOL.md
  4 "AlterPartition": INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA; 9.6 KIP-903; 9.8). The request is
  the leader's last alter_partition_sent of the partition before the change that proposed its ISR.
- follower-state-not-reset: a new leader started its epoch with follower state (a fetch recorded in an
  earlier epoch) instead of none (PROTOCOL.md 1, 4 "Expand", 9.8; 002 2.9).
- leader-epoch-not-cached: a new leader's epoch cache did not start its leader epoch at once
  (PROTOCOL.md 2, trap KAFKA-7415: a follower asking before the first append would be told the
  previous epoch's end).
- truncated-past-epoch-end: a follower told it diverged kept records of an epoch above the leader's
  diverging epoch: it cut at the leader's end offset rather than at min(its own end of that epoch,
  the leader's) (PROTOCOL.md 2 "Follower, on divergence", KIP-279; 9.3 KAFKA-6361).
- registration-clean: the controller called a restart clean without the clean-shutdown file's broker
  epoch (the epoch it last gave that broker), or unclean with it (PROTOCOL.md 5.1-5.2, 6 "Unclean
  Exclusion"; 001 5.2). Judged only where the trace shows the broker's previous registration and no
  unregistration (decommission) since.

Transactions and groups (KIP-98; the seeds name the LSO, 002 2.2.2 and 2.7, and leave transactions out):
- txn-abort-not-fenced: an abort the transaction coordinator started itself (the transaction timed out, or
  an InitProducerId found it open) wrote its markers at the epoch the transaction ran under: Kafka's
  coordinator bumps it (TransactionCoordinator's abort of timed-out transactions and handleInitProducerId
  prepare a fenced epoch), so the producer, unaware, cannot carry a late produce of the aborted
  transaction into its next one (KIP-890's hanging transaction). An epoch already at Short.MaxValue
  cannot be bumped: not judged.
- init-not-fenced: an InitProducerId of a transactional id that had a producer answered its producer id
  with the same or a lower epoch, so the previous producer of the id (a zombie) is not fenced (KIP-98).
  A new producer id (Kafka's answer to an exhausted epoch) is a fence. KIP-360's retry, a request naming
  (P, E-1) answered (P, E) again, is one only where the answer (P, E) the trace shows last for the id
  went to a request naming (P, E-1) (Kafka's lastProducerEpoch); where that answer is not in the trace
  it is not judged.
- read-committed-above-lso: a read_committed consumer was served an offset at or above the partition's
  LSO, the first offset of an open transaction (KIP-98; 002 2.2.2: the LSO ends the consumable prefix).
- offset-commit-unreplicated: an OffsetCommit was answered while the HWM of its __consumer_offsets
  partition had not passed the commit's records, so a coordinator fail-over may lose it (002 2.5: acks=all;
  Kafka writes offsets with offsets.commit.required.acks=-1).
- txn-write-unreplicated (issue 40): a transaction marker (a control batch) or a __transaction_state record was
  acknowledged to the transaction coordinator before the HWM passed it, under any acks: a leader change then
  loses a decided outcome or a marker (002 2.5: acks=all; Kafka's coordinator appends both with requiredAcks -1,
  TransactionStateManager and WriteTxnMarkers). An acks=all write is ack-above-hwm's.
- produce-after-fence: a partition leader accepted a produce of producer id P at an epoch below that of
  a marker for P at a lower offset of the same partition (KIP-98: a marker's epoch fences the older ones
  at the partition; KIP-890: a late produce of an aborted transaction). Offsets, not times, order them:
  a marker is traced once acknowledged (committed), so every leader of a later clean epoch has it below
  what it appends; from an unclean election after the marker on, a produce is not judged.
- txn-marker-not-as-decided (issue 40): a transaction marker written at the other result than the coordinator's
  last decision for its producer and partition at that epoch; one transaction (transactional id, producer id,
  epoch, and when its first partition was added, `txn_started_ms`) decided both ways (a decision lost in a
  fail-over and made again otherwise: half committed); a transaction completed (`txn_completed`: every marker
  written) with no marker at one of its partitions at its epoch and result since the decision (KIP-98's two
  phases: WriteTxnMarkers to every partition of the transaction). A completion is judged only if no broker process
  ended between the decision and the completion (its unflushed tail may hold the marker); a partition where a
  marker of a higher epoch came first is not judged (Kafka's coordinator drops a marker the partition refuses as
  older).
- read-committed-open-txn (issue 40): a read_committed consumer was served a transactional batch whose
  transaction had no marker in the leader's log then. The LSO is not taken from the line (the leader's own
  computation is what is checked): per partition and producer, a batch acknowledged with acks=all at offset f is
  open until the producer's first marker after f; if that marker's offset is at or above the LEO the leader
  reported with the fetch, it was not yet appended when the leader served, and a served batch at or above the
  marker before it was open. By offsets, not times: committed offsets do not move. Not judged: a batch whose
  ending marker the trace lacks, a batch whose transaction a coordinator decided between its acknowledgement and
  the fetch (its marker may be in the log with no line: an append whose wait for the HWM failed is not traced),
  and partitions with an unclean election. A marker appended but not yet below the
  HWM decides the transaction for this broker (its LSO passes it then; Kafka waits for the marker's replication).
- offset-commit-stale-generation (issue 40): the group coordinator accepted an offset commit
  (`offset_commit_accepted`, written when it checks the commit, before the write) naming a generation other than
  the group's last on that coordinator (`group_generation`), or a member not in it; a group without members (Empty)
  takes generation -1 only, and a coordinator that has not completed a generation of the group since it (re)loaded
  the group's partition (`groups_loading`) knows no member (Kafka's handleCommitOffsets: ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID). A member removed since its generation began is not known to the trace: not judged.
- group-generation-reused (issue 40): a coordinator completed a generation of a group not above its previous one
  (since its process started and the partition was last loaded): a member of the older generation passes as
  current (Kafka's GroupMetadata.initNextGeneration).
- offset-fetch-not-committed (issue 40): an OffsetFetch answered (`offset_fetch_answered`, with each offset's
  record in __consumer_offsets) a partition's offset from a record older than the last commit acknowledged to the
  group before it (`offset_commit_acked`, which names the offsets and where their records are), the same record
  with another offset, or no offset at all (002 2.5: an acknowledged write survives a fail-over; the newest record
  of a key wins). A newer record than the acknowledged one passes (a commit answered with an error may still
  have committed, a transactional commit may have come after). Not judged after an unclean election of the
  group's partition.
- producer-epoch-regressed (issue 40): a transactional id's producer id was answered (`txn_init_producer_id`),
  decided (`txn_end_started`) or completed (`txn_completed`) at an epoch below one the coordinators had used for it
  before: a coordinator whose state went back (a stale load) gives out an epoch a fenced producer still holds
  (KIP-98: epochs only grow).
- log-shorter-after-restart (issue 40): a broker's start (`logs_loaded`: each log's end) found a log ending below
  the HWM its previous process last checkpointed for it (`hwm_checkpointed`). Explained, and not judged: a power
  cut since the previous start (the node's lossy file system's count of drops, which the broker reads at
  start-up, grew, or cannot be compared), start-up recovery cutting that log (damage), or a truncation of it by
  the previous process after the checkpoint (an unclean election's). A cut of a segment on a batch boundary by
  the disk faults leaves no recovery cut: under `disk` and `file-corruption` such a restart would be named too.

The ELR rules and the last-member exception of fenced-in-isr follow the controller's `no-elr` variant
(its trace_started line), under which there is no ELR and the last ISR member stays.

Each anomaly's examples carry the trace lines that prove it: node, line number, event and facts.

Inputs (issue 22): a run of our broker (test.json's `protocol_trace`) must have every node's trace; a
node whose trace is missing or unreadable makes the verdict unknown with one sentence (a violation
found in the traces that were read still makes it false). A cluster that writes no trace (one we did
not build) is not applicable: valid, with a note in stats. Pure: `check_traces` takes the parsed lines
(clusters/trace_files.py reads them into CheckContext.data["trace"]).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from kafkaesque_harness.checkers.clients import CLIENT
from kafkaesque_harness.checkers.core import (
    MAX_EXAMPLES,
    UNKNOWN,
    Anomaly,
    CheckContext,
    Result,
    missing_node_files,
)
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.history import Op

TRACE = "trace"  # the checker's name, and its input's name in CheckContext.data
NO_LEADER = -1
NOT_APPLICABLE = ("the cluster writes no protocol trace (a Kafka-protocol system we did not build), so the "
                  "protocol's rules are not checked from the inside on this run")
TRUNCATIONS = ("truncated_on_divergence", "truncate_to_hw_variant", "truncated_to_leader_leo_variant")
EPOCH_CACHE_EVENTS = ("become_leader", "become_follower", "follower_epoch_appended") + TRUNCATIONS

RULES: dict[str, str] = {
    "hwm-past-member-leo": "the HWM advanced past a Maximal ISR member's LEO, or on a fetch from another leader "
                           "epoch (002 2.7; PROTOCOL.md 3, advance rule of KIP-966)",
    "hwm-advanced-below-min-isr": "the HWM advanced while the committed ISR was below min ISR (KIP-966; PROTOCOL.md "
                                  "3, 9.10)",
    "isr-expansion-ineligible": "a follower was proposed for the ISR without a fetch in the current leader epoch "
                                "that reached the HWM and the LESO (002 2.9; PROTOCOL.md 4 Expand, 9.8)",
    "ack-above-hwm": "an acks=all write was acknowledged before the HWM passed it (002 2.5; PROTOCOL.md 3)",
    "ack-below-min-isr": "an acks=all write was acknowledged with the ISR below min ISR (002 2.6; PROTOCOL.md 3)",
    "read-above-hwm": "a consumer was served records at or above the HWM (002 2.7)",
    "leader-not-from-isr": "a clean election chose a leader outside the ISR and ELR, or an ineligible one (002 2.8; "
                           "001 5.2; PROTOCOL.md 4 Election)",
    "leader-incomplete": "a leader of a clean epoch lacked offsets below an HWM an earlier leader had reached "
                         "(TLA+ LeaderCompleteness; PROTOCOL.md 8)",
    "truncated-below-hwm": "a replica truncated committed records below its own HWM with no unclean election "
                           "before it, nor its own start-up recovery cutting that log since it was last in sync "
                           "(PROTOCOL.md 2, 3; 004, KIP-101; 001 5.1.2)",
    "log-matching": "two replicas' epoch caches start one leader epoch at different offsets (TLA+ LogMatching; "
                    "PROTOCOL.md 8)",
    "epoch-reuse": "a leader epoch or broker epoch was used twice or went backwards (PROTOCOL.md 1 and 8, Epochs)",
    "hwm-regressed": "a leader moved its HWM backwards (PROTOCOL.md 3, advance rule: newHWM > HWM; 8, Consistent "
                     "reads)",
    "hwm-above-leo": "a replica's HWM was above its own LEO (PROTOCOL.md 2, Follower: HWM = min(leader HWM, LEO); "
                     "002 2.7)",
    "elr-at-min-isr": "an ELR or LastKnownELR was kept beside an ISR at or above min ISR (PROTOCOL.md 8, Controller "
                      "structure; 4, ELR)",
    "elr-dropped-removed": "a replica left an ISR below min ISR without joining the ELR (PROTOCOL.md 4, ELR; 6, "
                           "KIP-966; 001 5.2)",
    "alter-partition-stale": "the controller accepted an AlterPartition with a stale partition epoch or a stale "
                             "broker epoch for an added member (PROTOCOL.md 4, AlterPartition; 9.6 KIP-903; 9.8)",
    "follower-state-not-reset": "a new leader kept follower state from an earlier epoch (PROTOCOL.md 1, 4 Expand; "
                                "002 2.9: follower state is cleared on every epoch change)",
    "leader-epoch-not-cached": "a new leader did not start its leader epoch in its epoch cache at once "
                               "(PROTOCOL.md 2, trap KAFKA-7415)",
    "truncated-past-epoch-end": "a follower truncating on divergence kept records of an epoch above the leader's "
                                "diverging epoch (PROTOCOL.md 2, KIP-279; 9.3)",
    "registration-clean": "a registration was judged clean without the broker epoch of its clean shutdown, or "
                          "unclean with it (PROTOCOL.md 5.1-5.2, 6; 001 5.2)",
    "fenced-in-isr": "a fenced broker stayed in an ISR after the controller acted on its fencing (PROTOCOL.md 4, "
                     "Shrink; 5.4; 8, Controller structure)",
    "txn-abort-not-fenced": "an abort the transaction coordinator started (timeout or re-init) wrote its markers at "
                            "the epoch the transaction ran under instead of a bumped one (KIP-98; Kafka's "
                            "TransactionCoordinator fences the producer; KIP-890)",
    "init-not-fenced": "an InitProducerId of a transactional id that had a producer answered the same or a lower "
                       "epoch of its producer id: the previous producer is not fenced (KIP-98 zombie fencing; "
                       "KIP-360)",
    "read-committed-above-lso": "a read_committed consumer was served an offset at or above the LSO (KIP-98; 002 "
                                "2.2.2)",
    "offset-commit-unreplicated": "an OffsetCommit was answered before the HWM of its __consumer_offsets partition "
                                  "passed the commit (002 2.5; Kafka's offsets.commit.required.acks=-1)",
    "txn-write-unreplicated": "a transaction marker or transaction state record was acknowledged to the coordinator "
                              "before the HWM passed it (002 2.5; KIP-98: the coordinator writes both with acks=all)",
    "produce-after-fence": "a partition leader accepted a produce of a producer at an epoch below that of a marker "
                           "it already had for the producer (KIP-98 producer fencing; KIP-890)",
    "txn-marker-not-as-decided": "a transaction marker carried another result than its transaction's decision, one "
                                 "transaction was decided both ways, or a transaction was completed without its "
                                 "marker at one of its partitions (KIP-98 two-phase commit: WriteTxnMarkers to every "
                                 "partition at the decided result and epoch)",
    "read-committed-open-txn": "a read_committed consumer was served a transactional batch whose marker was not yet in "
                               "the leader's log: the LSO the leader used was above an open transaction (KIP-98; 002 "
                               "2.2.2)",
    "offset-commit-stale-generation": "an offset commit was accepted from a generation or member other than the "
                                      "group's current one (Kafka's classic group protocol: ILLEGAL_GENERATION, "
                                      "UNKNOWN_MEMBER_ID; an Empty group takes generation -1 only)",
    "group-generation-reused": "a rebalance completed a generation not above the group's previous one on the same "
                               "coordinator (Kafka's GroupMetadata.initNextGeneration: generations only grow)",
    "offset-fetch-not-committed": "an OffsetFetch answered an offset older than a commit already acknowledged to the "
                                  "group, or none at all (002 2.5: an acknowledged write survives; the newest commit "
                                  "of a partition wins)",
    "producer-epoch-regressed": "a transactional id's producer was answered, decided or completed at an epoch below "
                                "one the coordinators had already used for it (KIP-98: epochs only grow, a bump fences "
                                "the older ones)",
    "log-shorter-after-restart": "a broker restarted with a log ending below the HWM it had checkpointed for it, with no "
                                 "power cut, recovery cut or truncation to explain it (002 2.7: the HWM is committed; "
                                 "001 5.1: only a lossy unclean shutdown loses synced-as-committed data)",
    "sequence-reused": "the client sent other records under a (producer id, epoch, sequence) the partition already "
                       "held, so the leader answered them as a retry with the earlier batch's offsets and never "
                       "wrote them: the client broke the idempotent producer's contract (KIP-98: a sequence number "
                       "names one batch; a producer that cannot know whether a batch landed must bump its epoch); "
                       "Kafka's broker answers the same way",
}
# The rules whose broken contract is the client's, though the broker's trace proves it: the broker did what Kafka's
# does with what it was sent (checkers/clients.py: the anomaly is the client's, not the broker's).
CLIENT_RULES = frozenset({"sequence-reused"})
# Kafka's producer epoch is an int16: an epoch at Short.MaxValue cannot be bumped (a new producer id is given).
MAX_PRODUCER_EPOCH = 32767
NO_ELR = "no-elr"  # the controller variant without the ELR (3.5's rules: the last ISR member stays)


def _cite(node: str, e: dict[str, Any], *keys: str) -> dict[str, Any]:
    """One proving trace line: where it is, what it says (the facts the rule read)."""
    out: dict[str, Any] = {"node": node, "line": e.get("line"), "event": e.get("event")}
    if isinstance(e.get("mono"), (int, float)):
        out["mono"] = e["mono"]  # when the node decided (its monotonic clock): the time of the proof
    for k in ("topic", "partition", "leader_epoch", *keys):
        if k in e:
            out[k] = e[k]
    return out


def _where(e: dict[str, Any]) -> str:
    return f"{e.get('topic')}-{e.get('partition')}"


class _Found:
    def __init__(self) -> None:
        self.by_rule: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(self, rule: str, summary: str, *lines: dict[str, Any]) -> None:
        self.by_rule[rule].append({"summary": summary, "trace": list(lines)})

    def anomalies(self) -> list[Anomaly]:
        out = []
        for rule, found in sorted(self.by_rule.items()):
            examples = found[:MAX_EXAMPLES]
            whose = None  # the broker's: checkers/clients.py attribute_with_trace marks them so
            if rule in CLIENT_RULES:
                whose = {CLIENT: len(found)}
                examples = [{**ex, "whose": CLIENT} for ex in examples]
            out.append(Anomaly(rule, len(found), examples, RULES[rule], whose=whose))
        return out


# --- leaders' decisions, one line at a time ------------------------------------------------------------------
def _hwm_advance(node: str, e: dict[str, Any], found: _Found) -> None:
    members = e.get("members") or {}
    epoch, to = e.get("leader_epoch"), e.get("to")
    if isinstance(to, int) and isinstance(e.get("from"), int) and to < e["from"]:
        found.add("hwm-regressed", f"{node} moved the HWM of {_where(e)} back from {e['from']} to {to} in leader "
                                   f"epoch {epoch}", _cite(node, e, "from", "to", "maximal_isr", "members"))
    for m in e.get("maximal_isr") or []:
        f = members.get(str(m))
        if f is None:
            continue
        if f.get("leo", -1) < to or f.get("fetch_epoch") != epoch:
            found.add("hwm-past-member-leo",
                      f"{node} advanced the HWM of {_where(e)} to {to} in leader epoch {epoch}, but Maximal ISR "
                      f"member {m} had LEO {f.get('leo')} recorded in leader epoch {f.get('fetch_epoch')}",
                      _cite(node, e, "from", "to", "maximal_isr", "members"))
            break
    isr, min_isr = e.get("isr"), e.get("min_isr")
    if isinstance(isr, list) and isinstance(min_isr, int) and len(isr) < min_isr:
        found.add("hwm-advanced-below-min-isr",
                  f"{node} advanced the HWM of {_where(e)} to {to} with ISR {isr}, below min ISR {min_isr}",
                  _cite(node, e, "from", "to", "isr", "min_isr"))


def _isr_expansion(node: str, e: dict[str, Any], found: _Found) -> None:
    hwm, leso, epoch = e.get("hwm", 0), e.get("leso", 0), e.get("leader_epoch")
    for r, f in sorted((e.get("added") or {}).items()):
        why = []
        if f.get("fetch_epoch") != epoch:
            why.append(f"its last fetch was in leader epoch {f.get('fetch_epoch')}, not {epoch}")
        if f.get("leo", -1) < hwm:
            why.append(f"its LEO {f.get('leo')} is below the HWM {hwm}")
        if f.get("leo", -1) < leso:
            why.append(f"its LEO {f.get('leo')} is below the LESO {leso}")
        registered = f.get("registered_broker_epoch")
        if isinstance(registered, int) and f.get("broker_epoch") != registered:
            why.append(f"its fetch's broker epoch {f.get('broker_epoch')} is not the registered {registered} (KIP-903)")
        if why:
            found.add("isr-expansion-ineligible",
                      f"{node} proposed follower {r} for the ISR of {_where(e)}: " + "; ".join(why),
                      _cite(node, e, "from", "to", "hwm", "leso", "added"))


def _reused_sequence(node: str, e: dict[str, Any], found: _Found) -> None:
    if e.get("duplicate") and e.get("same_batch") is False:
        found.add("sequence-reused",
                  f"{node} answered producer {e.get('producer_id')} (epoch {e.get('producer_epoch')}, sequence "
                  f"{e.get('base_sequence')}) on {_where(e)} with offsets {e.get('first')}..{e.get('last')} of an "
                  "earlier batch with other records: the new records were acknowledged and never written",
                  _cite(node, e, "first", "last", "producer_id", "producer_epoch", "base_sequence", "duplicate",
                        "same_batch"))


TXN_STATE_TOPIC = "__transaction_state"


def _ack(node: str, e: dict[str, Any], found: _Found) -> None:
    _reused_sequence(node, e, found)
    if e.get("acks") != -1:
        if ((e.get("control") or e.get("topic") == TXN_STATE_TOPIC)
                and isinstance(e.get("last"), int) and isinstance(e.get("hwm"), int) and e["last"] >= e["hwm"]):
            what = "transaction marker" if e.get("control") else "transaction state record"
            found.add("txn-write-unreplicated",
                      f"{node} acknowledged the {what} at offsets {e.get('first')}..{e.get('last')} of {_where(e)} "
                      f"(acks={e.get('acks')}) with the HWM at {e.get('hwm')}",
                      _cite(node, e, "first", "last", "hwm", "acks", "control"))
        return
    if e.get("last", 0) >= e.get("hwm", 0):
        found.add("ack-above-hwm", f"{node} acknowledged offsets {e.get('first')}..{e.get('last')} of {_where(e)} "
                                   f"(acks=all) with the HWM at {e.get('hwm')}",
                  _cite(node, e, "first", "last", "hwm", "acks"))
    if e.get("isr_size", 0) < e.get("min_isr", 0):
        found.add("ack-below-min-isr", f"{node} acknowledged offsets {e.get('first')}..{e.get('last')} of "
                                       f"{_where(e)} (acks=all) with {e.get('isr_size')} ISR member(s), below min "
                                       f"ISR {e.get('min_isr')}",
                  _cite(node, e, "first", "last", "isr_size", "min_isr"))


def _divergence(node: str, e: dict[str, Any], found: _Found) -> None:
    div = e.get("diverging_epoch")
    if not isinstance(div, dict) or not isinstance(div.get("epoch"), int):
        return
    later = [entry for entry in e.get("epoch_cache") or [] if entry[0] > div["epoch"]]
    if later:
        found.add("truncated-past-epoch-end",
                  f"{node} truncated {_where(e)} from {e.get('from')} to {e.get('to')} on the leader's diverging epoch "
                  f"{div['epoch']} (ending at {div.get('end_offset')}) but kept epoch(s) {[x[0] for x in later]} "
                  f"starting below the cut", _cite(node, e, "from", "to", "diverging_epoch", "epoch_cache"))


def _consumer_fetch(node: str, e: dict[str, Any], found: _Found) -> None:
    if e.get("last", -1) >= e.get("hwm", 0):
        found.add("read-above-hwm", f"{node} served a consumer offsets {e.get('first')}..{e.get('last')} of "
                                    f"{_where(e)} with the HWM at {e.get('hwm')}",
                  _cite(node, e, "offset", "first", "last", "hwm", "bound"))
    lso = e.get("lso")
    if e.get("isolation") == "read_committed" and isinstance(lso, int) and e.get("last", -1) >= lso:
        found.add("read-committed-above-lso",
                  f"{node} served a read_committed consumer offsets {e.get('first')}..{e.get('last')} of {_where(e)} "
                  f"with the LSO at {lso} (an open transaction's records; bound {e.get('bound')}, HWM {e.get('hwm')})",
                  _cite(node, e, "offset", "first", "last", "isolation", "bound", "lso", "hwm"))


def _offset_commit(node: str, e: dict[str, Any], found: _Found) -> None:
    hwm_ = e.get("hwm")
    if isinstance(hwm_, int) and e.get("last", -1) >= hwm_:
        found.add("offset-commit-unreplicated",
                  f"{node} answered an OffsetCommit of group {e.get('group')!r} (records {e.get('first')}.."
                  f"{e.get('last')} of {_where(e)}, acks={e.get('acks')}) with the HWM at {hwm_}",
                  _cite(node, e, "group", "generation", "first", "last", "hwm", "acks"))


def _txn_end(node: str, e: dict[str, Any], found: _Found) -> None:
    txn_epoch, marker_epoch = e.get("txn_epoch"), e.get("marker_epoch")
    if (e.get("result") != "abort" or e.get("started_by") not in ("timeout", "re-init")
            or not isinstance(txn_epoch, int) or not isinstance(marker_epoch, int) or txn_epoch >= MAX_PRODUCER_EPOCH):
        return
    if marker_epoch <= txn_epoch:
        found.add("txn-abort-not-fenced",
                  f"{node} began aborting transaction {e.get('transactional_id')!r} (producer {e.get('producer_id')}, "
                  f"started by {e.get('started_by')}) with markers at epoch {marker_epoch}, the transaction ran under "
                  f"epoch {txn_epoch}: its producer is not fenced",
                  _cite(node, e, "transactional_id", "producer_id", "txn_epoch", "marker_epoch", "started_by",
                        "coordinator_epoch"))


def _election(node: str, e: dict[str, Any], found: _Found) -> None:
    leader, how = e.get("leader"), e.get("how")
    if leader is None or leader == NO_LEADER or e.get("unclean"):
        return
    isr, elr = e.get("isr") or [], e.get("elr") or []
    if how == "reassignment":
        return  # the leader stays; only its epoch is bumped (PROTOCOL.md 7)
    candidates = e.get("candidates")
    outside = leader not in isr and (how == "preferred" or leader not in elr)
    ineligible = isinstance(candidates, list) and leader not in candidates
    if outside or ineligible:
        what = "outside the ISR" + ("" if how == "preferred" else " and the ELR") if outside else "not eligible"
        found.add("leader-not-from-isr",
                  f"{node} elected {leader} leader of {_where(e)} in epoch {e.get('leader_epoch')} ({how}), "
                  f"{what}: ISR {isr}, ELR {elr}, eligible {candidates}",
                  _cite(node, e, "leader", "how", "isr", "elr", "last_known_elr", "candidates", "unclean"))


def _role_change(node: str, e: dict[str, Any], found: _Found) -> None:
    kept = {r: ep for r, ep in (e.get("followers") or {}).items() if ep != -1}
    if e.get("event") == "become_leader" and kept:
        found.add("follower-state-not-reset", f"{node} became leader of {_where(e)} in epoch {e.get('leader_epoch')} "
                                              f"keeping follower state of earlier epochs: {kept}",
                  _cite(node, e, "from", "to", "followers"))
    cache = e.get("epoch_cache")
    if e.get("event") == "become_leader" and isinstance(cache, list) and isinstance(e.get("leader_epoch"), int):
        if not cache or cache[-1][0] != e["leader_epoch"]:
            found.add("leader-epoch-not-cached", f"{node} became leader of {_where(e)} in epoch {e['leader_epoch']} "
                                                 f"with epoch cache {cache} (no entry for its own epoch)",
                      _cite(node, e, "leo", "epoch_cache"))
    hwm_, leo = e.get("hwm"), e.get("leo")
    if isinstance(hwm_, int) and isinstance(leo, int) and hwm_ > leo:
        found.add("hwm-above-leo", f"{node} had HWM {hwm_} above its LEO {leo} for {_where(e)} when it became "
                                   f"{str(e.get('to', '?')).split('@')[0]} in leader epoch {e.get('leader_epoch')}",
                  _cite(node, e, "from", "to", "hwm", "leo"))


def _checkpoint(node: str, e: dict[str, Any], found: _Found) -> None:
    for entry in e.get("replicas") or []:
        topic, partition, role, hwm_, leo = entry
        if isinstance(hwm_, int) and isinstance(leo, int) and hwm_ > leo:
            found.add("hwm-above-leo", f"{node} checkpointed HWM {hwm_} above its LEO {leo} for {topic}-{partition} "
                                       f"as {role}", _cite(node, e) | {"replica": entry})
            return  # one line, one finding: the next checkpoint says it again if it persists


LINE_RULES = {"hwm_advanced": _hwm_advance, "alter_partition_sent": _isr_expansion, "produce_acked": _ack,
              "consumer_fetch": _consumer_fetch, "leader_elected": _election, "become_leader": _role_change,
              "become_follower": _role_change, "truncated_on_divergence": _divergence,
              "hwm_checkpointed": _checkpoint, "offset_commit_acked": _offset_commit, "txn_end_started": _txn_end}


# --- rules across lines and nodes ---------------------------------------------------------------------------
def _leader_completeness(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> int:
    """Every leader of a clean epoch E holds [0, the highest HWM leaders of epochs U..E-1 reached), U the last
    unclean election before E (which may lose committed data by design). Returns how many leaders were judged."""
    unclean: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    clean: set[tuple[Any, Any, int]] = set()
    hwms: dict[tuple[Any, Any], list[tuple[int, int, str, dict[str, Any]]]] = defaultdict(list)
    for node, e in lines:
        key = (e.get("topic"), e.get("partition"))
        ev = e.get("event")
        if ev == "leader_elected" and e.get("leader", NO_LEADER) != NO_LEADER:
            (unclean[key].append(e["leader_epoch"]) if e.get("unclean") else clean.add((*key, e["leader_epoch"])))
        elif ev == "hwm_advanced" and isinstance(e.get("leader_epoch"), int):
            hwms[key].append((e["leader_epoch"], e.get("to", 0), node, e))
    judged = 0
    for node, e in lines:
        if e.get("event") != "become_leader":
            continue
        key, epoch = (e.get("topic"), e.get("partition")), e.get("leader_epoch")
        if (*key, epoch) not in clean:
            continue  # an unclean election, or one the controller's trace lost: not judged
        since = max([u for u in unclean[key] if u <= epoch], default=-1)
        reached = [h for h in hwms[key] if since <= h[0] < epoch]
        judged += 1
        if not reached:
            continue
        best = max(reached, key=lambda h: h[1])
        if e.get("leso", 0) < best[1]:
            found.add("leader-incomplete",
                      f"{node} became leader of {_where(e)} in clean epoch {epoch} with LEO {e.get('leso')}, but "
                      f"{best[2]} had advanced the HWM to {best[1]} in epoch {best[0]}",
                      _cite(node, e, "leso", "hwm", "epoch_cache"), _cite(best[2], best[3], "from", "to"))
    return judged


def _unclean_epochs(lines: list[tuple[str, dict[str, Any]]]) -> dict[tuple[Any, Any], list[int]]:
    """Each partition's leader epochs begun by an unclean election (which may lose committed records by design)."""
    unclean: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for _, e in lines:
        if e.get("event") == "leader_elected" and e.get("unclean"):
            unclean[(e.get("topic"), e.get("partition"))].append(e.get("leader_epoch", 0))
    return unclean


def _cut_partition(e: dict[str, Any]) -> tuple[Any, Any] | None:
    """(topic, partition) of a log-recovery-truncated line, which names it "topic-p"."""
    name = e.get("partition")
    topic, _, p = name.rpartition("-") if isinstance(name, str) else ("", "", "")
    return (topic, int(p)) if topic and p.isdigit() else None


def _back_in_sync(e: dict[str, Any]) -> set[Any]:
    """The brokers a line shows joining the partition's ISR or taking its leadership: an out-of-sync replica
    has caught up there (001 5.2.1 Case E), or is the log the others now follow."""
    ev = e.get("event")
    if ev == "partition_change":
        before, after = e.get("from") or {}, e.get("to") or {}
        return set(after.get("isr") or []) - set(before.get("isr") or [])
    if ev in ("isr_updated", "isr_committed"):
        return set(e.get("to") or []) - set(e.get("from") or [])
    if ev == "become_leader":
        return {e.get("node")}
    if ev == "leader_elected":
        return {e.get("leader")}
    return set()


def _truncations(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> list[dict[str, Any]]:
    """Each truncation against the replica's HWM when it decided. Returns the truncations below it that repair a
    log its own start-up recovery cut (not judged: the module docstring, truncated-below-hwm)."""
    unclean = _unclean_epochs(lines)
    # (trace node, topic, partition) -> (broker id, the recovery line): a damaged replica not yet back in sync
    damaged: dict[tuple[str, Any, Any], tuple[Any, dict[str, Any]]] = {}
    repairs: list[dict[str, Any]] = []
    for node, e in lines:
        ev = e.get("event")
        if ev == "log-recovery-truncated":
            where = _cut_partition(e)
            if where is not None:
                damaged[(node, *where)] = (e.get("node"), e)
            continue
        key = (e.get("topic"), e.get("partition"))
        if damaged:
            joined = _back_in_sync(e)
            for k in [k for k, (b, _) in damaged.items() if k[1:] == key and b in joined]:
                del damaged[k]
        if ev not in TRUNCATIONS or not isinstance(e.get("hwm_before"), int):
            continue
        epochs = unclean[key]
        if e.get("to", 0) < e["hwm_before"] and not any(u <= e.get("leader_epoch", 0) for u in epochs):
            cite = _cite(node, e, "from", "to", "hwm_before", "reason", "diverging_epoch", "epoch_cache")
            summary = (f"{node} truncated {_where(e)} from {e.get('from')} to {e.get('to')}, below its HWM "
                       f"{e['hwm_before']}, in leader epoch {e.get('leader_epoch')} ({e.get('reason')})")
            cut = damaged.get((node, *key))
            if cut is not None:
                repairs.append({"summary": f"{summary}, after its start-up recovery cut the log at offset "
                                           f"{cut[1].get('offset')} ({cut[1].get('reason')}) and before it was "
                                           f"back in the ISR",
                                "trace": [_cite(node, cut[1], "offset", "position", "reason"), cite]})
                continue
            found.add("truncated-below-hwm", summary, cite)
    return repairs


def _log_matching(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    starts: dict[tuple[Any, Any, int], dict[int, tuple[str, dict[str, Any]]]] = defaultdict(dict)
    for node, e in lines:
        if e.get("event") not in EPOCH_CACHE_EVENTS:
            continue
        for entry in e.get("epoch_cache") or []:
            epoch, start = entry
            starts[(e.get("topic"), e.get("partition"), epoch)].setdefault(start, (node, e))
    for (topic, partition, epoch), seen in sorted(starts.items(), key=lambda kv: str(kv[0])):
        if len(seen) > 1:
            cites = [_cite(n, e, "epoch_cache") for _, (n, e) in sorted(seen.items())]
            found.add("log-matching", f"leader epoch {epoch} of {topic}-{partition} starts at offsets "
                                      f"{sorted(seen)} in different replicas' epoch caches", *cites[:4])


def _epoch_reuse(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    leaders: dict[tuple[Any, Any, Any], tuple[str, dict[str, Any]]] = {}
    session: dict[str, int] = defaultdict(int)
    elected: dict[tuple[str, int, Any, Any], tuple[int, dict[str, Any]]] = {}
    granted: dict[int, tuple[Any, str, dict[str, Any]]] = {}
    registered: dict[str, tuple[int, dict[str, Any]]] = {}
    for node, e in lines:
        ev = e.get("event")
        if ev in ("trace_started", "controller_activated"):
            session[node] += 1  # a controller's elections are judged within one activation
        elif ev == "become_leader":
            key = (e.get("topic"), e.get("partition"), e.get("leader_epoch"))
            first = leaders.setdefault(key, (node, e))
            if first[0] != node:
                found.add("epoch-reuse", f"{first[0]} and {node} both became leader of {key[0]}-{key[1]} in leader "
                                         f"epoch {key[2]}", _cite(first[0], first[1]), _cite(node, e))
        elif ev == "leader_elected":
            key = (node, session[node], e.get("topic"), e.get("partition"))
            prev = elected.get(key)
            if prev is not None and e.get("leader_epoch", 0) <= prev[0]:
                found.add("epoch-reuse", f"{node} elected a leader of {_where(e)} in epoch {e.get('leader_epoch')} "
                                         f"after epoch {prev[0]}", _cite(node, prev[1], "leader"),
                          _cite(node, e, "leader"))
            elected[key] = (e.get("leader_epoch", 0), e)
        elif ev == "broker_registered":
            be = e.get("broker_epoch")
            first_grant = granted.setdefault(be, (e.get("broker"), node, e))
            if first_grant[0] != e.get("broker"):
                found.add("epoch-reuse", f"broker epoch {be} was given to brokers {first_grant[0]} and "
                                         f"{e.get('broker')}", _cite(first_grant[1], first_grant[2], "broker"),
                          _cite(node, e, "broker", "broker_epoch"))
        elif ev == "registered":
            prev_reg = registered.get(node)
            be = e.get("broker_epoch", -1)
            if prev_reg is not None and be < prev_reg[0]:
                found.add("epoch-reuse", f"{node} registered with broker epoch {be} after {prev_reg[0]}",
                          _cite(node, prev_reg[1], "broker_epoch"), _cite(node, e, "broker_epoch"))
            registered[node] = (be, e)


def _min_isrs(lines: list[tuple[str, dict[str, Any]]]) -> dict[Any, int]:
    """Each topic's min ISR, as the brokers' leaders saw it (the controller's lines do not carry it)."""
    return {e.get("topic"): e["min_isr"] for _, e in lines
            if e.get("event") in ("become_leader", "hwm_advanced") and isinstance(e.get("min_isr"), int)}


def _elr_rules(lines: list[tuple[str, dict[str, Any]]], found: _Found, no_elr: bool) -> None:
    """The ELR after each of the controller's partition changes (its `from` and `to` on one line)."""
    if no_elr:
        return
    min_isr = _min_isrs(lines)
    unclean = {(e.get("topic"), e.get("partition"), e.get("leader_epoch")) for _, e in lines
               if e.get("event") == "leader_elected" and e.get("unclean")}
    for node, e in lines:
        if e.get("event") != "partition_change" or e.get("topic") not in min_isr:
            continue
        old, new, m = e.get("from") or {}, e.get("to") or {}, min_isr[e.get("topic")]
        isr, elr, lke = new.get("isr") or [], new.get("elr") or [], new.get("last_known_elr") or []
        if len(isr) >= m and (elr or lke):
            found.add("elr-at-min-isr", f"{node} left ELR {elr} and LastKnownELR {lke} on {_where(e)} beside ISR "
                                        f"{isr}, at or above min ISR {m} ({e.get('reason')})",
                      _cite(node, e, "reason", "from", "to"))
        reason = str(e.get("reason", ""))
        if (len(isr) >= m or reason.startswith(("unclean recovery", "reassignment")) or "restarted uncleanly" in reason
                or (e.get("topic"), e.get("partition"), new.get("leader_epoch")) in unclean):
            continue  # an unclean restart or election empties the ELR by design; a reassignment moves replicas
        dropped = [r for r in old.get("isr") or [] if r not in isr and r not in elr]
        if dropped:
            found.add("elr-dropped-removed", f"{node} dropped {dropped} from the ISR of {_where(e)} (now {isr}, below "
                                             f"min ISR {m}) without putting them into the ELR {elr} ({reason})",
                      _cite(node, e, "reason", "from", "to"))


def _fenced_in_isr(lines: list[tuple[str, dict[str, Any]]], found: _Found, no_elr: bool) -> None:
    """Replays the controller's lines: at each broker event, every broker it fenced before must be out of
    every ISR it knows (its last partition_change of each partition, since the controller's activation)."""
    state: dict[tuple[Any, Any], tuple[str, dict[str, Any]]] = {}
    fenced: dict[Any, tuple[str, dict[str, Any]]] = {}
    reported: set[tuple[Any, Any, Any]] = set()
    for node, e in lines:
        ev = e.get("event")
        if e.get("role") != "controller":
            continue
        if ev in ("trace_started", "controller_activated"):
            state.clear()
            fenced.clear()
        elif ev == "partition_change":
            state[(e.get("topic"), e.get("partition"))] = (node, e)
        elif ev in ("broker_fenced", "broker_unfenced", "broker_registered"):
            for key, (pnode, pe) in sorted(state.items(), key=lambda kv: str(kv[0])):
                isr = (pe.get("to") or {}).get("isr") or []
                if no_elr and len(isr) == 1:
                    continue  # 3.5's Last Replica Standing
                for b in isr:
                    if b in fenced and (*key, b) not in reported:
                        reported.add((*key, b))
                        fnode, fe = fenced[b]
                        found.add("fenced-in-isr", f"broker {b} was still in the ISR {isr} of {key[0]}-{key[1]} "
                                                   f"after {fnode} fenced it ({fe.get('reason')})",
                                  _cite(fnode, fe, "broker", "reason"), _cite(pnode, pe, "reason", "to"))
            b = e.get("broker")
            if ev == "broker_unfenced":
                fenced.pop(b, None)
            else:
                fenced[b] = (node, e)  # a registration is fenced until the broker catches up


def _alter_partition_accepted(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> int:
    """Each ISR change the controller made on a leader's AlterPartition against the request it answered: the
    leader's last alter_partition_sent of the partition before the change. Judged only where the leader's
    process wrote a line after the change (a SIGKILL loses the unflushed tail, which may hold the request
    answered, and an earlier proposal of the same ISR must not stand in for it); returns how many were judged."""
    judged = 0
    last_mono = _broker_spans(lines)  # node id -> per process (start, last)
    sent: dict[tuple[Any, Any, Any], tuple[str, dict[str, Any]]] = {}
    registered: dict[Any, int] = {}
    for node, e in lines:
        ev = e.get("event")
        if ev == "alter_partition_sent":
            sent[(e.get("node"), e.get("topic"), e.get("partition"))] = (node, e)
        elif ev == "broker_registered":
            registered[e.get("broker")] = e.get("broker_epoch")
        elif ev == "partition_change" and str(e.get("reason", "")).startswith("AlterPartition from leader "):
            try:
                leader = int(str(e["reason"]).rsplit(" ", 1)[1])
            except ValueError:
                continue
            old, new = e.get("from") or {}, e.get("to") or {}
            asked = sent.get((leader, e.get("topic"), e.get("partition")))
            t = e.get("mono") or 0
            if asked is None or set(asked[1].get("to") or []) != set(new.get("isr") or []) or not any(
                    start <= asked[1].get("mono", 0) and end > t for start, end in last_mono[leader]):
                continue  # the request answered is not in the leader's trace: not judged
            snode, req = asked
            judged += 1
            why = []
            if isinstance(req.get("partition_epoch"), int) and req["partition_epoch"] != old.get("partition_epoch"):
                why.append(f"it was made at partition epoch {req['partition_epoch']}, the partition's was "
                           f"{old.get('partition_epoch')}")
            for r, f in sorted((req.get("added") or {}).items()):
                be, now = f.get("broker_epoch", -1), registered.get(int(r))
                if be != -1 and now is not None and be != now:
                    why.append(f"it added {r} with broker epoch {be}, registered as {now}")
            if why:
                found.add("alter-partition-stale", f"{node} accepted {snode}'s AlterPartition of {_where(e)} to ISR "
                                                   f"{new.get('isr')}: " + "; ".join(why),
                          _cite(snode, req, "partition_epoch", "from", "to", "added"), _cite(node, e, "reason", "from", "to"))
    return judged


def _registrations(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    """A restart is clean exactly when the broker brings the epoch the controller last gave it (written to
    its clean-shutdown file by a controlled shutdown)."""
    last: dict[Any, tuple[int, str, dict[str, Any]]] = {}
    for node, e in lines:
        if e.get("event") == "broker_unregistered":
            last.pop(e.get("broker"), None)  # forgotten: its next registration is a first one (clean)
            continue
        if e.get("event") != "broker_registered" or not isinstance(e.get("broker_epoch"), int):
            continue
        b, prev = e.get("broker"), e.get("previous_broker_epoch", -1)
        if b in last and isinstance(e.get("clean"), bool) and e["clean"] != (prev == last[b][0]):
            found.add("registration-clean",
                      f"{node} registered broker {b} as {'clean' if e['clean'] else 'unclean'} with previous broker "
                      f"epoch {prev}; the epoch it last gave the broker was {last[b][0]}",
                      _cite(last[b][1], last[b][2], "broker", "broker_epoch"),
                      _cite(node, e, "broker", "broker_epoch", "clean", "previous_broker_epoch"))
        last[b] = (e["broker_epoch"], node, e)


def _inits(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    """Each InitProducerId answer against the producer the id had (the coordinator's state it was decided on).
    A KIP-360 retry is recognised as Kafka does (lastProducerEpoch): the last answer of the id in the trace
    is the same pair, given to a request that named the epoch before it."""
    last: dict[Any, tuple[str, dict[str, Any]]] = {}
    for node, e in lines:
        if e.get("event") != "txn_init_producer_id" or e.get("aborted_open"):
            continue  # an open transaction's abort: the client is told to retry (txn-abort-not-fenced judges it)
        tid = e.get("transactional_id")
        prev, last[tid] = last.get(tid), (node, e)
        pid_before, epoch_before, pid, epoch = (e.get(k) for k in ("producer_id_before", "epoch_before",
                                                                    "producer_id", "producer_epoch"))
        if not all(isinstance(x, int) for x in (pid_before, epoch_before, pid, epoch)):
            continue
        if pid_before < 0 or pid != pid_before or epoch > epoch_before:
            continue  # a new id, a new producer id (an exhausted epoch), or a bump: fenced
        named = (e.get("asked_producer_id"), e.get("asked_epoch"))
        if named == (pid, epoch - 1) and epoch == epoch_before:
            if prev is None or (prev[1].get("producer_id"), prev[1].get("producer_epoch")) != (pid, epoch):
                continue  # the bump this may repeat is not in the trace: not judged
            if (prev[1].get("asked_producer_id"), prev[1].get("asked_epoch")) == named:
                continue  # the retry of a bump whose answer was lost (KIP-360)
        cites = [_cite(node, e, "transactional_id", "producer_id_before", "epoch_before", "producer_id",
                       "producer_epoch", "asked_producer_id", "asked_epoch", "coordinator_epoch")]
        if prev is not None:
            cites.insert(0, _cite(prev[0], prev[1], "transactional_id", "producer_id", "producer_epoch",
                                  "asked_producer_id", "asked_epoch"))
        found.add("init-not-fenced",
                  f"{node} answered InitProducerId of {tid!r} (asked {named[0]}/{named[1]}) with producer {pid} epoch "
                  f"{epoch}; the id's producer was {pid_before} at epoch {epoch_before}, so that one is not fenced",
                  *cites)


def _produces_after_fence(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    """Each produce of a producer against the markers for it at lower offsets of the partition (in the leader
    epoch of the produce or before it, with no unclean election between)."""
    unclean = _unclean_epochs(lines)
    markers: dict[tuple[Any, Any, int], list[tuple[int, str, dict[str, Any]]]] = defaultdict(list)
    for node, e in lines:
        if (e.get("event") == "txn_marker_written" and isinstance(e.get("producer_id"), int)
                and all(isinstance(e.get(k), int) for k in ("offset", "producer_epoch", "leader_epoch"))):
            markers[(e.get("topic"), e.get("partition"), e["producer_id"])].append((e["offset"], node, e))
    # Per producer and partition, its markers by offset and the highest epoch up to each: a produce at or
    # above that epoch (nearly all of them) needs no scan.
    highest: dict[tuple[Any, Any, int], list[int]] = {}
    for key, ms in markers.items():
        ms.sort(key=lambda m: m[0])
        highest[key] = list(accumulate((m[2]["producer_epoch"] for m in ms), max))
    for node, e in lines:
        if e.get("event") != "produce_acked" or e.get("control") or not isinstance(e.get("producer_epoch"), int):
            continue
        key = (e.get("topic"), e.get("partition"), e.get("producer_id"))
        ms = markers.get(key)
        epoch, at = e.get("leader_epoch", -1), e.get("first", -1)
        below = bisect_left(ms, at, key=lambda m: m[0]) if ms else 0
        if not below or highest[key][below - 1] <= e["producer_epoch"]:
            continue
        for _, mnode, m in reversed(ms[:below]):
            if (m["producer_epoch"] > e["producer_epoch"] and m["leader_epoch"] <= epoch
                    and not any(m["leader_epoch"] < u <= epoch for u in unclean[key[:2]])):
                found.add("produce-after-fence",
                          f"{node} accepted offsets {at}..{e.get('last')} of {_where(e)} from producer {key[2]} at "
                          f"epoch {e['producer_epoch']}, above {mnode}'s {m.get('result')} marker for it at offset "
                          f"{m['offset']} with epoch {m['producer_epoch']}",
                          _cite(mnode, m, "producer_id", "producer_epoch", "coordinator_epoch", "result", "offset"),
                          _cite(node, e, "first", "last", "producer_id", "producer_epoch", "transactional", "acks"))
                break


# --- the coordinators' decisions (issue 40) --------------------------------------------------------------------
def _broker_spans(lines: list[tuple[str, dict[str, Any]]]) -> dict[Any, list[tuple[float, float]]]:
    """Each broker's processes as (mono of their first line, mono of their last line), by broker id: a line of a
    process after time t proves every line it wrote before t reached its trace (the file keeps their order)."""
    spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for _, e in lines:
        if e.get("role") == "broker" and isinstance(e.get("mono"), (int, float)):
            runs = spans[e.get("node")]
            if e.get("event") == "trace_started" or not runs:
                runs.append((e["mono"], e["mono"]))
            else:
                runs[-1] = (runs[-1][0], e["mono"])
    return spans


def _a_process_ended(spans: dict[Any, list[tuple[float, float]]], since: float, until: float) -> bool:
    """A broker's process may have ended in [since, until) (_broker_spans): its unflushed last lines are lost, so a
    fact it wrote then (a decision, a marker) may be missing from the trace while what followed from it is not.
    A process that restarted died somewhere between its last line and its next start (it may have lived, and
    acted, well after the last line that reached its file); the last run of a node ended at its last line."""
    for runs in spans.values():
        for (_, end), (next_start, _) in zip(runs, runs[1:], strict=False):  # consecutive runs
            if end < until and next_start > since:
                return True
        if runs and since <= runs[-1][1] < until:
            return True
    return False


def _markers_as_decided(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> int:
    """A decided transaction's markers against its decision: each marker carries the result and epoch the
    coordinator decided last for its producer and partition; one transaction (transactional id, producer id,
    epoch, start) is never decided both ways; a completed transaction has a marker at every partition. Returns
    how many completions were judged (one whose markers a dead broker's unflushed tail may hold is not)."""
    decisions: dict[Any, list[tuple[float, str, dict[str, Any]]]] = defaultdict(list)  # producer id -> decisions
    by_txn: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
    markers: dict[tuple[Any, Any, Any], list[tuple[float, str, dict[str, Any]]]] = defaultdict(list)
    spans = _broker_spans(lines)

    def a_process_ended(since: float, until: float) -> bool:
        return _a_process_ended(spans, since, until)  # a decision among its lost lines, its markers gone out

    for node, e in lines:
        ev, mono = e.get("event"), e.get("mono") or 0
        if ev == "txn_end_started":
            decisions[e.get("producer_id")].append((mono, node, e))
            txn = (e.get("transactional_id"), e.get("producer_id"), e.get("txn_epoch"), e.get("txn_started_ms"))
            first = by_txn.setdefault(txn, (node, e))
            if isinstance(e.get("txn_started_ms"), int) and first[1].get("result") != e.get("result"):
                found.add("txn-marker-not-as-decided",
                          f"{node} decided transaction {txn[0]!r} (producer {txn[1]}, epoch {txn[2]}, begun at "
                          f"{txn[3]} ms) {e.get('result')} ({e.get('started_by')}) after {first[0]} had decided it "
                          f"{first[1].get('result')}: one transaction, two outcomes",
                          _cite(first[0], first[1], "transactional_id", "producer_id", "txn_epoch", "txn_started_ms",
                                "result", "started_by", "partitions", "coordinator_epoch"),
                          _cite(node, e, "transactional_id", "producer_id", "txn_epoch", "txn_started_ms", "result",
                                "started_by", "partitions", "coordinator_epoch"))
        elif ev == "txn_marker_written":
            markers[(e.get("topic"), e.get("partition"), e.get("producer_id"))].append((mono, node, e))
            later = [d for d in decisions[e.get("producer_id")] if d[0] <= mono
                     and [e.get("topic"), e.get("partition")] in (d[2].get("partitions") or [])]
            if not later:
                continue  # its decision is not in the trace (a coordinator's lost tail): not judged
            dmono, dnode, d = later[-1]
            if a_process_ended(dmono, mono):
                continue  # the decision this marker follows may be in a dead broker's lost tail: not judged
            if d.get("marker_epoch") == e.get("producer_epoch") and d.get("result") != e.get("result"):
                found.add("txn-marker-not-as-decided",
                          f"{node} wrote a {e.get('result')} marker for producer {e.get('producer_id')} (epoch "
                          f"{e.get('producer_epoch')}) at {_where(e)} offset {e.get('offset')}, but {dnode} had "
                          f"decided its transaction {d.get('transactional_id')!r}: {d.get('result')}",
                          _cite(dnode, d, "transactional_id", "producer_id", "marker_epoch", "result", "partitions"),
                          _cite(node, e, "producer_id", "producer_epoch", "coordinator_epoch", "result", "offset"))
    judged = 0
    for node, c in lines:
        if c.get("event") != "txn_completed":
            continue
        mono = c.get("mono") or 0
        ds = [d for d in decisions[c.get("producer_id")] if d[0] <= mono and d[2].get("marker_epoch") == c.get(
            "producer_epoch") and d[2].get("transactional_id") == c.get("transactional_id")]
        if not ds:
            continue
        dmono, dnode, d = ds[-1]
        if a_process_ended(dmono, mono):
            continue  # a broker's process ended between the decision and the completion: its last lines are lost
        judged += 1
        for topic, partition in c.get("partitions") or []:
            before = [m for m in markers[(topic, partition, c.get("producer_id"))] if m[0] <= mono]
            ms = [m for m in before if m[0] >= dmono]
            # a marker of a higher epoch there (whenever written): the partition refuses this one as older, and
            # the coordinator counts it done (txn_shell.py write_marker)
            fenced = any(m[2].get("producer_epoch", -1) > c.get("producer_epoch", -1) for m in before)
            if fenced or any(m[2].get("producer_epoch") == c.get("producer_epoch")
                             and m[2].get("result") == c.get("result") for m in ms):
                continue
            found.add("txn-marker-not-as-decided",
                      f"{node} completed transaction {c.get('transactional_id')!r} (producer {c.get('producer_id')}, "
                      f"{c.get('result')} at epoch {c.get('producer_epoch')}) with no such marker written at "
                      f"{topic}-{partition} since {dnode} decided it"
                      + (f" (markers there: {[(m[2].get('result'), m[2].get('producer_epoch')) for m in ms]})" if ms
                         else ""),
                      _cite(dnode, d, "transactional_id", "producer_id", "marker_epoch", "result", "partitions"),
                      _cite(node, c, "transactional_id", "producer_id", "producer_epoch", "result", "partitions"))
            break  # one finding per transaction
    return judged


def _read_committed_open_txns(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    """Each read_committed fetch against the transactions of its partition, from their batches and markers (not the
    LSO the leader reported): a transactional batch served whose transaction's marker was not yet in the leader's
    log (its first marker after the batch at or above the leader's LEO when it served, by offsets: committed
    offsets do not move) was served from an open transaction. Not judged: a batch whose marker the trace lacks,
    a batch when a broker's process ended between its acknowledgement and the fetch (the marker that closed it
    may be among that process's lost lines: the simulator's seed 7 txn run showed one, its log holding the marker
    the trace did not), a batch whose transaction a coordinator decided (`txn_end_started` naming the partition)
    between its acknowledgement and the fetch (the marker may be in the leader's log unacknowledged: a
    WriteTxnMarkers append whose wait for the HWM ended in an error, at a leader-epoch change, leaves no
    `txn_marker_written`, and the next coordinator's marker for the same transaction comes later: the simulator's
    default txn sweep, seed 8, queue-0's commit marker at 902 in the log, the trace's at 907), a batch whose next
    traced marker was written in another leader epoch than the fetch's (the serving leader may have appended a
    marker of it that a leader change cut before it was acknowledged, and only acknowledged markers are traced:
    txn-stale-epoch-accepted's txn run, 2026-11-28, docs/MUTATION-notes.md), and partitions with an unclean
    election (they may lose committed offsets by design)."""
    unclean = _unclean_epochs(lines)
    spans = _broker_spans(lines)
    decided: dict[tuple[Any, Any, Any], list[float]] = defaultdict(list)  # (topic, partition, producer) -> monos
    for _, e in lines:
        if e.get("event") == "txn_end_started":
            for where in e.get("partitions") or []:
                if isinstance(where, (list, tuple)) and len(where) == 2:
                    decided[(where[0], where[1], e.get("producer_id"))].append(e.get("mono") or 0)
    batches: dict[tuple[Any, Any], dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    marks: dict[tuple[Any, Any], dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    acked_at: dict[tuple[Any, Any, Any, int], float] = {}  # (topic, partition, producer, first offset) -> mono
    mark_epoch: dict[tuple[Any, Any, Any, int], Any] = {}  # (topic, partition, producer, offset) -> leader epoch
    for _, e in lines:
        ev = e.get("event")
        key = (e.get("topic"), e.get("partition"))
        if (ev == "produce_acked" and e.get("transactional") and not e.get("control") and e.get("acks") == -1
                and isinstance(e.get("first"), int)):
            batches[key][e.get("producer_id")].append(e["first"])
            acked_at.setdefault((*key, e.get("producer_id"), e["first"]), e.get("mono") or 0)
        elif ev == "txn_marker_written" and isinstance(e.get("offset"), int):
            marks[key][e.get("producer_id")].append(e["offset"])
            mark_epoch.setdefault((*key, e.get("producer_id"), e["offset"]), e.get("leader_epoch"))
        elif ev == "produce_acked" and e.get("control") and isinstance(e.get("first"), int):
            marks[key][e.get("producer_id")].append(e["first"])
            mark_epoch.setdefault((*key, e.get("producer_id"), e["first"]), e.get("leader_epoch"))
    for per in (batches, marks):
        for by_pid in per.values():
            for pid, offsets in by_pid.items():
                by_pid[pid] = sorted(set(offsets))
    for node, e in lines:
        if e.get("event") != "consumer_fetch" or e.get("isolation") != "read_committed":
            continue
        key, first, last, leo = (e.get("topic"), e.get("partition")), e.get("first"), e.get("last"), e.get("leo")
        if key in unclean or not all(isinstance(x, int) for x in (first, last, leo)) or last < first:
            continue
        for pid, starts in batches.get(key, {}).items():
            ms = marks[key].get(pid, [])
            above = bisect_left(ms, leo)  # the first marker not yet in the log when the leader served
            if above == len(ms):
                continue  # no marker at or above the LEO in the trace: not judged
            if mark_epoch.get((*key, pid, ms[above])) != e.get("leader_epoch"):
                continue  # an earlier marker, appended in the fetch's epoch and cut in a leader change: not judged
            since = ms[above - 1] + 1 if above else 0  # batches after the last marker in the log were open
            i = bisect_left(starts, max(first, since))
            if i < len(starts) and starts[i] <= last:
                since_ack, fetched_at = acked_at.get((*key, pid, starts[i]), 0), e.get("mono") or 0
                if _a_process_ended(spans, since_ack, fetched_at):
                    continue  # the marker that closed it may be in a dead broker's lost lines: not judged
                if any(since_ack <= t <= fetched_at for t in decided.get((*key, pid), ())):
                    continue  # decided before the fetch: its marker may be in the log with no line of its own
                found.add("read-committed-open-txn",
                          f"{node} served a read_committed consumer offsets {first}..{last} of {_where(e)}, with "
                          f"producer {pid}'s transactional batch at offset {starts[i]} open: its marker is at offset "
                          f"{ms[above]}, at or above the LEO {leo} then (reported LSO {e.get('lso')}, bound "
                          f"{e.get('bound')} {e.get('bound_offset')})",
                          _cite(node, e, "offset", "first", "last", "isolation", "bound", "bound_offset", "lso", "hwm",
                                "leo"))
                break


def _group_commits(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> int:
    """Each accepted offset commit against the group's generation on that coordinator (its last group_generation
    line since the coordinator (re)loaded the group's partition), each generation against the one before, and each
    OffsetFetch answer against the commits acknowledged before it. Returns how many fetched offsets were judged."""
    generation: dict[tuple[str, Any], tuple[str, dict[str, Any]]] = {}  # (trace node, group) -> its last line
    for node, e in lines:
        ev = e.get("event")
        if ev == "trace_started":
            for k in [k for k in generation if k[0] == node]:
                del generation[k]
        elif ev == "groups_loading":
            for k in [k for k, (_, g) in generation.items()
                      if k[0] == node and g.get("coordinator_partition") == e.get("coordinator_partition")]:
                del generation[k]
        elif ev == "group_generation":
            prev = generation.get((node, e.get("group")))
            if prev is not None and isinstance(e.get("generation"), int) and \
                    e["generation"] <= prev[1].get("generation", -1):
                found.add("group-generation-reused",
                          f"{node} completed generation {e['generation']} of group {e.get('group')!r} after "
                          f"generation {prev[1].get('generation')}: a member of the older one passes as current",
                          _cite(node, prev[1], "group", "generation", "members"),
                          _cite(node, e, "group", "generation", "members"))
            generation[(node, e.get("group"))] = (node, e)
        elif ev == "offset_commit_accepted":
            g = generation.get((node, e.get("group")))
            members = (g[1].get("members") or []) if g else []
            gen, member = e.get("generation"), e.get("member")
            if not isinstance(gen, int):
                continue
            if not members:
                why = None if gen < 0 else (f"the group had no members (generation {g[1].get('generation')})"
                                            if g else "the group had no generation on this coordinator")
            elif gen != g[1].get("generation") or member not in members:
                why = f"the group was in generation {g[1].get('generation')} with members {members}"
            else:
                why = None
            if why:
                found.add("offset-commit-stale-generation",
                          f"{node} accepted an offset commit of group {e.get('group')!r} from member {member!r} "
                          f"with generation {gen}; {why}",
                          *([_cite(node, g[1], "group", "generation", "members")] if g else []),
                          _cite(node, e, "group", "generation", "member", "state", "group_generation"))
    unclean = _unclean_epochs(lines)
    acked: dict[tuple[Any, Any, Any], tuple[int, int, str, dict[str, Any]]] = {}
    judged = 0
    for node, e in lines:
        ev = e.get("event")
        if ev == "offset_commit_acked" and isinstance(e.get("first"), int) and isinstance(e.get("offsets"), list):
            for i, (t, p, o) in enumerate(e["offsets"]):
                acked[(e.get("group"), t, p)] = (e["first"] + i, o, node, e)
        elif ev == "offset_fetch_answered":
            if unclean.get(("__consumer_offsets", e.get("coordinator_partition"))):
                continue  # an unclean election of the group's partition may lose commits by design
            answered = {(t, p): (o, r) for t, p, o, r in e.get("offsets") or []}
            for t, p in [*answered, *((t, p) for t, p in e.get("none") or [])]:
                a = acked.get((e.get("group"), t, p))
                if a is None:
                    continue
                judged += 1
                o, r = answered.get((t, p), (None, None))
                if r is None or r < a[0] or (r == a[0] and o != a[1]):
                    what = "no committed offset" if r is None else f"offset {o} (from record {r})"
                    found.add("offset-fetch-not-committed",
                              f"{node} answered group {e.get('group')!r}'s OffsetFetch of {t}-{p} with {what}, after "
                              f"{a[2]} had acknowledged its commit of offset {a[1]} (record {a[0]} of "
                              f"__consumer_offsets-{a[3].get('partition')})",
                              _cite(a[2], a[3], "group", "generation", "member", "offsets", "first", "last", "hwm"),
                              _cite(node, e, "group", "offsets", "none", "coordinator_partition"))
    return judged


def _producer_epochs(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> None:
    """A transactional id's producer: its epoch, as the coordinators answered, decided and completed with it, only
    grows (KIP-98: a bumped epoch fences every older one; a coordinator whose state went back gives an old epoch
    again)."""
    highest: dict[tuple[Any, Any], tuple[int, str, dict[str, Any]]] = {}
    # A decision's own epoch is the one its markers carry: the epoch the transaction ran under may be below an
    # epoch just given (an InitProducerId that aborts the open transaction reports the fencing epoch first).
    facts = {"txn_init_producer_id": ("producer_epoch", "epoch_before"), "txn_end_started": ("marker_epoch",),
             "txn_completed": ("producer_epoch",)}
    for node, e in lines:
        keys = facts.get(e.get("event"))
        if keys is None:
            continue
        tid, pid = e.get("transactional_id"), e.get("producer_id")
        epochs = [e.get(k) for k in keys if isinstance(e.get(k), int) and e.get(k) >= 0]
        if e.get("event") == "txn_init_producer_id" and e.get("producer_id_before") != pid:
            epochs = epochs[:1]  # epoch_before is another producer id's
        if not epochs:
            continue
        top = highest.get((tid, pid))
        if top is not None and min(epochs) < top[0]:
            found.add("producer-epoch-regressed",
                      f"{node} {e.get('event')} of {tid!r} used producer {pid} at epoch {min(epochs)}, after "
                      f"{top[1]} had used epoch {top[0]} for it",
                      _cite(top[1], top[2], "transactional_id", "producer_id", *facts[top[2]["event"]]),
                      _cite(node, e, "transactional_id", "producer_id", *keys, "coordinator_epoch"))
        if top is None or max(epochs) > top[0]:
            highest[(tid, pid)] = (max(epochs), node, e)


def _restarts(lines: list[tuple[str, dict[str, Any]]], found: _Found) -> int:
    """Each broker start against the last HWM checkpoint of the process before it: every log it loaded reaches that
    HWM, unless its lossy file system reported a power cut since the previous start, its start-up recovery cut that
    log (damage), or the previous process truncated it after the checkpoint. Returns how many restarts were judged."""
    state: dict[str, dict[str, Any]] = defaultdict(dict)
    judged = 0
    for node, e in lines:
        if e.get("role") != "broker":
            continue
        ev, s = e.get("event"), state[node]
        if ev == "trace_started":  # a new process: what the last one left is what this one must find
            state[node] = {"before": {k: s.get(k) for k in ("checkpoint", "truncated", "drops")}}
        elif ev == "hwm_checkpointed":
            s["checkpoint"], s["truncated"] = e, set()
        elif ev in TRUNCATIONS:
            s.setdefault("truncated", set()).add((e.get("topic"), e.get("partition")))
        elif ev == "logs_loaded":
            before, drops = s.get("before") or {}, e.get("lossy_drops")
            s["drops"] = drops
            checkpoint = before.get("checkpoint")
            if checkpoint is None:
                continue  # a first start, or the previous process's checkpoints are not in the trace
            earlier = before.get("drops")
            if isinstance(drops, int) and (not isinstance(earlier, int) or drops > earlier):
                continue  # a power cut since the previous start (or one not known not to be): lossy by design
            judged += 1
            loaded = {(t, p): end for t, p, end, *_ in e.get("replicas") or []}
            cut = set(e.get("recovery_cuts") or [])
            for t, p, role, hwm_, _leo in checkpoint.get("replicas") or []:
                end = loaded.get((t, p))
                if (not isinstance(end, int) or not isinstance(hwm_, int) or end >= hwm_ or f"{t}-{p}" in cut
                        or (t, p) in (before.get("truncated") or set())):
                    continue
                found.add("log-shorter-after-restart",
                          f"{node} restarted ({'clean' if e.get('clean') else 'unclean'} shutdown) with the log of "
                          f"{t}-{p} ending at {end}, below the HWM {hwm_} it checkpointed as {role} before; no power "
                          f"cut explains it (lossy file system drops: {earlier} before, {drops} now)",
                          _cite(node, checkpoint) | {"replica": [t, p, role, hwm_, _leo]},
                          _cite(node, e, "clean", "recovery_cuts", "lossy_drops") | {"loaded": [t, p, end]})
    return judged


def check_traces(traces: dict[str, list[dict[str, Any]]]) -> Result:
    """`traces`: node name -> its trace lines, in file order, each with its "line" number."""
    found = _Found()
    counts: dict[str, int] = defaultdict(int)
    unclean = []
    variants: set[str] = set()
    for node, lines in sorted(traces.items()):
        for e in lines:
            ev = e.get("event")
            counts[ev] += 1
            rule = LINE_RULES.get(ev)
            if rule is not None:
                rule(node, e, found)
            if ev == "leader_elected" and e.get("unclean"):
                unclean.append(_cite(node, e, "leader", "how", "isr", "elr", "last_known_elr"))
            elif ev == "trace_started":
                variants.update(e.get("variants") or [])
    ordered = sorted(((n, e) for n, ls in traces.items() for e in ls),
                     key=lambda ne: (ne[1].get("mono") or 0, ne[0], ne[1].get("line") or 0))
    judged = _leader_completeness(ordered, found)
    repairs = _truncations(ordered, found)
    _log_matching(ordered, found)
    _epoch_reuse(ordered, found)
    no_elr = any(NO_ELR in (e.get("variants") or []) for _, e in ordered
                 if e.get("event") == "trace_started" and e.get("role") == "controller")
    _elr_rules(ordered, found, no_elr)
    _fenced_in_isr(ordered, found, no_elr)
    alters = _alter_partition_accepted(ordered, found)
    _registrations(ordered, found)
    _inits(ordered, found)
    _produces_after_fence(ordered, found)
    completions = _markers_as_decided(ordered, found)
    _read_committed_open_txns(ordered, found)
    fetches = _group_commits(ordered, found)
    _producer_epochs(ordered, found)
    restarts = _restarts(ordered, found)
    anomalies = found.anomalies()
    stats: dict[str, Any] = {"nodes": len(traces), "lines": sum(len(ls) for ls in traces.values()),
                             "events": dict(sorted(counts.items(), key=lambda kv: str(kv[0]))),
                             "leaders_judged_complete": judged, "alter_partitions_judged": alters,
                             "unclean_elections": len(unclean), "repairs_after_recovery_cut": len(repairs),
                             "txn_completions_judged": completions, "offset_fetches_judged": fetches,
                             "restarts_judged": restarts,
                             "violations": sum(a.count for a in anomalies)}
    if variants:
        stats["variants"] = sorted(variants)
    details: dict[str, Any] = {"unclean_elections": unclean[:MAX_EXAMPLES]} if unclean else {}
    if repairs:
        details["repairs_after_recovery_cut"] = repairs[:MAX_EXAMPLES]
    return Result(TRACE, not anomalies, anomalies, stats, details)


def check_trace_input(test: dict[str, Any], doc: dict[str, Any] | None) -> Result:
    """The verdict from test.json and the loaded traces (clusters/trace_files.py; None: none was handed in)."""
    if not test.get("protocol_trace"):
        return Result(TRACE, True, stats={"not_applicable": NOT_APPLICABLE})
    missing = missing_node_files(TRACE, test, doc, "no-trace", "traces", "the nodes' traces document")
    if missing is not None:
        return missing
    nodes = doc["nodes"]
    traces, reasons, torn = {}, [], {}
    for node, entry in sorted(nodes.items()):
        if isinstance(entry.get("lines"), list):
            traces[node] = entry["lines"]
            if entry.get("torn"):
                torn[node] = entry["torn"]
        else:
            reasons.append(say("trace-unreadable", node=node, where=entry.get("where"), why=entry.get("why")))
    result = check_traces(traces)
    result.unknown_reasons = reasons
    if torn:
        result.stats["torn_lines"] = torn
    if reasons:
        result.stats["inputs_unreadable"] = len(reasons)
        if result.valid is True:  # a proven violation stays proven; an unread trace may hide one
            result.valid = UNKNOWN
    return result


class TraceChecker:
    """`check_traces` over the nodes' protocol traces (CheckContext.data["trace"], read by
    clusters/trace_files.py). Not applicable where the cluster writes none."""

    name = TRACE

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return self.check_in(test, history, CheckContext())

    def check_in(self, test: dict[str, Any], history: Sequence[Op], context: CheckContext) -> Result:
        return check_trace_input(test, context.data.get(TRACE))
