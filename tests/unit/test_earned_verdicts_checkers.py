"""Earned verdicts, checker by checker (issue 19): a checker that judged nothing, or ran out of its
budget, says "unknown" with a reason sentence, never valid. Beside each, the history that must still
pass and the one that must still fail, so the rule does not make the checker say unknown to everything.
(The replica checker's unreadable dumps: tests/unit/test_replica_state_checker.py.)"""

import pytest

from kafkaesque_harness.checkers.core import UNKNOWN, run_checkers
from kafkaesque_harness.checkers.elle import check_list_append
from kafkaesque_harness.checkers.linearizable import check_linearizable
from kafkaesque_harness.checkers.log_order import check_log_order
from kafkaesque_harness.checkers.queue import QueueChecker, check_queue
from kafkaesque_harness.history import Op


def history(*pairs) -> list[Op]:
    """Ops from (invoke, completion) pairs, each pair after the one before (no concurrency)."""
    ops = []
    for inv, comp in pairs:
        ops += [inv, comp]
    for i, op in enumerate(ops):
        op.index, op.time = i, i * 1000
    return ops


def send(p, key, value, outcome="ok", offset=0):
    return (Op("invoke", "send", p, [key, value]),
            Op(outcome, "send", p, [key, [offset, value]] if outcome == "ok" else [key, value]))


def final(p, key, hwm, records):
    return Op("invoke", "final-poll", p, [key]), Op("ok", "final-poll", p, [key, hwm, records])


# --- the queue checker -----------------------------------------------------------------------------------------
NO_ACK = history(send(0, 0, 10, "fail"), send(1, 0, 11, "info"), final(2, 0, 0, []))


def test_a_queue_history_in_which_no_send_was_acknowledged_is_unknown():
    r = check_queue(NO_ACK)
    assert r.valid == UNKNOWN and r.unknown_reasons and "no send was acknowledged" in r.unknown_reasons[0]


def test_the_queue_checkers_reason_reaches_the_composite_verdict():
    out = run_checkers([QueueChecker()], {}, NO_ACK)
    assert out["valid"] == UNKNOWN and out["unknown_reasons"][0].startswith("queue: no send was acknowledged")


def test_an_acknowledged_send_read_back_is_still_valid_and_one_lost_still_invalid():
    assert check_queue(history(send(0, 0, 10), final(1, 0, 1, [[0, 10]]))).valid is True
    assert check_queue(history(send(0, 0, 10), final(1, 0, 0, []))).valid is False


# --- the log-order checker -------------------------------------------------------------------------------------
def test_a_log_order_history_without_an_observation_is_unknown():
    r = check_log_order(history(send(0, 0, 10, "fail"), send(1, 0, 11, "info")))
    assert r.valid == UNKNOWN and "no acknowledged send and no completed read" in r.unknown_reasons[0]


def test_the_log_order_checker_still_passes_an_observed_log_and_fails_a_stale_final_read():
    assert check_log_order(history(send(0, 0, 10), final(1, 0, 1, [[0, 10]]))).valid is True
    stale = check_log_order(history(send(0, 0, 10), final(1, 0, 0, [])))
    assert stale.valid is False and not stale.unknown_reasons


# --- the linearizability checker -------------------------------------------------------------------------------
def op_pair(f, p, value, outcome="ok", out=None):
    return Op("invoke", f, p, value), Op(outcome, f, p, value if out is None else out)


@pytest.mark.parametrize("model, ops", [
    ("register", history(op_pair("write", 0, 1), op_pair("write", 1, 2))),      # writes only
    ("register", history(op_pair("write", 0, 1, "fail"))),                       # not a single call
    ("cas-register", history(op_pair("write", 0, 1), op_pair("cas", 1, [1, 2], "info"))),
    ("kv", history(op_pair("put", 0, ["a", "x"]), op_pair("append", 1, ["a", "y"]))),
    ("log", history(send(0, 0, 10, "info"), send(1, 0, 11, "fail"))),            # no offset known
])
def test_a_history_whose_ops_observe_nothing_is_unknown_for_the_linearizability_checker(model, ops):
    r = check_linearizable(ops, model)
    assert r.valid == UNKNOWN and "nothing was judged" in r.unknown_reasons[0]


def test_the_linearizability_checker_still_passes_a_read_of_the_last_write_and_fails_a_stale_one():
    ok = history(op_pair("write", 0, 1), op_pair("write", 0, 2), op_pair("read", 1, None, out=2))
    stale = history(op_pair("write", 0, 1), op_pair("write", 0, 2), op_pair("read", 1, None, out=1))
    assert check_linearizable(ok, "register").valid is True
    assert check_linearizable(stale, "register").valid is False


def test_a_search_that_runs_out_of_its_budget_says_which_and_where():
    ops = [Op("invoke", "write", k, k) for k in range(40)] + [Op("ok", "write", k, k) for k in range(40)]
    ops += [Op("invoke", "read", 99, None), Op("ok", "read", 99, 1000)]
    for i, op in enumerate(ops):
        op.index = op.time = i
    r = check_linearizable(ops, "register", time_limit=0.05)
    assert r.valid == UNKNOWN
    (reason,) = r.unknown_reasons
    assert "ran out of its 0.05 s time limit before deciding the history" in reason


# --- Elle ------------------------------------------------------------------------------------------------------
def txn(p, mops, out=None, outcome="ok"):
    return Op("invoke", "txn", p, mops), Op(outcome, "txn", p, out if out is not None else mops)


@pytest.mark.parametrize("ops", [
    history(txn(0, [["append", "x", 1]]), txn(1, [["append", "x", 2]])),                    # appends only
    history(txn(0, [["r", "x", None]], outcome="fail"), txn(1, [["append", "x", 1]])),    # its only read failed
    history(send(0, 0, 10)),                                                              # no transaction at all
])
def test_an_elle_history_in_which_nothing_was_read_is_unknown(ops):
    r = check_list_append(ops)
    assert r.valid == UNKNOWN and r.unknown_reasons == [
        "no committed transaction read a key, so no dependency could be inferred and there is no cycle to look for"]


def write_skew() -> list[Op]:
    """T1 and T2 each read the key the other appends to, and miss its append: a cycle of two
    anti-dependencies (G2-item), which snapshot isolation allows and serializability forbids."""
    return history(txn(0, [["r", "x", None], ["append", "y", 1]], [["r", "x", []], ["append", "y", 1]]),
                   txn(1, [["r", "y", None], ["append", "x", 1]], [["r", "y", []], ["append", "x", 1]]),
                   txn(2, [["r", "x", None], ["r", "y", None]], [["r", "x", [1]], ["r", "y", [1]]]))


def test_write_skew_is_found_under_serializable_and_allowed_under_snapshot_isolation():
    assert check_list_append(write_skew(), ["serializable"]).valid is False
    assert check_list_append(write_skew(), ["snapshot-isolation"]).valid is True


def test_a_cycle_search_out_of_time_is_unknown_for_a_model_that_allows_some_cycles():
    r = check_list_append(write_skew(), ["snapshot-isolation"], cycle_budget_s=-1)
    assert r.valid == UNKNOWN
    (reason,) = r.unknown_reasons
    assert "ran out of its" in reason and "a cycle exists" in reason and "snapshot-isolation" in reason


def test_a_cycle_search_out_of_time_is_invalid_for_a_model_that_forbids_every_cycle():
    r = check_list_append(write_skew(), ["serializable"], cycle_budget_s=-1)
    assert r.valid is False and "cycle-search-timeout" in r.stats["violated"]
