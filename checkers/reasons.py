"""Every reason a verdict cannot be "valid": one catalogue, so each sentence is written once and
docs/VERDICTS.md lists them all with an example (results/verdicts_doc.py renders it from here).

Checkers and the evidence rules (checkers/evidence.py) say a reason with `say(code, **fields)`;
the sentence names the cause and, where there is one, what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CannotDecide:
    """One reason a verdict cannot be valid: its code, its sentence (a format string) and an example."""

    code: str
    rule: str       # progress | faults | checker inputs | harness
    template: str
    example: dict[str, Any]

    def say(self, **fields: Any) -> str:
        return self.template.format(**fields)


REASONS: dict[str, CannotDecide] = {r.code: r for r in (
    # --- the workload made progress ---------------------------------------------------------------
    CannotDecide("no-client-ops", "progress", "the history holds no client operation, so there is nothing to judge",
                 {}),
    CannotDecide("no-acknowledged-send", "progress",
                 "partition {partition} acknowledged no send in the whole run, so no write there could be lost",
                 {"partition": 2}),
    CannotDecide("nothing-read", "progress",
                 "no consumer read a record of partition {partition} during the main phase, so reads there "
                 "were never tested under the faults", {"partition": 2}),
    CannotDecide("no-final-read", "checker inputs",
                 "partitions {partitions} have acknowledged sends but no complete final read, so their losses "
                 "cannot be known", {"partitions": [1, 3]}),
    # --- the faults happened ---------------------------------------------------------------------
    CannotDecide("fault-never-applied", "faults",
                 "the {fault} fault was planned but never applied ({why})",
                 {"fault": "partition", "why": "2 attempts; the first: the partition's shape cuts nothing on these "
                                               "nodes (no grudge)"}),
    CannotDecide("fault-never-observed", "faults",
                 "the {fault} fault was applied {n} time(s) but never seen to take effect ({why})",
                 {"fault": "kill", "n": 3, "why": "broker-2's process is running, not down"}),
    CannotDecide("scenario-fault-unproven", "faults",
                 "fault #{id} of scenario {scenario} ({what}) {problem}",
                 {"id": 3, "scenario": "unclean-election", "what": "partition broker-3",
                  "problem": "was not seen to take effect: traffic still flows across the cut: broker-1->broker-3 open"}),
    CannotDecide("scenario-stalled", "faults",
                 "scenario {scenario} stopped at step {step} ({what}: {why}), so the run did not test the scenario "
                 "to its end",
                 {"scenario": "unclean-election", "step": 8, "what": "wait fenced broker-1",
                  "why": "fenced ['broker-1'] not reached in 30 s"}),
    CannotDecide("scenario-unfinished", "faults",
                 "scenario {scenario} ran {done} of its {steps} steps before the run ended, so the run did not "
                 "test it to its end (give it a longer --time-limit)",
                 {"scenario": "balanced-recovery", "done": 12, "steps": 19}),
    CannotDecide("no-fault-records", "faults",
                 "the history carries no fault records (a run from before the fault ledger, or a nemesis that "
                 "bypassed it), so whether its faults {faults} took effect is not known",
                 {"faults": ["kill", "pause"]}),
    CannotDecide("fault-not-healed", "faults",
                 "fault #{id} ({label}, by {by}) was never healed: it may have outlived the run",
                 {"id": 7, "label": "pause broker-2", "by": "pause"}),
    CannotDecide("heal-not-observed", "faults",
                 "the heal of fault #{id} ({label}, by {by}) was not seen to take effect ({why})",
                 {"id": 4, "label": "partition broker-3", "by": "partition",
                  "why": "still cut after the heal: broker-1->broker-3 timeout"}),
    CannotDecide("no-final-heal", "faults",
                 "the history has no final heal: the harness stopped before healing, so faults may have "
                 "outlived the run", {}),
    CannotDecide("heal-failed", "faults", "the final heal failed: {errors}",
                 {"errors": "start broker-2: RemoteError: broker-2: `...` exited 1"}),
    # --- the checkers had their inputs ---------------------------------------------------------------
    CannotDecide("checker-could-not-finish", "checker inputs", "the {checker} checker could not finish ({error})",
                 {"checker": "linearizable", "error": "MemoryError: "}),
    CannotDecide("checker-gave-no-reason", "checker inputs", "the {checker} checker could not decide and gave no "
                 "reason", {"checker": "elle"}),
    CannotDecide("history-torn", "checker inputs",
                 "the history's last line was cut off mid-write ({path}), so the op it held is missing",
                 {"path": "history.jsonl"}),
    # --- the harness ran to the end -------------------------------------------------------------------
    CannotDecide("thread-died", "harness", "the {thread} thread died ({error}), so {consequence}",
                 {"thread": "worker-3", "error": "KeyError: 'value'",
                  "consequence": "its process issued no more ops"}),
    CannotDecide("nemesis-overran", "harness",
                 "the nemesis was still inside a fault step {grace_s:.0f} s after the main phase ended, so the "
                 "heal may have raced it", {"grace_s": 90.0}),
    CannotDecide("interrupted", "harness", "the run was {how}, so it did not run to its end", {
        "how": "interrupted by SIGTERM"}),
    CannotDecide("no-final-reads", "harness", "{why}", {
        "why": "no final reads: the cluster did not answer a client within 60 s after the heal"}),
    CannotDecide("harness-failed", "harness", "the harness failed ({error}), so the run did not go to its end",
                 {"error": "RemoteError: broker-1: `iptables -w -N KAFKAESQUE` exited 3"}),
    CannotDecide("no-run-facts", "harness",
                 "the run left no record of how its harness threads ended (no readable results.json), so it "
                 "cannot be shown that they ran to the end", {}),
)}


def say(code: str, **fields: Any) -> str:
    return REASONS[code].say(**fields)

