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
    CannotDecide("no-committed-transaction", "progress",
                 "no send, poll or transaction completed ok, so no committed data can be judged", {}),
    CannotDecide("no-assignment-log", "checker inputs",
                 "consumer group members took up partitions {count} time(s) with no assignment of them on record "
                 "(the op's rebalance_log; histories written before the queue workload logged rebalances lack it), "
                 "so whether the group lost a committed offset cannot be judged", {"count": 3}),
    CannotDecide("no-acknowledged-send-at-all", "progress",
                 "no send was acknowledged, so no acknowledged write could be lost: the history never tested what "
                 "the queue checker exists to judge", {}),
    CannotDecide("no-log-observed", "progress",
                 "the history holds no acknowledged send and no completed read of a partition, so no log was "
                 "observed and there is no order to judge", {}),
    CannotDecide("nothing-observed", "progress",
                 "none of the history's {ops} {model} operation(s) observed the state (a read, a cas with a known "
                 "outcome, an acknowledged offset), so every order is legal and nothing was judged",
                 {"ops": 120, "model": "register"}),
    CannotDecide("nothing-read-by-transactions", "progress",
                 "no committed transaction read a key, so no dependency could be inferred and there is no cycle to "
                 "look for", {}),
    CannotDecide("search-out-of-budget", "checker inputs",
                 "the search ran out of {budget} before deciding {what}: linearizability there is not known (give "
                 "the checker a larger time limit)", {"budget": "its 60.0 s time limit", "what": "partition(s) 2"}),
    CannotDecide("cycle-search-out-of-budget", "checker inputs",
                 "the cycle search ran out of its {seconds:.0f} s budget in a strongly connected component: a cycle "
                 "exists, but whether its class is one {models} forbids is not known (give it a larger budget)",
                 {"seconds": 10.0, "models": "snapshot-isolation"}),
    CannotDecide("state-dump-unreadable", "checker inputs",
                 "the state dump of {node} ({where}) could not be read: {why}; the replica invariants cannot be "
                 "checked without it", {"node": "broker-2", "where": "nodes/broker-2/state.json",
                                        "why": "not JSON (Expecting value: line 1 column 1 (char 0))"}),
    CannotDecide("no-state-dumps", "checker inputs",
                 "{why}; the replica invariants cannot be checked without them",
                 {"why": "no node left a state dump in nodes/ and test.json names no nodes"}),
    CannotDecide("metadata-log-unreadable", "checker inputs",
                 "the metadata log of {node} ({where}) could not be read{past}: {why}; the metadata-log invariants "
                 "cannot be checked without it", {"node": "broker-1", "where": "nodes/broker-1/metadata.log",
                                                 "past": " past offset 41",
                                                 "why": "line 42 is not the next log entry and more lines follow"}),
    CannotDecide("trace-unreadable", "checker inputs",
                 "the protocol trace of {node} ({where}) could not be read: {why}; the protocol's rules cannot be "
                 "checked on that node's decisions without it", {"node": "broker-3", "where": "nodes/broker-3/trace.jsonl",
                                                                 "why": "the file is missing"}),
    CannotDecide("no-trace", "checker inputs",
                 "{why}; the protocol's rules cannot be checked from the inside without them",
                 {"why": "no node left a trace in nodes/ and test.json names no nodes"}),
    CannotDecide("no-queue-losses", "checker inputs",
                 "a fault went beyond the fault budget, but the acknowledged writes lost after it are not known "
                 "({why}), so whether the cluster reported each loss (an unclean recovery of its partition) "
                 "cannot be checked", {"why": "the queue checker could not finish (MemoryError: )"}),
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

