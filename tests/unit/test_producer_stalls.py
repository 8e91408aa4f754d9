"""Producer stalls (the stall-producer fault): the control the txn workload's clients share with the fault
actions (workloads/stalls.py), the client's stall point (workloads/txn.py), the four ledger stages
(nemesis/actions.py stall_producer, resume_producers), the scenario step and the protocol move that use it
(nemesis/scenario.py, nemesis/protocol.py), and what the evidence rules make of a stall that did not happen.
The clients run on a scripted library (test_txn_workload's); the real one is exercised by real runs."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from kafkaesque_harness.checkers.evidence import FaultEvidenceChecker
from kafkaesque_harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op
from kafkaesque_harness.nemesis import actions
from kafkaesque_harness.nemesis.actions import STALL_FAULT, FaultActions
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.nemesis.protocol import MOVES, SEQUENCE_PREFIX, ProtocolNemesis
from kafkaesque_harness.nemesis.registry import make_nemesis
from kafkaesque_harness.nemesis.requirements import can
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis
from kafkaesque_harness.nemesis.scenario_steps import Scenario, act, bind, load_scenario_file, stall_producer
from kafkaesque_harness.nemesis.scenarios import SCENARIOS
from kafkaesque_harness.nemesis.targets import coordinator_node
from kafkaesque_harness.workloads.base import StallableProducers
from kafkaesque_harness.workloads.queue import QueueWorkload
from kafkaesque_harness.workloads.stalls import (
    ABORTED,
    COMMITTED,
    FENCED,
    UNKNOWN,
    ProducerStallControl,
    outcome_of,
)
from kafkaesque_harness.workloads.txn import TxnWorkload, txn_options
from kafkaesque_harness.workloads.txn_client import CommitNotSent, OffsetTracker, TxnClient, transactional_id
from tests.unit.test_coordinator_moves import TXN_IDS, CoordinatorCluster
from tests.unit.test_scenario import FakeCluster, run
from tests.unit.test_txn_workload import LibraryError, ScriptedLibrary

TWO_SENDS = [["send", 0, 1], ["poll"], ["send", 1, 2]]
TIMEOUT_S = 0.05  # the producers' transaction timeout in these tests


def txn_client(lib: ScriptedLibrary, stalls: ProducerStallControl, concurrency: int = 5) -> TxnClient:
    def make(bootstrap, topic, partitions, txn_id, o, on_rebalance, process=None):
        lib.on_rebalance, lib.txn_id = on_rebalance, txn_id
        return lib
    c = TxnClient(make, "t", 4, concurrency, txn_options({}), OffsetTracker(), stalls)
    c.open("b:1")
    return c


def txn(value, process=7) -> Op:
    return Op(INVOKE, "txn", process, value)


class Clients:
    """Client processes issuing transactions of two sends until stopped, each on its own scripted library
    (what the runner's workers do with the real ones)."""

    def __init__(self, stalls: ProducerStallControl, processes=(7,), concurrency: int = 5, value=TWO_SENDS,
                 fail_at=None):
        self.completions: list[Op] = []
        self.libs: dict[int, ScriptedLibrary] = {}
        self._stop = threading.Event()
        self._threads = []
        for p in processes:
            lib = self.libs[p] = ScriptedLibrary(fail_at=dict(fail_at or {}))
            client = txn_client(lib, stalls, concurrency)
            self._threads.append(threading.Thread(target=self._loop, args=(client, p, value), daemon=True))

    def _loop(self, client: TxnClient, process: int, value) -> None:
        while not self._stop.is_set():
            self.completions.append(client.invoke(txn(value, process)))
            time.sleep(0.002)

    def __enter__(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def stalled(self) -> list[Op]:
        return [c for c in self.completions if (c.extra or {}).get("stalled")]


# --- the control ------------------------------------------------------------------------------------------
def test_a_stall_is_taken_by_a_matching_client_which_enters_resumes_and_finishes_in_order():
    control = ProducerStallControl(TIMEOUT_S)
    stall = control.request(0.05, transactional_ids=["kafkaesque-txn-2"])
    assert not control.wanted(7, "kafkaesque-txn-1") and control.claim(7, "kafkaesque-txn-1") is None
    assert control.wanted(7, "kafkaesque-txn-2")
    assert control.claim(7, "kafkaesque-txn-2") is stall and not control.wanted(7, "kafkaesque-txn-2")
    assert not stall.entered.is_set()
    stood = stall.hold({"process": 7})
    assert stall.entered.is_set() and stall.resumed.is_set() and not stall.finished.is_set()
    assert stood >= 0.05 and stall.stalled_s == stood and stall.evidence == {"process": 7}
    stall.finish(outcome_of(OK, None))
    assert stall.finished.is_set() and stall.outcome == {"result": COMMITTED, "op": OK}


def test_a_withdrawn_request_is_taken_by_no_client_and_a_taken_one_cannot_be_withdrawn():
    control = ProducerStallControl(TIMEOUT_S)
    first, second = control.request(1.0, process=3), control.request(1.0)
    assert control.withdraw(first) and control.claim(3, "x") is second  # the withdrawn one is gone
    assert not control.withdraw(second)  # a client holds it: the fault is applied, not withdrawn


def test_release_all_ends_a_held_stall_early_and_drops_the_open_requests():
    control = ProducerStallControl(TIMEOUT_S)
    held = control.claim(1, "x") or control.request(30.0)
    assert control.claim(1, "x") is held
    waiting = control.request(30.0)
    t = threading.Thread(target=held.hold, args=({},))
    t.start()
    assert held.entered.wait(2)
    assert control.release_all() == [held]
    t.join(2)
    assert held.resumed.is_set() and held.stalled_s < 30
    assert not control.wanted(1, "x") and not control.withdraw(waiting)


@pytest.mark.parametrize(("type_", "error", "result"), [
    (OK, None, COMMITTED),
    (INFO, "KafkaException: KafkaError{code=PRODUCER_FENCED,val=90}", FENCED),
    (INFO, 'KafkaException: KafkaError{FATAL,code=_FENCED,val=-144,str="Failed to add partitions to transaction: '
           'Local: This instance has been fenced by a newer instance"}', FENCED),
    (INFO, "ProducerFencedError: [Error 90] ProducerFencedError", FENCED),
    (FAIL, "KafkaException: INVALID_PRODUCER_EPOCH; aborted", FENCED),
    (FAIL, "KafkaException: INVALID_TXN_STATE; aborted", ABORTED),
    (INFO, "TimeoutError: commit_transaction did not return in 5 s", UNKNOWN),
])
def test_the_outcome_of_a_stalled_transaction_is_read_from_its_completion(type_, error, result):
    assert outcome_of(type_, error)["result"] == result


def test_the_txn_workload_has_stallable_producers_and_the_queue_has_none():
    txn_workload = TxnWorkload({"txn_timeout_ms": 4000})
    assert can(txn_workload, StallableProducers) and not can(QueueWorkload({}), StallableProducers)
    assert txn_workload.producer_stalls().txn_timeout_s == 4.0
    assert txn_workload.new_client({"concurrency": 2}).stalls is txn_workload.producer_stalls()


# --- the client's stall point ---------------------------------------------------------------------------
def test_a_client_stalls_before_a_later_send_with_the_first_delivered_then_sends_more_and_commits():
    control = ProducerStallControl(TIMEOUT_S)
    stall = control.request(0.05)
    lib = ScriptedLibrary()
    comp = txn_client(lib, control).invoke(txn(TWO_SENDS))
    assert comp.type == OK and comp.value[2] == ["send", 1, [11, 2]]
    # at the second send: flushed (the first send delivered), stalled, then the rest of the same transaction
    assert lib.calls == ["init", "begin", "send", "poll", "flush", "send", "send_offsets", "flush", "commit"]
    assert stall.evidence == {"process": 7, "transactional_id": "kafkaesque-txn-2", "partitions": [0],
                              "delivered_offsets": [10], "txn_timeout_s": TIMEOUT_S}
    assert comp.extra == {"stalled": {"fault": None, "seconds": stall.stalled_s}}
    assert stall.outcome == {"result": COMMITTED, "op": OK}


def test_the_stall_point_is_a_send_to_a_partition_the_transaction_has_not_written():
    control = ProducerStallControl(TIMEOUT_S)
    control.request(0.05)
    same_key = [["send", 1, 1], ["poll"], ["send", 1, 2]]
    comp = txn_client(ScriptedLibrary(), control).invoke(txn(same_key))
    assert comp.type == OK and comp.extra is None and control.wanted(7, "kafkaesque-txn-2")
    comp = txn_client(ScriptedLibrary(), control).invoke(txn([*same_key, ["send", 3, 3]]))
    assert comp.extra["stalled"] and not control.wanted(7, "kafkaesque-txn-2")


def test_a_transaction_with_a_single_send_has_no_stall_point():
    control = ProducerStallControl(TIMEOUT_S)
    control.request(0.05)
    lib = ScriptedLibrary()
    comp = txn_client(lib, control).invoke(txn([["send", 0, 1], ["poll"]]))
    assert comp.type == OK and comp.extra is None and control.wanted(7, "kafkaesque-txn-2")
    assert lib.calls.count("flush") == 1  # only the commit's: nobody asked this op to stop


def test_a_transaction_the_workload_means_to_abort_has_no_stall_point():
    control = ProducerStallControl(TIMEOUT_S)
    control.request(0.05)
    comp = txn_client(ScriptedLibrary(), control).invoke(Op(INVOKE, "txn", 7, TWO_SENDS, extra={"abort": True}))
    assert comp.type == FAIL and comp.extra is None and control.wanted(7, "kafkaesque-txn-2")


def test_a_client_only_stops_for_a_stall_asked_of_it():
    control = ProducerStallControl(TIMEOUT_S)
    control.request(0.05, process=8)
    comp = txn_client(ScriptedLibrary(), control).invoke(txn(TWO_SENDS))
    assert comp.extra is None and control.wanted(8, "kafkaesque-txn-3")


def test_a_producer_fenced_after_its_stall_ends_info_and_the_stall_says_fenced():
    control = ProducerStallControl(TIMEOUT_S)
    stall = control.request(0.05)
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("KafkaError{code=PRODUCER_FENCED}", fatal=True)})
    comp = txn_client(lib, control).invoke(txn(TWO_SENDS))
    # workloads/txn.py's rule: a fatal error after sends leaves the outcome open (a fenced commit may have
    # been a retry of one the coordinator had completed)
    assert comp.type == INFO and "discard" in lib.calls
    assert stall.outcome["result"] == FENCED and stall.outcome["op"] == INFO


