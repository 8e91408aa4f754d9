"""The coordinators' mutants (clusters/mutants.py, issue 40) are not equivalent: each is applied to a code copy
(clusters/code_copy.py), the mutated module is imported from the copy, and on one input it decides
differently from the shipped module. Only the sans-IO modules (txn_coordinator.py, group_coordinator.py,
producer_state.py) are driven here; the shell's mutants (txn_shell.py) need a broker and are compiled and
imported by tests/unit/test_mutation.py like every other mutant."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from kafkaesque_harness.clusters import mutants
from kafkaesque_harness.clusters.broker import group_coordinator, producer_state, rpc, txn_coordinator
from kafkaesque_harness.clusters.broker.log import build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.batch import build_control_batch
from kafkaesque_harness.clusters.code_copy import CodeCopy

SANS_IO = {mutants.TXN: txn_coordinator, mutants.GROUPS: group_coordinator, mutants.PRODUCERS: producer_state}
TXN_ID, TP1, TP2, TIMEOUT = "txn-a", ("t", 0), ("t", 1), 60_000
PID = 7


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    # A code copy registers itself as a run (clusters/ownership.py): in a private state dir, not the machine's.
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))


@contextmanager
def mutated(name: str) -> Iterator[ModuleType]:
    """The module the mutant edits, imported from a code copy holding the mutant (under a name of its own, so
    the shipped module stays what every other import sees)."""
    mutant = mutants.by_name()[name]
    (file,) = mutant.files
    with CodeCopy(mutant.edits, label=name) as copy:
        module_name = "mutated_" + name.replace("-", "_")
        spec = importlib.util.spec_from_file_location(module_name, copy.package / file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while the class is made
        try:
            spec.loader.exec_module(module)
            yield module
        finally:
            del sys.modules[module_name]


# --- the transaction coordinator ------------------------------------------------------------------------------
def txn_coordinator_of(m: ModuleType) -> Any:
    ids = itertools.count(1000)
    c = m.TransactionCoordinator(lambda: next(ids), m.TxnConfig(txn_partitions=1))
    c.begin_loading(0, 3)
    c.load(0, [])
    return c


def written(c: Any, outcome: tuple[int, Any]) -> Any:
    err, t = outcome
    assert t is not None, err
    return c.written(t)


def initialised(m: ModuleType, times: int = 1) -> tuple[Any, int, int]:
    c = txn_coordinator_of(m)
    for _ in range(times):
        written(c, c.init_producer_id(TXN_ID, TIMEOUT, -1, -1, 0))
    s = c.txns[TXN_ID]
    return c, s.producer_id, s.producer_epoch


def ongoing(m: ModuleType) -> tuple[Any, int, int]:
    c, pid, epoch = initialised(m)
    written(c, c.add_partitions(TXN_ID, pid, epoch, [TP1], 0))
    return c, pid, epoch


def epoch_of_a_second_init(m: ModuleType) -> int:
    return initialised(m, times=2)[2]


def epoch_of_a_timeout_abort(m: ModuleType) -> int:
    c, _, _ = ongoing(m)
    (abort,) = c.expired(TIMEOUT + 1)
    return abort.new.producer_epoch


def answer_to_a_fenced_epoch(m: ModuleType) -> int:
    c, pid, epoch = initialised(m, times=2)
    return c.add_partitions(TXN_ID, pid, epoch - 1, [TP1], 0)[0]


def epoch_loaded_from_two_records(m: ModuleType) -> int:
    c = m.TransactionCoordinator(lambda: 1, m.TxnConfig(txn_partitions=1))
    c.begin_loading(0, 3)
    c.load(0, [m.txn_record(TXN_ID, m.TxnState(PID, epoch, TIMEOUT)) for epoch in (0, 1)])
    return c.txns[TXN_ID].producer_epoch


def jobs_loaded_for_a_prepared_abort(m: ModuleType) -> int:
    c = m.TransactionCoordinator(lambda: 1, m.TxnConfig(txn_partitions=1))
    c.begin_loading(0, 3)
    prepared = m.TxnState(PID, 0, TIMEOUT, m.PREPARE_ABORT, frozenset({TP1}), 0)
    return len(c.load(0, [m.txn_record(TXN_ID, prepared)]))


def answer_to_an_add_while_committing(m: ModuleType) -> int:
    c, pid, epoch = ongoing(m)
    assert written(c, c.end_txn(TXN_ID, pid, epoch, True, 0)) is not None  # the markers' job: decided
    return c.add_partitions(TXN_ID, pid, epoch, [TP2], 0)[0]


def verification_of_a_partition_not_added(m: ModuleType) -> int:
    c, pid, epoch = ongoing(m)
    return c.verify(TXN_ID, pid, epoch, TP2)


# --- the group coordinator --------------------------------------------------------------------------------------
def group_coordinator_of(m: ModuleType) -> Any:
    g = m.GroupCoordinator(m.CoordinatorConfig(offsets_partitions=1, initial_rebalance_delay_ms=0))
    g.begin_loading(0)
    g.load(0, [])
    return g


def joined(m: ModuleType, g: Any, member_id: str = "") -> Any:
    """JoinGroup of one member, answered at once (a group of one, no initial delay)."""
    ((_, result),) = g.join("w", "g", member_id, "consumer", [("range", b"")], 10_000, 10_000, False, 0)
    assert result.error == rpc.NONE, result
    return result


def synced(g: Any, result: Any) -> None:
    ((_, answer),) = g.sync("s", "g", result.generation_id, result.member_id, None, None,
                            {result.member_id: b"a"}, 0)
    assert answer.error == rpc.NONE, answer


def commit_answer_of_the_generation_before(m: ModuleType) -> int:
    g = group_coordinator_of(m)
    first = joined(m, g)
    synced(g, first)
    again = joined(m, g, first.member_id)  # the leader joins again: a new generation
    synced(g, again)
    return g.check_commit("g", first.generation_id, first.member_id, 0)


def commit_answer_after_the_group_emptied(m: ModuleType) -> int:
    g = group_coordinator_of(m)
    first = joined(m, g)
    synced(g, first)
    g.leave("g", [first.member_id], 0)
    assert g.groups["g"].state == m.EMPTY
    return g.check_commit("g", first.generation_id, first.member_id, 0)


def offset_fetched_after_two_commits(m: ModuleType) -> int:
    g = group_coordinator_of(m)
    for record_offset, offset in ((10, 5), (11, 9)):
        g.apply_record(record_offset, *m.offset_record("g", "t", 0, (offset, 0, "")))
    err, committed = g.committed_offsets("g", None)
    assert err == rpc.NONE
    return committed[("t", 0)].offset


def generation_of_the_first_join(m: ModuleType) -> int:
    return joined(m, group_coordinator_of(m)).generation_id


# --- producer state ---------------------------------------------------------------------------------------------
def batch(seq: int, epoch: int = 0, transactional: bool = False) -> tuple[list, bytes]:
    raw = build_batch([b"v"], producer_id=PID, producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    return validate_batches(raw), raw


def lso_with_an_open_transaction(m: ModuleType) -> int:
    t = m.ProducerStateTable()
    t.record(batch(0, transactional=True)[0], 5)
    return t.last_stable_offset(10)


def answer_to_an_older_epoch(m: ModuleType) -> int:
    t = m.ProducerStateTable()
    t.record(batch(0, epoch=1)[0], 0)
    return t.check(batch(1, epoch=0)[0][0])[0]


def answer_to_a_sequence_gap(m: ModuleType) -> int:
    t = m.ProducerStateTable()
    t.record(batch(0)[0], 0)
    return t.check(batch(5)[0][0])[0]


def aborted_index_after_an_abort(m: ModuleType) -> list:
    t = m.ProducerStateTable()
    t.record(batch(0, transactional=True)[0], 0)
    raw = build_control_batch(PID, 0, False, 3, 0)
    t.record(validate_batches(raw), 1, raw)
    return t.aborted_between(0, 10)


DECISIONS: dict[str, Callable[[ModuleType], Any]] = {
    "txn-init-no-epoch-bump": epoch_of_a_second_init,
    "txn-abort-not-fenced": epoch_of_a_timeout_abort,
    "txn-stale-epoch-accepted": answer_to_a_fenced_epoch,
    "txn-load-first-record-wins": epoch_loaded_from_two_records,
    "txn-load-skips-prepared-abort": jobs_loaded_for_a_prepared_abort,
    "txn-add-to-decided": answer_to_an_add_while_committing,
    "txn-verify-any-partition": verification_of_a_partition_not_added,
    "group-commit-stale-generation": commit_answer_of_the_generation_before,
    "group-commit-to-empty-group": commit_answer_after_the_group_emptied,
    "group-oldest-commit-wins": offset_fetched_after_two_commits,
    "group-generation-not-bumped": generation_of_the_first_join,
    "lso-ignores-open-txn": lso_with_an_open_transaction,
    "producer-stale-epoch-accepted": answer_to_an_older_epoch,
    "sequence-gap-accepted": answer_to_a_sequence_gap,
    "abort-index-lists-commits": aborted_index_after_an_abort,
}
# What the shipped module decides on each input (the rule the mutant breaks, kept).
SHIPPED = {
    "txn-init-no-epoch-bump": 1, "txn-abort-not-fenced": 1, "txn-stale-epoch-accepted": rpc.PRODUCER_FENCED,
    "txn-load-first-record-wins": 1, "txn-load-skips-prepared-abort": 1,
    "txn-add-to-decided": rpc.CONCURRENT_TRANSACTIONS, "txn-verify-any-partition": rpc.INVALID_TXN_STATE,
    "group-commit-stale-generation": rpc.ILLEGAL_GENERATION, "group-commit-to-empty-group": rpc.UNKNOWN_MEMBER_ID,
    "group-oldest-commit-wins": 9, "group-generation-not-bumped": 1, "lso-ignores-open-txn": 5,
    "producer-stale-epoch-accepted": rpc.INVALID_PRODUCER_EPOCH, "sequence-gap-accepted": rpc.OUT_OF_ORDER_SEQUENCE_NUMBER,
    "abort-index-lists-commits": [(PID, 0)],
}


def test_every_mutant_of_a_sans_io_coordinator_module_has_a_deciding_input():
    sans_io = {m.name for m in mutants.MUTANTS if set(m.files) <= set(SANS_IO)}
    coordinators = {m.name for m in mutants.MUTANTS
                    if any(f in (mutants.TXN, mutants.TXN_SHELL, mutants.GROUPS) for f in m.files)}
    assert len(coordinators | set(DECISIONS)) >= 12
    assert sans_io == set(DECISIONS) == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(DECISIONS))
def test_the_mutated_module_decides_otherwise_than_the_shipped_one(name):
    decide = DECISIONS[name]
    (file,) = mutants.by_name()[name].files
    assert decide(SANS_IO[file]) == SHIPPED[name]
    with mutated(name) as module:
        assert module.__file__ != SANS_IO[file].__file__
        assert decide(module) != SHIPPED[name]


def test_the_coordinators_mutants_run_under_plans_whose_workload_reaches_their_code():
    from kafkaesque_harness.harness.spec import TestSpec
    from kafkaesque_harness.studies.mutation import COMMON, DEFAULT_PLANS, PLANS, default_plans

    by = mutants.by_name()
    assert default_plans(by["txn-markers-first-partition-only"]) == ("txn", "txn-random")
    assert default_plans(by["lso-ignores-open-txn"]) == ("txn", "txn-random")
    assert default_plans(by["group-oldest-commit-wins"]) == ("groups", "groups-random")
    assert default_plans(by["hwm-leader-leo"]) == DEFAULT_PLANS
    for plan in ("txn", "txn-random", "txn-coord", "groups", "groups-random", "groups-coord"):
        spec = TestSpec.make(name=f"mutant-x-{plan}", time_limit=180, cluster="local", **COMMON, **PLANS[plan])
        assert spec.problems() == [], plan
    assert TestSpec.make(**COMMON, **PLANS["txn"]).workload == "txn"
    # a rebalance while the coordinator stays up: members crash (leave) and fresh ones join, each every ~30 s,
    # four of them (one per partition), so the group settles between rebalances long enough to read and commit
    assert PLANS["groups"]["workload_options"] == {"queue_mode": "subscribe", "crash_clients_interval_s": 30}
    assert TestSpec.make(**COMMON, **PLANS["groups-random"]).concurrency == 4
    assert "stop" in PLANS["txn-random"]["nemesis"]  # a controlled shutdown moves a coordinator
    # named only: the protocol nemesis's coordinator moves alone
    assert TestSpec.make(**COMMON, **PLANS["groups-coord"]).nemesis_options == {"protocol_moves": "coordinator"}
    assert TestSpec.make(**COMMON, **PLANS["txn-coord"]).workload_options == {"txn_abort_p": 0.5}  # aborts as often
    assert "groups-coord" not in default_plans(by["group-commit-to-empty-group"])
