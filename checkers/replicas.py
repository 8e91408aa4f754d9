"""Broker-side invariants from the nodes' own state dumps (PROTOCOL.md 8), beside the client-side checks.

A client sees only what leaders serve; replicas can disagree underneath (two logs with
different records at one offset below both HWMs: the divergence of 004's second scenario)
without any client noticing until leadership moves. At the end of a run the harness
collects every node's `admin dump` (a broker's partitions with their physical logs, the
controller's partition states) and metadata log, normalised into the run's replicas.json
(clusters/replica_dumps.py has its schema); this checker judges that document:

- log-divergence (Log Matching): two replicas of a partition hold different records (leader
  epoch or value digest) at an offset below both their HWMs;
- controller-structure: the controller's ISR and ELR within the replicas and disjoint, no
  ELR while the ISR meets min ISR, no fenced broker in an ISR (001 5.2.1, PROTOCOL.md 8).
- corrupt-batch-kept: a broker's log holds a batch whose CRC does not match its bytes at the end,
  though it started (its start-up recovery scans every segment and cuts at the first bad batch, 001 5)
  after the last damage to its files: the file-corruption fault's damages are the history's
  start-file-corruption ops, each followed by a stop that restarted the node; a node damaged and not
  restarted since (file_restart=none, or a stop that did not run) is not judged.

Unclean recoveries the controller reported (001 5.3.2: each is a potential data-loss event)
are listed in the result's stats and details, not counted as anomalies: they are the
protocol doing what it was configured to do. The other side of that promise is checked:

- unreported-data-loss: acknowledged writes of a partition were lost after a fault beyond the
  budget (the queue checker excuses those from lost-write, and counts them: its result is
  handed on to this checker), yet the controller reported no unclean recovery of that
  partition: a replica that lost committed data led silently (the last replica standing of
  002 2.4.2, without the ELR).
- metadata-log-divergence (a controller quorum): every controller's metadata log is a prefix of
  the longest one (Raft's log matching, seen from the dumps);
- controller-split-brain: two controllers claim to be active leaders in one Raft term;
- recovery-choice: an unclean recovery elected a replica whose (last leader epoch, end offset)
  is below another candidate's it had heard from (001 5.3: the highest is chosen, so the
  least committed data is lost).

Every dump is an input (issue 19): when the cluster gives dumps (test.json's `state_dumps`; a run
stored before that key expects them when any node left one), each node's dump must be read, or the
verdict is "unknown" with one sentence per node; an anomaly found in the dumps that were read still
makes it false. The nodes' metadata.log files are optional, but one that cannot be read past a bad
line in its middle is unknown the same way. A cluster that gives no dumps at all (one we did not
build) is not applicable: valid, with a note in stats, never a guess.

`check_states` judges the states; `check_replicas` adds the rules on inputs above. Both are pure:
`ReplicaStateChecker` is declared in the workload's checker list like any other, and is handed
replicas.json's document and the queue checker's result (checkers/core.py CheckContext) by the runner
and `kafkaesque analyze`; it reads no file and knows no broker format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkaesque_harness.checkers.core import (
    MAX_EXAMPLES,
    UNKNOWN,
    Anomaly,
    CheckContext,
    Result,
    missing_node_files,
)
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.history import Op, beyond_budget_time


def check_states(states: dict[str, dict[str, Any]], lost_beyond_budget: dict[str, int] | None = None,
                 topic: str = "queue", metadata_logs: dict[str, MetadataLog] | None = None,
                 damaged_since_start: set[str] | frozenset[str] = frozenset()) -> Result:
    """`states`: node name -> its state dump (brokers and the controller), unreachable ones left out.
    `lost_beyond_budget`: partition -> writes of `topic` lost beyond the fault budget (the queue
    checker's details), each of which must be covered by a reported unclean recovery.
    `metadata_logs`: node name -> the metadata log it kept on disk (every broker's copy, and a
    single controller's log of record), as collected into nodes/<node>/metadata.log.
    `damaged_since_start`: brokers whose files were damaged after their last start (not judged by
    corrupt-batch-kept: the damage may still be there, as on a real disk)."""
    brokers = {n: s for n, s in states.items() if s.get("role") == "broker"}
    controllers = [s for s in states.values() if s.get("role") == "controller"]
    anomalies = []
    divergence = _log_divergence(brokers)
    if divergence:
        anomalies.append(Anomaly("log-divergence", len(divergence), divergence[:MAX_EXAMPLES],
                                 "replicas hold different records at an offset below both their HWMs"))
    kept = [{"node": node, "topic": p["topic"], "partition": p["partition"], "batches": p["corrupt_batches"][:4]}
            for node, s in sorted(brokers.items()) if node not in damaged_since_start
            for p in s.get("partitions", []) if p.get("corrupt_batches")]
    if kept:
        anomalies.append(Anomaly("corrupt-batch-kept", len(kept), kept[:MAX_EXAMPLES],
                                 "a broker kept a batch whose CRC does not match after its start-up recovery (001 5: "
                                 "recovery drops a corrupt tail before the broker serves)"))
    structure = [v for c in controllers for v in _controller_structure(c)]
    if structure:
        anomalies.append(Anomaly("controller-structure", len(structure), structure[:MAX_EXAMPLES],
                                 "the controller's ISR/ELR break the invariants of 001 5.2.1"))
    quorum = _quorum_checks(controllers)
    for name, found, why in quorum:
        anomalies.append(Anomaly(name, len(found), found[:MAX_EXAMPLES], why))
    metadata_logs = metadata_logs or {}
    # By node name: a broker that did not answer the dump still left its log behind.
    controller_files = {n: log for n, log in metadata_logs.items() if n.startswith("controller")}
    reference = _reference_metadata_log(controllers, controller_files)
    if reference is not None:
        behind = _broker_metadata_divergence(reference, {n: log for n, log in metadata_logs.items()
                                                         if n not in controller_files})
        if behind:
            anomalies.append(Anomaly("broker-metadata-divergence", len(behind), behind[:MAX_EXAMPLES],
                                     "a broker's metadata log is not a prefix of the controllers' (002 1.2.1: "
                                     "brokers replay only committed metadata)"))
        reused = _leader_epoch_reuse(reference[1])
        if reused:
            anomalies.append(Anomaly("leader-epoch-reuse", len(reused), reused[:MAX_EXAMPLES],
                                     "two brokers were made leader of one partition in the same leader epoch"))
    claimed = _claimed_leaders(brokers)
    if claimed:
        anomalies.append(Anomaly("two-leaders-one-epoch", len(claimed), claimed[:MAX_EXAMPLES],
                                 "two brokers act as leader of one partition in the same leader epoch"))
    recoveries = [r for c in controllers for r in c.get("unclean_recoveries", [])]
    worse = [_worse_choice(r) for r in recoveries]
    worse = [w for w in worse if w]
    if worse:
        anomalies.append(Anomaly("recovery-choice", len(worse), worse[:MAX_EXAMPLES],
                                 "an unclean recovery did not elect the candidate with the highest (last "
                                 "epoch, end offset), losing more than it had to (001 5.3)"))
    if controllers and lost_beyond_budget:
        reported = {str(r.get("partition")) for r in recoveries if r.get("topic") == topic}
        silent = [{"partition": int(p), "lost": n,
                   "summary": f"{n} acknowledged write(s) of partition {p} were lost after a fault beyond the "
                              f"budget, and the controller reported no unclean recovery of partition {p}"}
                  for p, n in sorted(lost_beyond_budget.items(), key=lambda kv: int(kv[0])) if n and p not in reported]
        if silent:
            anomalies.append(Anomaly("unreported-data-loss", len(silent), silent[:MAX_EXAMPLES],
                                     "committed data was lost without the potential data-loss event 001 5.3.2 "
                                     "requires: a replica missing it led without an unclean recovery"))
    behind = _behind_at_end(brokers)
    stats = {"brokers_dumped": len(brokers), "controllers_dumped": len(controllers),
             "partitions_compared": len({(p["topic"], p["partition"]) for s in brokers.values()
                                         for p in s.get("partitions", [])}),
             "unclean_recoveries": len(recoveries), "replicas_behind_at_end": len(behind)}
    details: dict[str, Any] = {"unclean_recoveries": recoveries} if recoveries else {}
    if behind:
        details["replicas_behind_at_end"] = behind
    return Result("replicas", not anomalies, anomalies, stats, details)


def _behind_at_end(brokers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Followers still outside the ISR and short of their leader's HWM when the dumps were taken, after
    the heal, the recovery wait and the final reads. Not an anomaly (a follower may still be catching
    up), but a replica stuck there is a liveness bug worth a look (PROTOCOL.md 8, "Liveness after
    heal"): one such was a follower looping on the same divergence forever."""
    leaders = {(p["topic"], p["partition"]): p for s in brokers.values() for p in s.get("partitions", [])
               if p.get("role") == "leader"}
    out = []
    for node, state in sorted(brokers.items()):
        for p in state.get("partitions", []):
            lead = leaders.get((p["topic"], p["partition"]))
            if (p.get("role") == "follower" and lead is not None and state.get("node_id") not in lead["isr"]
                    and p["leo"] < lead["hwm"]):
                out.append({"node": node, "topic": p["topic"], "partition": p["partition"], "leo": p["leo"],
                            "leader_hwm": lead["hwm"], "leader_isr": lead["isr"]})
    return out


# A metadata log is either a list of records from offset 0, or {"base": B, "records": [...]}: the
# records from offset B on (a controller's or broker's log after a snapshot, 002 1.2.x). Two logs
# are compared only on the offsets both hold.
MetadataLog = list[dict[str, Any]] | dict[str, Any]


def _based(log: MetadataLog) -> tuple[int, list[dict[str, Any]]]:
    if isinstance(log, dict):
        return int(log.get("base", 0)), list(log.get("records", []))
    return 0, log


def _end(log: MetadataLog) -> int:
    base, records = _based(log)
    return base + len(records)


def _first_difference(log: MetadataLog, other: MetadataLog) -> int | None:
    """The first absolute offset both logs hold where they differ, or None."""
    (b1, r1), (b2, r2) = _based(log), _based(other)
    for o in range(max(b1, b2), min(b1 + len(r1), b2 + len(r2))):
        if r1[o - b1] != r2[o - b2]:
            return o
    return None


def _at(log: MetadataLog, offset: int) -> dict[str, Any] | None:
    base, records = _based(log)
    return records[offset - base] if base <= offset < base + len(records) else None


def _controller_log(c: dict[str, Any]) -> MetadataLog | None:
    log = c.get("metadata_log")
    if not isinstance(log, list):
        return None
    base = int(c.get("metadata_snapshot_offset") or 0)
    return {"base": base, "records": log} if base else log


def _quorum_checks(controllers: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]], str]]:
    """Raft's promises between the controllers of a quorum, from their dumps (nothing for one controller)."""
    out = []
    logs = [(c.get("node_id"), _controller_log(c)) for c in controllers]
    logs = [(n, log) for n, log in logs if log is not None]
    if len(logs) > 1:
        longest_id, longest = max(logs, key=lambda kv: _end(kv[1]))
        bad = []
        for node_id, log in logs:
            at = _first_difference(log, longest)
            if at is not None:
                bad.append({"controller": node_id, "longest": longest_id, "offset": at,
                            "records": [_at(log, at), _at(longest, at)],
                            "summary": f"controller {node_id}'s metadata log differs from controller {longest_id}'s "
                                       f"at offset {at}"})
        if bad:
            out.append(("metadata-log-divergence", bad,
                        "a controller's metadata log is not a prefix of the longest: committed metadata diverged"))
    leaders: dict[Any, list[Any]] = {}
    for c in controllers:
        raft = c.get("raft") or {}
        if raft.get("role") == "leader":
            leaders.setdefault(raft.get("term"), []).append(c.get("node_id"))
    split = [{"term": t, "leaders": ids, "summary": f"controllers {ids} all lead term {t}"}
             for t, ids in leaders.items() if len(ids) > 1]
    if split:
        out.append(("controller-split-brain", split, "more than one Raft leader in one term"))
    return out