def test_a_producer_fenced_before_its_commit_was_called_ends_fail_no_commit_having_been_sent():
    control = ProducerStallControl(TIMEOUT_S)
    stall = control.request(0.05)
    lib = ScriptedLibrary(fail_at={"commit": CommitNotSent("the producer failed before the commit, so none was "
                                                           "sent: _FENCED: This instance has been fenced")})
    comp = txn_client(lib, control).invoke(txn(TWO_SENDS))
    assert comp.type == FAIL and "discard" in lib.calls and "abort" not in lib.calls
    assert stall.outcome["result"] == FENCED and stall.outcome["op"] == FAIL


# --- the ledger's four stages ---------------------------------------------------------------------------
def stall_actions(control: ProducerStallControl | None = None) -> FaultActions:
    return FaultActions(FakeCluster(), FaultLedger(), "queue", control)


def test_a_stall_is_requested_applied_observed_past_the_timeout_and_healed_with_what_followed():
    control = ProducerStallControl(TIMEOUT_S)
    faults = stall_actions(control)
    with Clients(control) as clients:
        rec = faults.stall_producer(0.2, "t")
        assert rec.detail == {"process": "any", "seconds": 0.2, "txn_timeout_s": TIMEOUT_S}
        assert rec.applied is True and rec.observed is None and rec.active
        assert rec.evidence["transactional_id"] == "kafkaesque-txn-2" and rec.evidence["partitions"] == [0]
        assert faults.resume_producers(by="t") == [rec]
    assert rec.observed is True and rec.evidence["stalled_s"] >= 0.2 > TIMEOUT_S
    assert rec.healed is True and rec.heal_evidence["outcome"] == {"result": COMMITTED, "op": OK}
    assert not faults.ledger.active()
    (comp,) = clients.stalled()  # the history shows which op stood still, under the fault's id
    assert comp.extra["stalled"]["fault"] == rec.id


