"""Evidence rules for the verdict, decided in one place: a run is valid only when it proves it tested
what it claims.

A checker that finds no anomaly has shown only that nothing went wrong in what it saw. Jepsen's
rule is that a checker that cannot decide says so; Antithesis adds that a test must also show it
reached what it meant to test. So a run is `valid` only when, besides every checker's verdict:

- the workload made progress on every partition: acknowledged sends and reads during the main
  phase, and complete final reads (ProgressChecker; the queue checker needs the final reads);
- every planned fault was applied and observed to take effect at least once, a scenario ran all
  its steps, and every fault that was applied was healed and the heal observed
  (FaultEvidenceChecker, from the fault records in the history: history/faults.py);
- every checker had all its inputs (each says unknown, with its reason, when it lacked one);
- the harness itself ran to the end: every worker and the nemesis thread ended normally, the
  run was not interrupted, the final reads could be made (`run_fact_reasons`, from the facts the
  runner records in results.json under "run").

Anything less is "unknown", with one sentence per missing proof in results["unknown_reasons"]
(an anomaly found stays a proof: the verdict is then false, with the reasons listed beside it).
Every reason is one of checkers/reasons.py's REASONS, the list docs/VERDICTS.md is generated
from (results/verdicts_doc.py), each with an example.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from kafkaesque_harness.checkers.core import UNKNOWN, Result
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.history import (
    FAULTS_KEY,
    HEAL_F,
    INVOKE,
    NEMESIS,
    OK,
    FaultRecord,
    Op,
    fault_records,
    pair_ops,
)


# --- progress -------------------------------------------------------------------------------------------
class ProgressChecker:
    """Did the workload do anything on every partition? Acknowledged sends and main-phase reads per
    partition (the queue schema: checkers/queue.py; the txn schema's committed transactions: workloads/txn.py).
    `partitions`: how many the test had; None reads
    the keys the sends named (a history from elsewhere)."""

    name = "progress"

    def __init__(self, partitions: int | None = None):
        self.partitions = partitions

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        from kafkaesque_harness.checkers.queue import QUEUE_VALUES, poll_items

        acked: Counter[int] = Counter()
        read: Counter[int] = Counter()
        named: set[int] = set()
        for inv, comp in pair_ops(history):
            if inv.process == NEMESIS:
                continue
            key = QUEUE_VALUES.key(inv) if inv.f == "send" else None
            if key is not None:
                named.add(key)
                if comp is not None and comp.type == OK:
                    acked[key] += 1
            elif inv.f == "poll" and comp is not None and comp.type == OK:
                for key, recs in poll_items("poll", comp.value):
                    if recs:
                        read[key] += 1
            elif inv.f == "txn" and comp is not None and comp.type == OK and isinstance(comp.value, list):
                # the txn schema (workloads/txn.py): a committed transaction's sends and polls, micro-op by micro-op
                for micro in comp.value:
                    if micro and micro[0] == "send" and len(micro) == 3:
                        named.add(int(micro[1]))
                        acked[int(micro[1])] += 1
                    elif micro and micro[0] == "poll" and len(micro) == 2:
                        for key, recs in poll_items("poll", micro[1]):
                            if recs:
                                read[key] += 1
        partitions = self.partitions or test.get("partitions")
        keys = range(int(partitions)) if partitions else sorted(named)
        reasons = [say("no-acknowledged-send", partition=k) for k in keys if not acked[k]]
        reasons += [say("nothing-read", partition=k) for k in keys if not read[k]]
        stats = {"acknowledged_sends": {str(k): acked[k] for k in keys}, "polls_with_records": {str(k): read[k]
                                                                                              for k in keys}}
        return Result(self.name, UNKNOWN if reasons else True, stats=stats, unknown_reasons=reasons)


# --- faults -----------------------------------------------------------------------------------------------
SCENARIO_PREFIX = "scenario:"


class FaultEvidenceChecker:
    """Did every planned fault happen and get undone? Read from the fault records the nemesis ops carry
    (history/faults.py) and the run's final heal op. `test["nemesis"]` is the plan."""

    name = "faults"

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        planned = [n for n in (test.get("nemesis") or []) if n]
        records = fault_records(history)
        heals = [op for op in history if op.process == NEMESIS and op.f == HEAL_F and op.type != INVOKE]
        reasons: list[str] = []
        if planned and not heals:
            reasons.append(say("no-final-heal"))
        for op in heals:
            errors = (op.value or {}).get("errors") if isinstance(op.value, dict) else None
            if errors:
                reasons.append(say("heal-failed", errors="; ".join(map(str, errors))[:600]))
        if planned and not _written_with_ledger(history):
            reasons.append(say("no-fault-records", faults=planned))
        elif planned:
            for name in planned:
                reasons += (_scenario_reasons(name, history, records) if name.startswith(SCENARIO_PREFIX)
                            else _planned_fault_reasons(name, [r for r in records if r.by == name]))
        for r in records:
            if r.applied is not True:
                continue
            if r.healed is None:
                reasons.append(say("fault-not-healed", id=r.id, label=r.label, by=r.by))
            elif r.healed is False:
                reasons.append(say("heal-not-observed", id=r.id, label=r.label, by=r.by, why=r.heal_error))
        return Result(self.name, UNKNOWN if reasons else True, stats=fault_stats(records),
                      details={"unobserved": [_brief(r) for r in records if r.applied and r.observed is False][:20]},
                      unknown_reasons=reasons)


def _written_with_ledger(history: Sequence[Op]) -> bool:
    """Does any nemesis op carry fault records (the final heal always does, if only an empty list)? A history
    from before the ledger has none, and then nothing shows whether its faults took effect."""
    return any(op.process == NEMESIS and op.type != INVOKE and isinstance(op.value, dict) and FAULTS_KEY in op.value
               for op in history)


def fault_stats(records: list[FaultRecord]) -> dict[str, dict[str, int]]:
    """Per fault kind: how many were requested, applied, observed, healed (what results.json shows)."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        row = out.setdefault(r.fault, {"requested": 0, "applied": 0, "observed": 0, "healed": 0})
        row["requested"] += 1
        row["applied"] += r.applied is True
        row["observed"] += r.observed is True
        row["healed"] += r.healed is True
    return out


def _brief(r: FaultRecord) -> dict[str, Any]:
    return {"id": r.id, "fault": r.label, "by": r.by, "why": r.observe_error}


def _planned_fault_reasons(name: str, mine: list[FaultRecord]) -> list[str]:
    applied = [r for r in mine if r.applied]
    if not applied:
        why = (f"{len(mine)} attempt(s); the first: {mine[0].apply_error}" if mine else
               "no attempt was made: the schedule or the targets never gave it a turn")
        return [say("fault-never-applied", fault=name, why=why)]
    if not any(r.observed for r in applied):
        return [say("fault-never-observed", fault=name, n=len(applied), why=applied[0].observe_error)]
    return []


def _scenario_steps(history: Sequence[Op]) -> list[tuple[Op, Op | None]]:
    return [(inv, comp) for inv, comp in pair_ops(history)
            if inv.process == NEMESIS and inv.f.startswith("scenario-")]


def _scenario_reasons(name: str, history: Sequence[Op], records: list[FaultRecord]) -> list[str]:
    """A scenario is a plan of steps: every one must have run, and every fault it made must have been
    seen to take effect (not just one of each kind). The protocol nemesis is not one: its moves are
    drawn at random, and a move whose role is missing gives way to another."""
    steps = [(inv, comp) for inv, comp in _scenario_steps(history)
             if (inv.value or {}).get("scenario") not in (None, "protocol")]
    label = name[len(SCENARIO_PREFIX):]
    scenario = next(((inv.value or {}).get("scenario") for inv, _ in steps), label)
    reasons = []
    for i, (inv, comp) in enumerate(steps, 1):
        what = " ".join(str(v) for k, v in (inv.value or {}).items() if k in ("node", "until", "role", "peer"))
        what = f"{inv.f[len('scenario-'):]} {what}".strip()
        if comp is None or comp.error:
            why = (comp.error if comp is not None else "it never completed")
            reasons.append(say("scenario-stalled", scenario=scenario, step=(inv.value or {}).get("step", i),
                               what=what, why=str(why)[:300]))
            break
    else:
        last = (steps[-1][0].value or {}) if steps else {}
        if isinstance(last.get("steps"), int) and last.get("step", 0) < last["steps"]:
            reasons.append(say("scenario-unfinished", scenario=scenario, done=last["step"], steps=last["steps"]))
    for r in records:
        if r.by.startswith(SCENARIO_PREFIX):
            if r.applied is False:
                reasons.append(say("scenario-fault-unproven", id=r.id, scenario=scenario, what=r.label,
                                   problem=f"failed: {r.apply_error}"))
            elif r.applied and r.observed is False:
                reasons.append(say("scenario-fault-unproven", id=r.id, scenario=scenario, what=r.label,
                                   problem=f"was not seen to take effect: {r.observe_error}"))
    if not steps:
        reasons.append(say("fault-never-applied", fault=name, why="the scenario never started a step"))
    return reasons


# --- the harness ------------------------------------------------------------------------------------------
def run_fact_reasons(run: dict[str, Any] | None) -> list[str]:
    """The harness's own record of the run (results.json "run", written by harness/runner.py)."""
    if run is None:
        return [say("no-run-facts")]
    reasons = []
    for thread, error in sorted((run.get("thread_failures") or {}).items()):
        consequence = ("the faults it was to inject stopped there" if thread == "nemesis" else
                       "its process issued no more ops")
        reasons.append(say("thread-died", thread=thread, error=error, consequence=consequence))
    if run.get("nemesis_overran_s"):
        reasons.append(say("nemesis-overran", grace_s=float(run["nemesis_overran_s"])))
    if run.get("interrupted"):
        reasons.append(say("interrupted", how=run["interrupted"]))
    if run.get("final_reads"):
        reasons.append(say("no-final-reads", why=run["final_reads"]))
    if run.get("error"):
        reasons.append(say("harness-failed", error=run["error"]))
    if run.get("history_torn"):
        reasons.append(say("history-torn", path=run["history_torn"]))
    return reasons


def decide(checked: dict[str, Any], run: dict[str, Any] | None) -> dict[str, Any]:
    """The verdict with the evidence rules applied: the checkers' composite (checkers/core.py compose),
    plus the harness's facts. Valid only with no reason left; an anomaly keeps it false."""
    out = dict(checked)
    reasons = list(dict.fromkeys([*checked.get("unknown_reasons", []), *run_fact_reasons(run)]))
    if reasons:
        out["unknown_reasons"] = reasons
        if out.get("valid") is True:
            out["valid"] = UNKNOWN
    return out