def _reference_metadata_log(controllers: list[dict[str, Any]], files: dict[str, MetadataLog]
                            ) -> tuple[str, MetadataLog] | None:
    """The controller metadata log reaching furthest (a quorum's are in their dumps; a single
    controller's is its file), as (where, log); None when the run collected none."""
    logs: list[tuple[str, MetadataLog]] = []
    for c in controllers:
        log = _controller_log(c)
        if log is not None:
            logs.append((f"controller {c.get('node_id')}", log))
    logs += [(node, log) for node, log in files.items()]
    return max(logs, key=lambda kv: _end(kv[1])) if logs else None


def _broker_metadata_divergence(reference: tuple[str, MetadataLog],
                                brokers: dict[str, MetadataLog]) -> list[dict[str, Any]]:
    """A broker's log must agree with the reference on the offsets both hold and end no later."""
    where, log = reference
    out = []
    for node, mine in sorted(brokers.items()):
        at = _first_difference(mine, log)
        if at is None and _end(mine) > _end(log):
            at = max(_end(log), _based(mine)[0])
        if at is not None:
            out.append({"broker": node, "offset": at, "records": [_at(mine, at), _at(log, at)],
                        "summary": f"{node}'s metadata log differs from {where}'s at offset {at}"
                                   + (" (it is longer)" if at >= _end(log) else "")})
    return out