def test_a_stall_no_process_takes_is_not_applied_with_the_reason_and_cannot_happen_later(monkeypatch):
    monkeypatch.setattr(actions, "STALL_ENTRY_S", 0.1)
    control = ProducerStallControl(TIMEOUT_S)
    faults = stall_actions(control)
    # the only client runs transactions with one send: never inside a transaction with more to send
    with Clients(control, value=[["send", 0, 1]]) as clients:
        rec = faults.stall_producer(0.2, "t")
        time.sleep(0.05)
    assert rec.applied is False and "no process held an open transaction" in rec.apply_error
    assert not rec.active and not clients.stalled() and not control.wanted(7, "kafkaesque-txn-2")
    assert faults.resume_producers() == []


def test_a_stall_ended_before_the_transaction_timeout_is_not_observed():
    control = ProducerStallControl(txn_timeout_s=10.0)
    faults = stall_actions(control)
    with Clients(control):
        rec = faults.stall_producer(30.0, "t")
        errors = faults.heal()  # the final heal ends it at once
    assert errors == [] and rec.healed is True and rec.observed is False
    assert "not past the transaction timeout of 10 s" in rec.observe_error


def test_a_workload_without_producer_stalls_refuses_the_fault():
    faults = stall_actions(None)
    assert faults.producer_stalls_unavailable() == "the workload's clients hold no transactional producer"
    with pytest.raises(RuntimeError, match="no producer stalls"):
        faults.stall_producer(1.0, "t")
    assert faults.heal() == []


