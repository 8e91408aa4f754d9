"""The DuckDB peer of benchmarks/bench_queue_streaming.py computes the queue checker's assign-mode rules: its
counts and verdict equal the in-process checker's on random histories with each anomaly injected, so the
figure the streamed checker is compared with is for the same work (issue 26)."""

import json
import random

import pytest

from benchmarks.peers import duckdb_queue_rules
from benchmarks.peers.duckdb_queue_rules import COUNTS, queue_rule_counts
from kafkaesque_harness.checkers.queue import check_queue
from kafkaesque_harness.history import NEMESIS, Op
from kafkaesque_harness.history.faults import BEYOND_BUDGET
from tests.unit.queue_histories import ANOMALIES, generate

# The peer reads the queue workload's int keys, offsets and values; subscribe mode's anomalies are not its.
INT_ANOMALIES = tuple(a for a in ANOMALIES if a not in ("float-offset", "string-value", "committed-rewind"))
JUDGED = (*COUNTS, "lost-write")
CASES = [(seed, anomaly) for anomaly in (None, *INT_ANOMALIES) for seed in range(5)]


def random_history(seed: int, anomaly: str | None) -> list[Op]:
    rng = random.Random(seed)
    return generate(seed, n_ops=rng.randrange(20, 150), keys=rng.randrange(1, 4), processes=rng.randrange(1, 6),
                    anomalies=(anomaly,) if anomaly else ())


def peer_and_checker_agree(tmp_path, ops: list[Op]) -> dict:
    """The peer's counts of `ops` (written to a file), asserted equal to the queue checker's; returned."""
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(op.to_dict()) + "\n" for op in ops))
    mine = check_queue(ops)
    peer = queue_rule_counts(str(path))
    assert {n: peer[n] for n in JUDGED} == {n: mine.stats[f"{n}-count"] for n in JUDGED}
    assert peer["verdict"] == str(mine.valid).lower()
    assert peer["acked"] == mine.stats["acked-sends"]
    return peer


@pytest.mark.parametrize(("seed", "anomaly"), CASES)
def test_the_duckdb_peer_counts_what_the_queue_checker_counts(tmp_path, seed, anomaly):
    peer_and_checker_agree(tmp_path, random_history(seed, anomaly))


def test_the_peer_finds_each_anomaly_it_is_compared_on():
    """The cases above are not all clean: each count is non-zero in some of them (a peer that found nothing
    would agree with the checker only on valid histories)."""
    found = set()
    for seed, anomaly in CASES:
        if anomaly is not None:
            found |= {n for n in JUDGED if check_queue(random_history(seed, anomaly)).stats[f"{n}-count"]}
    assert found == set(JUDGED)


def ops_of(*rows) -> list[Op]:
    """(type, f, process, value) rows, a millisecond apart."""
    return [Op(t, f, p, v, time=(i + 1) * 1_000_000) for i, (t, f, p, v) in enumerate(rows)]


SENDS = [("invoke", "send", 0, [0, 1]), ("ok", "send", 0, [0, [0, 1]]),
         ("invoke", "send", 0, [0, 2]), ("ok", "send", 0, [0, [1, 2]]),
         ("invoke", "send", 0, [0, 3]), ("ok", "send", 0, [0, [2, 3]])]
FINAL = [("invoke", "final-poll", 9, [0]), ("ok", "final-poll", 9, [0, 3, [[0, 1], [1, 2], [2, 3]]])]
# Cases the random histories do not make: each breaks a rule the peer could get wrong unseen.
HAND_MADE = {
    # a consumer reads offset 0 twice: a step to the same offset is backwards (nonmonotonic)
    "reread": ops_of(*SENDS, ("invoke", "poll", 1, None), ("ok", "poll", 1, {"0": [[0, 1]]}),
                     ("invoke", "poll", 1, None), ("ok", "poll", 1, {"0": [[0, 1], [1, 2]]}), *FINAL),
    # a final read does not move its process's position: its next poll follows on from its last poll (the
    # final read's own first record, offset 0 after the poll's 0, is a step backwards: one anomaly, not two)
    "final-then-poll": ops_of(*SENDS, ("invoke", "poll", 1, None), ("ok", "poll", 1, {"0": [[0, 1]]}),
                              ("invoke", "final-poll", 1, [0]), ("ok", "final-poll", 1, [0, 3, [[0, 1], [1, 2], [2, 3]]]),
                              ("invoke", "poll", 1, None), ("ok", "poll", 1, {"0": [[1, 2], [2, 3]]})),
    # a send lost before a fault beyond the budget is excused; one lost after it is a lost write
    "beyond-budget": ops_of(("invoke", "send", 0, [0, 1]), ("ok", "send", 0, [0, [0, 1]]),
                            ("invoke", "power-cut", "nemesis", None),
                            ("info", "power-cut", "nemesis", {"beyond_fault_budget": True, "nodes": ["n1"]}),
                            ("invoke", "send", 0, [0, 2]), ("ok", "send", 0, [0, [0, 2]]),
                            ("invoke", "send", 0, [0, 3]), ("ok", "send", 0, [0, [1, 3]]),
                            ("invoke", "final-poll", 9, [0]), ("ok", "final-poll", 9, [0, 2, [[0, 2]]])),
}


@pytest.mark.parametrize("name", HAND_MADE)
def test_the_duckdb_peer_counts_what_the_queue_checker_counts_on_hand_made_cases(tmp_path, name):
    peer = peer_and_checker_agree(tmp_path, HAND_MADE[name])
    anomaly = {"reread": "nonmonotonic-poll", "final-then-poll": "nonmonotonic-poll", "beyond-budget": "lost-write"}[name]
    assert sum(peer[n] for n in JUDGED) == peer[anomaly] == 1  # that one anomaly, once


def test_the_peer_names_the_nemesis_and_the_budget_mark_as_the_history_does():
    assert (duckdb_queue_rules.NEMESIS, duckdb_queue_rules.BEYOND_BUDGET) == (NEMESIS, BEYOND_BUDGET)