def _leader_epoch_reuse(log: MetadataLog) -> list[dict[str, Any]]:
    """Over the records the log holds (a snapshot's compacted prefix is not seen)."""
    leaders: dict[tuple[str, int, int], set[int]] = {}
    for r in _based(log)[1]:
        if r.get("type") == "partition" and r.get("leader", -1) >= 0:
            leaders.setdefault((r["topic"], r["partition"], r["leader_epoch"]), set()).add(r["leader"])
    return [{"topic": t, "partition": p, "leader_epoch": e, "leaders": sorted(ids),
             "summary": f"{t}-{p}: brokers {sorted(ids)} were all made leader in leader epoch {e}"}
            for (t, p, e), ids in sorted(leaders.items()) if len(ids) > 1]


def _claimed_leaders(brokers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """From the brokers' own dumps at teardown: two that both lead one partition in one epoch."""
    claims: dict[tuple[str, int, int], list[str]] = {}
    for node, state in sorted(brokers.items()):
        for p in state.get("partitions", []):
            if p.get("role") == "leader":
                claims.setdefault((p["topic"], p["partition"], p["leader_epoch"]), []).append(node)
    return [{"topic": t, "partition": p, "leader_epoch": e, "brokers": nodes,
             "summary": f"{t}-{p}: {', '.join(nodes)} all act as leader in leader epoch {e}"}
            for (t, p, e), nodes in sorted(claims.items()) if len(nodes) > 1]


def _worse_choice(rec: dict[str, Any]) -> dict[str, Any] | None:
    cands = {str(b): tuple(v) for b, v in (rec.get("candidates") or {}).items() if isinstance(v, list | tuple)}
    chosen = cands.get(str(rec.get("leader")))
    if chosen is None or not cands:
        return None
    best_broker, best = max(cands.items(), key=lambda kv: kv[1])
    if chosen >= best:
        return None
    return {"topic": rec.get("topic"), "partition": rec.get("partition"), "leader": rec.get("leader"),
            "candidates": {b: list(v) for b, v in cands.items()},
            "summary": f"partition {rec.get('partition')}: broker {rec.get('leader')} (epoch, end offset "
                       f"{list(chosen)}) was elected over broker {best_broker} ({list(best)})"}


def _log_divergence(brokers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    replicas: dict[tuple[str, int], list[tuple[str, dict[str, Any]]]] = {}
    for node, state in sorted(brokers.items()):
        for p in state.get("partitions", []):
            if "log" in p:
                replicas.setdefault((p["topic"], p["partition"]), []).append((node, p))
    out = []
    for (topic, partition), views in sorted(replicas.items()):
        for i, (node_a, a) in enumerate(views):
            log_a = {r[0]: r for r in a["log"]}
            for node_b, b in views[i + 1:]:
                below = min(a["hwm"], b["hwm"])
                for r in b["log"]:
                    if r[0] >= below:
                        break
                    mine = log_a.get(r[0])
                    if mine is not None and tuple(mine) != tuple(r):
                        out.append({"topic": topic, "partition": partition, "offset": r[0], "below_hwm": below,
                                    node_a: {"leader_epoch": mine[1], "value_digest": mine[2]},
                                    node_b: {"leader_epoch": r[1], "value_digest": r[2]}})
                        break  # the first divergent offset of a pair says it; the rest follows
    return out


def _controller_structure(c: dict[str, Any]) -> list[dict[str, Any]]:
    min_isr = {t["topic"]: int(t.get("configs", {}).get("min.insync.replicas", 1)) for t in c.get("topics", [])}
    fenced = {b["broker_id"] for b in c.get("brokers", []) if b.get("fenced")}
    out = []
    for p in c.get("partitions", []):
        isr, elr, replicas = set(p["isr"]), set(p.get("elr", [])), set(p["replicas"])
        where = {"topic": p["topic"], "partition": p["partition"], "isr": p["isr"], "elr": p.get("elr", [])}
        if not isr <= replicas or not elr <= replicas:
            out.append({**where, "violation": "ISR or ELR holds a broker that is not a replica"})
        if isr & elr:
            out.append({**where, "violation": "a broker is in both the ISR and the ELR"})
        if len(isr) >= min_isr.get(p["topic"], 1) and elr:
            out.append({**where, "violation": "an ELR while the ISR meets min ISR"})
        if isr & fenced:
            out.append({**where, "violation": f"fenced broker(s) {sorted(isr & fenced)} in the ISR"})
    return out


NOT_APPLICABLE = ("the cluster gives no state dumps (a Kafka-protocol system we did not build), so the "
                  "broker-side invariants do not apply to this run")
REPLICAS = "replicas"  # the name of its input in CheckContext.data: replicas.json's document


class ReplicaStateChecker:
    """`check_states` over the replicas' normalised state at the end of the run (replicas.json, handed in as
    CheckContext.data["replicas"], schema in clusters/replica_dumps.py), and over the queue checker's losses
    beyond the fault budget (its result, handed on as CheckContext.previous["queue"]).

    Every node's dump is an input: one that could not be used makes the verdict unknown (an anomaly found in
    the dumps that were read still makes it false). A cluster that gives no dumps at all is not applicable:
    valid, with the note in stats."""

    name = "replicas"

    def __init__(self, excused_by: str | None = "queue"):
        # The checker whose result counts the losses it excused beyond the fault budget (unreported-data-loss
        # asks whether the cluster owned up to each); None: the workload's checker excuses none (the txn
        # checker: every loss is its lost-write), so there is nothing for that rule to judge.
        self.excused_by = excused_by

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return self.check_in(test, history, CheckContext())

    def check_in(self, test: dict[str, Any], history: Sequence[Op], context: CheckContext) -> Result:
        excused = context.previous.get(self.excused_by) if self.excused_by is not None else None
        return check_replicas(test, history, context.data.get(REPLICAS), excused,
                              judge_excused_losses=self.excused_by is not None)


def check_replicas(test: dict[str, Any], history: Sequence[Op], replicas: dict[str, Any] | None,
                   queue: Result | None = None, judge_excused_losses: bool = True) -> Result:
    """The replica checker's verdict from test.json, the history, replicas.json's document (None: none was
    handed in) and the queue checker's result (None: it did not run before this one). judge_excused_losses
    False: the workload's checker excused no loss beyond the budget, so unreported-data-loss is not asked."""
    if not _dumps_expected(test, replicas):
        return Result(REPLICAS, True, stats={"not_applicable": NOT_APPLICABLE})
    missing = missing_node_files(REPLICAS, test, replicas, "no-state-dumps", "state dumps",
                                 "the replicas' state (replicas.json)")
    if missing is not None:
        return missing
    nodes = replicas["nodes"]
    states, reasons = {}, []
    for node, entry in sorted(nodes.items()):
        if isinstance(entry.get("state"), dict):
            states[node] = entry["state"]
        else:
            reasons.append(say("state-dump-unreadable", node=node, where=entry.get("dump"), why=entry.get("why")))
    metadata_logs, log_reasons = _metadata_logs(nodes)
    lost, lost_reasons = _lost_beyond_budget(history, queue) if judge_excused_losses else (None, [])
    result = check_states(states, lost, metadata_logs=metadata_logs, damaged_since_start=damaged_since_start(history))
    result.unknown_reasons = reasons + log_reasons + lost_reasons
    result.stats["dumps_read"] = len(states)
    if result.unknown_reasons:
        result.stats["inputs_unreadable"] = len(result.unknown_reasons)
        if result.valid is True:  # a proven anomaly stays proven; an unread dump may hide one
            result.valid = UNKNOWN
    return result


def damaged_since_start(history: Sequence[Op]) -> set[str]:
    """Brokers the file-corruption fault damaged (start-file-corruption ops) and did not restart since
    (a later stop-file-corruption whose `restarted` has the node running again)."""
    damaged: set[str] = set()
    for op in history:
        value = op.value if isinstance(op.value, dict) else {}
        if op.f == "start-file-corruption":
            damaged |= set(value.get("file-corruption") or [])
            snapshot = value.get("snapshot")  # a rollback: the damage is done at the stop, before its restart
            if isinstance(snapshot, dict) and snapshot.get("node"):
                damaged.add(snapshot["node"])
        elif op.f == "stop-file-corruption":
            restarted = value.get("restarted") or {}
            damaged -= {n for n, r in restarted.items() if isinstance(r, dict) and r.get("process") == "running"}
    return damaged


def _dumps_expected(test: dict[str, Any], replicas: dict[str, Any] | None) -> bool:
    """Whether this run's cluster gives state dumps: as test.json says (`state_dumps`); a run stored
    before it said so, as replicas.json says (normalised from such a run: when any node left a dump)."""
    declared = test.get("state_dumps")
    if declared is not None:
        return bool(declared)
    return bool(replicas and replicas.get("state_dumps"))


def _metadata_logs(nodes: dict[str, Any]) -> tuple[dict[str, MetadataLog], list[str]]:
    """Each node's metadata log as records ({"base", "records"} after a snapshot), and one sentence per log
    that could not be read whole. The logs are optional (a node may not have kept one); one unreadable past
    a bad line in its middle is unknown past it: what follows was not compared."""
    out: dict[str, MetadataLog] = {}
    reasons: list[str] = []
    for node, entry in sorted(nodes.items()):
        log = entry.get("metadata_log")
        if not isinstance(log, dict):
            continue
        if "why" in log:
            past = log.get("unreadable_past")
            reasons.append(say("metadata-log-unreadable", node=node, where=log.get("where"),
                               past="" if past is None else f" past offset {past}", why=log["why"]))
        if isinstance(log.get("records"), list):
            base = int(log.get("base") or 0)
            out[node] = {"base": base, "records": log["records"]} if base else log["records"]
    return out, reasons


def _lost_beyond_budget(history: Sequence[Op], queue: Result | None) -> tuple[dict[str, int] | None, list[str]]:
    """Partition -> acknowledged writes lost after a fault beyond the budget, from the queue checker's result
    (checkers/queue.py counts them, apart from lost writes); None without such a fault. With one, and no
    queue result that counted them, unreported-data-loss cannot be checked: one sentence why."""
    if beyond_budget_time(history) is None:
        return None, []
    counted = (queue.details.get("lost_beyond_fault_budget") if queue is not None else None) or {}
    if "by_key" in counted:
        return counted["by_key"], []
    why = ("the queue checker did not run before this one" if queue is None
           else f"the queue checker could not finish ({queue.error})" if queue.error
           else "the queue checker's result does not count them")
    return None, [say("no-queue-losses", why=why)]