# --- the scenario ---------------------------------------------------------------------------------------
def quick(steps):
    """The steps with the stall 0.1 s past the timeout (the shipped 3 s would only slow the test)."""
    return tuple(dataclasses.replace(s, seconds=0.1) if s.do == "stall-producer" else s for s in steps)


def test_the_producer_pause_scenario_binds_the_coordinator_and_stalls_a_producer_it_coordinates(monkeypatch):
    shipped = SCENARIOS["producer-paused-past-txn-timeout"]
    assert shipped.steps == (bind("C", "txn-coordinator"), stall_producer("C", 3.0), act("resume-producer"),
                             shipped.steps[-1])
    assert shipped.targets == ("txn-markers-no-epoch-bump",) and not shipped.needs_isolated_nodes
    c = CoordinatorCluster()
    control = ProducerStallControl(TIMEOUT_S)
    n = ScenarioNemesis(dataclasses.replace(shipped, steps=quick(shipped.steps)),
                        {"scenario_delay": 0, "seed": 1, "transactional_ids": TXN_IDS})
    n.setup(c, FaultActions(c, FaultLedger(), "queue", control))
    with Clients(control, processes=range(6), concurrency=6) as clients:
        ops = run(n, c)
    assert [f for f, _, _ in ops] == ["scenario-bind", "scenario-stall-producer", "scenario-resume-producer"]
    coordinator = ops[0][2]["C"]
    stalled = ops[1][2]["stalled"]
    assert coordinator_node(c, "__transaction_state", stalled["transactional_id"]) == coordinator
    assert stalled["transactional_id"] == transactional_id(stalled["process"])
    [rec] = n.faults.ledger.records()
    assert (rec.fault, rec.by, rec.applied, rec.observed, rec.healed) == (
        STALL_FAULT, "scenario:producer-paused-past-txn-timeout", True, True, True)
    assert rec.detail["coordinator"] == coordinator and rec.detail["seconds"] == pytest.approx(TIMEOUT_S + 0.1)
    assert set(rec.detail["transactional_ids"]) == {k for k in TXN_IDS
                                                     if coordinator_node(c, "__transaction_state", k) == coordinator}
    assert ops[2][2] == {"resumed": [{"fault": rec.id, "stalled_s": rec.evidence["stalled_s"],
                                      "outcome": {"result": COMMITTED, "op": OK}}]}
    assert len(clients.stalled()) == 1


def scenario_history(ops, ledger: FaultLedger) -> list[Op]:
    """The history the runner writes for these steps: each completion with the ledger's changes, then the heal."""
    history = []
    for f, value, result in ops:
        history.append(Op(INVOKE, f, NEMESIS, value))
        out = dict(result) if isinstance(result, dict) else {}
        history.append(Op(INFO, f, NEMESIS, {**out, "faults": ledger.changes()},
                          error=result if isinstance(result, str) else None))
    return history + [Op(INVOKE, "heal", NEMESIS, None), Op(INFO, "heal", NEMESIS, {"errors": [], "faults": []})]


def test_a_scenario_whose_stall_no_process_took_stops_there_and_is_unknown(monkeypatch):
    monkeypatch.setattr(actions, "STALL_ENTRY_S", 0.1)
    c = CoordinatorCluster()
    control = ProducerStallControl(TIMEOUT_S)
    name = "producer-paused-past-txn-timeout"
    n = ScenarioNemesis(dataclasses.replace(SCENARIOS[name], steps=quick(SCENARIOS[name].steps)),
                        {"scenario_delay": 0, "seed": 1, "transactional_ids": TXN_IDS})
    n.setup(c, FaultActions(c, FaultLedger(), "queue", control))
    ops = run(n, c)  # no client runs a transaction
    assert [f for f, _, _ in ops] == ["scenario-bind", "scenario-stall-producer"]
    assert "held an open transaction with a delivered send" in ops[-1][2]
    [rec] = n.faults.ledger.records()
    assert rec.applied is False
    r = FaultEvidenceChecker().check({"nemesis": [f"scenario:{name}"]}, scenario_history(ops, n.faults.ledger))
    assert r.valid == "unknown"
    assert any(f"scenario {name} stopped at step 2 (stall-producer C" in x for x in r.unknown_reasons)
    assert any(f"fault #{rec.id} of scenario {name} (stall-producer) failed: no process" in x
               for x in r.unknown_reasons)


def test_a_stall_scenario_is_refused_by_name_for_a_workload_without_a_transactional_producer():
    steps = (stall_producer(), act("resume-producer"))
    n = ScenarioNemesis(Scenario("stall-only", "test", steps), {"scenario_delay": 0, "seed": 1})
    assert n.ability_refusal(FakeCluster()) == (
        "stall-only stalls a transactional producer of the workload, and this workload has none; run it with "
        "--workload txn")
    with_ids = ScenarioNemesis(Scenario("stall-only", "test", steps), {"transactional_ids": TXN_IDS})
    c = FakeCluster()
    with pytest.raises(NemesisRefused, match="stalls a transactional producer of the workload, and the "
                                             "workload's clients hold no transactional producer; run it with"):
        with_ids.setup(c, FaultActions(c, FaultLedger()))


def test_a_scenario_file_may_stall_a_producer(tmp_path):
    f = tmp_path / "stall.toml"
    f.write_text('name = "stall"\nsteps = [\n  {do = "bind", node = "C", role = "txn-coordinator"},\n'
                 '  {do = "stall-producer", node = "C"},\n  {do = "resume-producer"},\n]\n')
    s = load_scenario_file(f)
    assert s.steps[1:] == (stall_producer("C"), act("resume-producer")) and not s.needs_isolated_nodes


# --- the protocol nemesis ---------------------------------------------------------------------------------
def test_the_protocol_nemesis_draws_the_stall_only_where_producers_can_stall():
    move = "stall-producer-past-txn-timeout"
    sequence = SEQUENCE_PREFIX + "producer-paused-past-txn-timeout"
    c = CoordinatorCluster()
    plain = ProtocolNemesis({"seed": 1, "topic": "queue"})
    plain.setup(c, FaultActions(c, FaultLedger()))
    assert move not in plain.moves and sequence not in plain.moves
    no_control = ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS})
    no_control.setup(c, FaultActions(c, FaultLedger()))
    assert move not in no_control.moves and sequence not in no_control.moves
    assert "kill-txn-coordinator" in no_control.moves
    txn_nemesis = ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS})
    txn_nemesis.setup(c, FaultActions(c, FaultLedger(), "queue", ProducerStallControl(TIMEOUT_S)))
    assert {move, sequence} <= set(txn_nemesis.moves) and MOVES[move][0].do == "stall-producer"


def test_the_stall_move_stalls_a_process_and_waits_for_what_its_transaction_came_to(monkeypatch):
    from tests.unit.test_protocol_nemesis import drive_moves

    c = CoordinatorCluster()
    control = ProducerStallControl(TIMEOUT_S)
    n = ProtocolNemesis({"seed": 1, "topic": "queue", "transactional_ids": TXN_IDS})
    n.setup(c, FaultActions(c, FaultLedger(), "queue", control))
    n.moves = {"stall-producer-past-txn-timeout": quick(MOVES["stall-producer-past-txn-timeout"])}
    with Clients(control):
        ops = drive_moves(n, c, 1)
    assert [f for f, _, _ in ops] == ["scenario-stall-producer", "scenario-resume-producer"]
    assert ops[0][1]["move"] == "stall-producer-past-txn-timeout"
    [rec] = n.faults.ledger.records()
    assert rec.by == "protocol" and rec.applied and rec.observed and rec.healed


# --- the fault on the random schedule (--nemesis stall-producer) ----------------------------------------
def test_stall_producer_on_the_schedule_stalls_at_the_start_and_records_the_outcome_at_the_stop():
    control = ProducerStallControl(TIMEOUT_S)
    c = FakeCluster()
    (n,) = make_nemesis(["stall-producer"], {"stall_past_timeout_s": 0.1}).parts
    n.setup(c, FaultActions(c, FaultLedger(), "queue", control))
    with Clients(control):
        start = n.invoke(c, Op(INVOKE, "start-stall-producer", NEMESIS, None))
        stop = n.invoke(c, Op(INVOKE, "stop-stall-producer", NEMESIS, None))
    assert start.value["seconds"] == pytest.approx(TIMEOUT_S + 0.1) and start.value["stalled"]["process"] == 7
    [rec] = n.faults.ledger.records()
    assert (rec.by, rec.applied, rec.observed, rec.healed) == ("stall-producer", True, True, True)
    assert stop.value == {"resumed": [{"fault": rec.id, "stalled_s": rec.evidence["stalled_s"],
                                       "outcome": {"result": COMMITTED, "op": OK}}]}


def test_stall_producer_is_refused_by_name_for_a_workload_without_transactional_producers():
    c = FakeCluster()
    (n,) = make_nemesis(["stall-producer"], {}).parts
    with pytest.raises(NemesisRefused, match="^the stall-producer fault stalls a transactional producer of the "
                                             "workload, and the workload's clients hold no transactional producer; "
                                             "run it with --workload txn, or drop stall-producer from --nemesis$"):
        n.setup(c, FaultActions(c, FaultLedger()))
