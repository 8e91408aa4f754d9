"""The txn workload's op mix and outcome rules (workloads/txn.py), with a scripted stand-in for the client
library only (TxnLibrary): the rules around it are what is tested here; tests/integration/test_txn_workload.py
runs the real libraries against the reference broker."""

from __future__ import annotations

import random

import pytest

from kafkaesque_harness.history import FAIL, INFO, INVOKE, OK, Op
from kafkaesque_harness.workloads.base import ClientEventLog
from kafkaesque_harness.workloads.registry import parse_workload_options, workload_options_problems
from kafkaesque_harness.workloads.txn import TxnOpMix, TxnWorkload, txn_options
from kafkaesque_harness.workloads.txn_client import (
    CRASHED_ON_REBALANCE,
    WORKLOAD_ABORT,
    CommitNotSent,
    OffsetTracker,
    TxnClient,
    TxnLibrary,
)
from tests.unit.test_queue_client import FakeGroupMember


class LibraryError(Exception):
    def __init__(self, msg: str, fatal: bool = False, retriable: bool = False):
        super().__init__(msg)
        self.fatal, self.retriable = fatal, retriable


class ScriptedLibrary(TxnLibrary):
    """Answers as told: `fail_at` names the call that raises (and how), `offsets` what deliveries report."""

    def __init__(self, fail_at: dict[str, LibraryError] | None = None, records=None, rebalance_on_poll=False):
        self.fail_at = fail_at or {}
        self.calls: list[str] = []
        self.next_offset = 10
        self.records = records or {}
        self.rebalance_on_poll = rebalance_on_poll
        self.on_rebalance = None
        self.subscribed = False

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail_at:
            raise self.fail_at.pop(name)

    def ensure_producer(self):
        if self.producer is None:
            self._call("init")
            self.producer = "initialised"

    def begin(self): self._call("begin")

    def send(self, key, value):
        self._call("send")
        off, self.next_offset = self.next_offset, self.next_offset + 1
        return lambda: off

    def flush(self): self._call("flush")
    def commit(self): self._call("commit")
    def abort(self): self._call("abort")

    def send_offsets(self):
        self._call("send_offsets")
        return self.subscribed

    def poll(self):
        self._call("poll")
        if self.rebalance_on_poll:
            self.on_rebalance("revoked", [0, 1])
        return self.records

    def assign(self, keys, seek): self._call(f"assign {keys} {seek}")
    def subscribe(self):
        self._call("subscribe")
        self.subscribed = True

    def final_read(self, key, timeout_s):
        self._call("final_read")
        return 3, [[0, 1], [2, 5]]
    def is_fatal(self, e): return getattr(e, "fatal", False)
    def commit_retriable(self, e): return getattr(e, "retriable", False)
    def discard_producer(self):
        self.calls.append("discard")
        self.producer = None
    def crash(self): self.calls.append("crash")
    def close(self): self.calls.append("close")


def client_with(lib: ScriptedLibrary, **options) -> TxnClient:
    def make(bootstrap, topic, partitions, txn_id, o, on_rebalance, process=None):
        lib.on_rebalance, lib.txn_id = on_rebalance, txn_id
        return lib
    c = TxnClient(make, "t", 4, 5, txn_options(options), OffsetTracker())
    c.open("b:1")
    return c


def txn(value, process=7, **extra) -> Op:
    return Op(INVOKE, "txn", process, value, extra=extra or None)


SEND_POLL = [["send", 1, 100], ["poll"], ["send", 2, 101]]


def test_commit_returned_is_ok_with_offsets_and_polls():
    lib = ScriptedLibrary(records={"3": [[0, 9]]})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == OK
    assert comp.value == [["send", 1, [10, 100]], ["poll", {"3": [[0, 9]]}], ["send", 2, [11, 101]]]
    assert lib.calls[-2:] == ["flush", "commit"]


def test_transactional_id_is_per_worker_slot_so_a_new_process_reinits_it():
    lib = ScriptedLibrary()
    client_with(lib).invoke(txn([["poll"]], process=12))
    assert lib.txn_id == "kafkaesque-txn-2"  # concurrency 5: process 12 is worker 2's third process


def test_workload_abort_is_fail_with_the_delivered_offsets():
    lib = ScriptedLibrary()
    comp = client_with(lib).invoke(txn(SEND_POLL, abort=True))
    assert comp.type == FAIL and comp.error == WORKLOAD_ABORT
    assert comp.value[0] == ["send", 1, [10, 100]]
    assert "commit" not in lib.calls and lib.calls[-1] == "abort"


class FailingTwice(ScriptedLibrary):
    def commit(self):
        self.calls.append("commit")
        if self.calls.count("commit") <= 2:
            raise LibraryError("timed out", retriable=True)


def test_a_retriable_commit_failure_is_retried_once_and_ok_when_the_retry_returns():
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("timed out", retriable=True)})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == OK and lib.calls.count("commit") == 2


def test_a_commit_that_fails_retriably_twice_is_not_retried_again():
    lib = FailingTwice(fail_at={"abort": LibraryError("bad state")})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == INFO and lib.calls.count("commit") == 2


def test_commit_error_then_abort_succeeding_is_fail():
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("abortable")})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == FAIL and "aborted" in comp.error


def test_commit_error_then_abort_failing_is_info():
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("timed out"), "abort": LibraryError("bad state")})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == INFO and "abort failed" in comp.error
    assert "discard" in lib.calls


def test_fatal_error_after_a_send_is_info_and_drops_the_producer():
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("fenced", fatal=True)})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == INFO and "abort" not in lib.calls and "discard" in lib.calls


def test_fatal_error_before_anything_was_sent_is_fail():
    lib = ScriptedLibrary(fail_at={"begin": LibraryError("fenced", fatal=True)})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == FAIL and lib.calls == ["init", "begin", "discard"]


def test_a_producer_that_never_came_up_is_fail_with_its_own_error_and_no_abort():
    """init_transactions failed (a coordinator not yet elected): there is no transaction to abort, and the
    error is the init's, not an abort's on a producer that does not exist; the next op inits again."""
    lib = ScriptedLibrary(fail_at={"init": LibraryError("init_transactions timed out")})
    c = client_with(lib)
    comp = c.invoke(txn(SEND_POLL))
    assert comp.type == FAIL and lib.calls == ["init"] and "init_transactions timed out" in comp.error
    assert c.invoke(txn(SEND_POLL)).type == OK and lib.calls[1] == "init"


def test_error_before_any_send_is_fail_even_when_the_abort_fails():
    lib = ScriptedLibrary(fail_at={"poll": LibraryError("poll broke"), "abort": LibraryError("no")})
    comp = client_with(lib).invoke(txn([["poll"], ["send", 1, 5]]))
    assert comp.type == FAIL


def test_an_error_after_sends_but_before_the_commit_was_called_is_fail_even_when_the_abort_fails():
    # only the producer's commit commits a transaction: one it never asked for is aborted, now or later
    lib = ScriptedLibrary(fail_at={"flush": LibraryError("2 record(s) undelivered"), "abort": LibraryError("no")})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == FAIL and "abort failed" in comp.error and "commit" not in lib.calls


def test_a_fatal_error_after_sends_but_before_the_commit_was_called_is_fail():
    lib = ScriptedLibrary(fail_at={"send_offsets": LibraryError("fenced", fatal=True)})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == FAIL and "commit" not in lib.calls and "discard" in lib.calls


def test_a_commit_the_library_knows_it_never_sent_is_fail():
    lib = ScriptedLibrary(fail_at={"commit": CommitNotSent("the producer failed before the commit")})
    comp = client_with(lib).invoke(txn(SEND_POLL))
    assert comp.type == FAIL and "abort" not in lib.calls and "discard" in lib.calls


def test_offsets_sent_to_a_subscribed_transaction_make_a_later_error_info():
    lib = ScriptedLibrary(fail_at={"commit": LibraryError("timeout"), "abort": LibraryError("no")})
    c = client_with(lib)
    c.invoke(Op(INVOKE, "subscribe", 7, [0, 1, 2, 3]))
    comp = c.invoke(txn([["poll"]]))
    assert comp.type == INFO  # the group's offsets went into the transaction: it may have committed


def test_rebalances_are_journaled_on_the_next_completion():
    lib = ScriptedLibrary(rebalance_on_poll=True)
    c = client_with(lib)
    comp = c.invoke(txn([["poll"]]))
    assert comp.type == OK and comp.extra["rebalance_log"] == [{"keys": [0, 1], "type": "revoked"}]
    lib.rebalance_on_poll = False
    assert c.invoke(txn([["poll"]])).extra is None  # journaled once


def test_crash_on_rebalance_is_info_and_crashes_the_client():
    lib = ScriptedLibrary(rebalance_on_poll=True)
    comp = client_with(lib, crash_on_rebalance=True).invoke(txn([["send", 0, 1], ["poll"], ["send", 1, 2]]))
    assert comp.type == INFO and comp.error == CRASHED_ON_REBALANCE
    assert "crash" in lib.calls and "commit" not in lib.calls and "abort" not in lib.calls
    assert comp.extra["rebalance_log"]


def test_crash_op_drops_the_client_without_closing_it():
    lib = ScriptedLibrary()
    c = client_with(lib)
    c.invoke(txn([["poll"]]))
    comp = c.invoke(Op(INVOKE, "crash", 7, None))
    assert comp.type == INFO and lib.calls[-1] == "crash" and "close" not in lib.calls
    c.close()
    assert "close" not in lib.calls  # the runner's close after an info finds nothing left to shut


def test_assign_seeks_to_the_unseen_offsets():
    lib = ScriptedLibrary()
    comp = client_with(lib).invoke(Op(INVOKE, "assign", 7, [1, 3], extra={"unseen": {"1": 4, "3": 0}}))
    assert comp.type == OK and lib.calls[-1] == "assign [1, 3] {1: 4, 3: 0}"


def test_only_a_committed_transactions_polls_count_as_seen_for_poll_unseen():
    # A run's op #3480 polled key 3 offsets 1041-1050 and failed (its offsets commit was refused, then
    # aborted); counting that poll made the next poll-unseen assign seek key 3 to 1051, so no committed
    # read ever returned those committed sends (lost-write and unseen once a power cut took the log).
    # Jepsen's poll-unseen updates on :ok completions only.
    tracker = OffsetTracker()
    tracker.sent(3, 1060)
    lib = ScriptedLibrary(records={"3": [[1041, 2113], [1050, 2122]]}, fail_at={"commit": LibraryError("x")})
    c = TxnClient(lambda *a, **kw: lib, "t", 4, 5, txn_options({}), tracker)
    c.open("b:1")
    assert c.invoke(txn([["poll"]], abort=True)).type == FAIL
    assert c.invoke(txn([["poll"]])).type == FAIL  # the commit raised, the abort went through
    assert tracker.unseen() == {3: 0}
    assert c.invoke(txn([["poll"]])).type == OK
    assert tracker.unseen() == {3: 1051}


def test_final_poll_completion_carries_final_and_end_offset():
    comp = client_with(ScriptedLibrary()).invoke(Op(INVOKE, "poll", 40, [["poll"]], extra={"final": True, "key": 2}))
    assert comp.type == OK and comp.value == [["poll", {"2": [[0, 1], [2, 5]]}]]
    assert comp.extra == {"final": True, "key": 2, "end_offset": 3}
    assert TxnWorkload.values.drained(comp) == (2, 3)


def test_op_mix_makes_transactions_of_one_to_four_micro_ops_with_unique_values():
    mix = TxnOpMix(txn_options({"reassign_p": 0, "txn_abort_p": 0.5}), 4, 5, OffsetTracker())
    rng = random.Random(1)
    ops = [mix(rng, 0) for _ in range(400)]
    assert all(op[0] == "txn" and 1 <= len(op[1]) <= 4 for op in ops)
    values = [m[2] for op in ops for m in op[1] if m[0] == "send"]
    assert len(values) == len(set(values)) > 100
    aborted = sum(1 for op in ops if len(op) == 3 and op[2] == {"abort": True})
    assert 150 < aborted < 250


def test_op_mix_without_aborts_never_asks_for_one():
    mix = TxnOpMix(txn_options({"txn_abort_p": 0}), 4, 5, OffsetTracker())
    rng = random.Random(2)
    assert not any(len(op) == 3 and op[0] == "txn" for op in (mix(rng, 0) for _ in range(300)))


def test_op_mix_interleaves_subscribe_and_assign():
    mix = TxnOpMix(txn_options({"reassign_p": 1, "subscribe_p": 0.5}), 4, 5, OffsetTracker())
    rng = random.Random(3)
    fs = [mix(rng, 0)[0] for _ in range(200)]
    assert 60 < fs.count("subscribe") < 140 and fs.count("assign") == 200 - fs.count("subscribe")


def test_poll_unseen_assigns_seek_past_what_was_polled():
    tracker = OffsetTracker()
    tracker.sent(1, 9)
    tracker.sent(2, 4)
    tracker.polled({"1": [[3, 7], [5, 8]], "2": [[4, 2]]})
    assert tracker.unseen() == {1: 6}
    mix = TxnOpMix(txn_options({"reassign_p": 1, "subscribe_p": 0}), 4, 5, tracker)
    rng = random.Random(4)
    unseen = [op for op in (mix(rng, 0) for _ in range(100)) if len(op) == 3]
    assert unseen and all(op == ("assign", [1], {"unseen": {"1": 6}}) for op in unseen)


def test_crash_ops_come_at_about_the_interval_over_the_concurrency():
    now = [0.0]
    mix = TxnOpMix(txn_options({"crash_clients_interval_s": 10, "reassign_p": 0}), 4, 5, OffsetTracker(),
                   clock=lambda: now[0])
    rng = random.Random(5)
    crashes = 0
    for _ in range(10_000):  # 100 s asked every 10 ms
        now[0] += 0.01
        crashes += mix(rng, 0)[0] == "crash"
    assert 35 < crashes < 65  # each of 5 processes about once per 10 s


def test_no_crash_ops_without_an_interval():
    mix = TxnOpMix(txn_options({}), 4, 5, OffsetTracker(), clock=lambda: 1e9)
    rng = random.Random(6)
    assert all(mix(rng, 0)[0] != "crash" for _ in range(500))


@pytest.mark.parametrize("options, says", [
    ({"txn_abort_p": 1.5}, "not a probability"),
    ({"isolation": "serializable"}, "valid: read_committed, read_uncommitted"),
    ({"max_txn_len": 9}, "not 1 to 4"),
    ({"crash_clients_interval_s": -1}, "give 0"),
    ({"bogus": 1}, "has no option 'bogus'"),
])
def test_bad_options_are_refused_in_one_sentence(options, says):
    problems = workload_options_problems("txn", "confluent-kafka", options)
    assert len(problems) == 1 and says in problems[0] and problems[0].endswith(".")


def test_workload_options_read_as_json_else_text():
    options, problems = parse_workload_options(["txn_abort_p=0.2", "poll_unseen=false", "group=g1", "nokey"])
    assert options == {"txn_abort_p": 0.2, "poll_unseen": False, "group": "g1"}
    assert len(problems) == 1 and "'nokey'" in problems[0]


def test_final_ops_are_final_polls_of_every_key():
    w = TxnWorkload({"partitions": 3})
    assert w.final_ops({}) == [("poll", [["poll"]], {"final": True, "key": k}) for k in range(3)]


def test_the_txn_workload_judges_the_nodes_protocol_trace_too():
    # The coordinators' and partition leaders' transaction facts (checkers/trace.py); not applicable on a
    # cluster that writes no trace.
    checkers = TxnWorkload({"partitions": 3}).checkers({})
    assert [c.name for c in checkers] == ["progress", "txn", "replicas", "trace"]
    assert checkers[-1].check({"protocol_trace": False}, []).stats.get("not_applicable")


def test_a_group_member_leaves_its_group_and_is_parked_never_closed():
    """librdkafka issue 4041: a rebalance callback run from inside close() (or destroy) can wait forever
    holding the GIL. close_confluent_consumer makes a member leave its group, serves its revocation in
    consume(), and parks it (never closed); a consumer that never joined a group is simply closed."""
    from kafkaesque_harness.workloads import base, confluent

    class Consumer:
        def __init__(self):
            self.calls, self.assigned = [], [0, 1]

        def unsubscribe(self):
            self.calls.append("unsubscribe")

        def assignment(self):
            return self.assigned

        def consume(self, num_messages, timeout):
            self.calls.append("consume")
            self.assigned = []

        def close(self):
            self.calls.append("close")

    member, plain = Consumer(), Consumer()
    before = len(base.PARKED_CONSUMERS)
    try:
        confluent.close_confluent_consumer(member, subscribed=True, drain_s=0.3)
        confluent.close_confluent_consumer(plain, subscribed=False)
        assert member.calls[0] == "unsubscribe" and set(member.calls[1:]) == {"consume"}  # never closed
        assert base.PARKED_CONSUMERS[before:] == [member]
        assert plain.calls == ["close"]
    finally:
        del base.PARKED_CONSUMERS[before:]


def test_a_process_with_parked_members_ends_with_its_code_and_its_output_flushed():
    import subprocess
    import sys

    code = ("from kafkaesque_harness.workloads import base\nbase.PARKED_CONSUMERS.append(object())\nprint('said', end='')\n"
            "base.exit_without_finalizers(3)\nprint('never')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (3, "said")
    quiet = subprocess.run([sys.executable, "-c", "from kafkaesque_harness.workloads import base\nbase.exit_without_finalizers(3)\n"
                                                  "print('went on')"], capture_output=True, text=True, timeout=60)
    assert (quiet.returncode, quiet.stdout.strip()) == (0, "went on")  # nothing parked: no early exit


def test_a_closed_librarys_group_member_is_taken_over_by_the_workers_next_process():
    """As the queue workload's: a member that ever joined the group is never closed (librdkafka issue 4041),
    and parking one per retired process fills a broker's connection limit; the next library takes it over."""
    from kafkaesque_harness.workloads import base
    from kafkaesque_harness.workloads.confluent import ConfluentTxnLibrary, SpareMembers

    members = SpareMembers()
    opts = {"group": "g", "isolation": "read_committed"}
    first = ConfluentTxnLibrary("b:9092", "txn", 3, "t-0", opts, lambda kind, keys: None, members=members)
    member = first.consumer = FakeGroupMember()
    first.was_member = True
    before = len(base.PARKED_CONSUMERS)
    try:
        first.close()
        assert member.calls == ["unsubscribe"] and first.consumer is None
        second = ConfluentTxnLibrary("b:9092", "txn", 3, "t-0", opts, lambda kind, keys: None, members=members)
        assert second._consumer() is member and second.was_member  # so it is handed on again, never closed
        assert member.calls == ["unsubscribe", ("assign", [0, 1, 2])]
    finally:
        del base.PARKED_CONSUMERS[before:]


class EventfulLibrary(ScriptedLibrary):
    """A library that did things on its own in a poll: a reset, a leader change stamped before it (a library's
    own thread can report an event late), and a rebalance."""

    def __init__(self):
        super().__init__()
        self.clock = iter([3.0, 1.0, 4.0])
        self.events = ClientEventLog("scripted", lambda: next(self.clock))

    def poll(self):
        self.events.add("reset", topic="t", partition=0)
        self.events.add("leader", topic="t", partition=0)
        self.on_rebalance("revoked", [0, 1])
        return {}


class AwaitedLibrary(EventfulLibrary):
    """The same library with the simulator's awaited calls (workloads/sim/txn.py SimTxnLibrary)."""

    async def ensure_producer(self): super().ensure_producer()
    async def begin(self): super().begin()
    async def flush(self): super().flush()
    async def send_offsets(self): return super().send_offsets()
    async def commit(self): super().commit()
    async def abort(self): super().abort()
    async def poll(self): return EventfulLibrary.poll(self)


def crash_completion(simulated: bool) -> Op:
    """A txn whose poll went through a rebalance under crash_on_rebalance, on the blocking or the simulated client."""
    import asyncio

    from kafkaesque_harness.workloads.sim.txn import SimTxnClient

    if not simulated:
        return client_with(EventfulLibrary(), crash_on_rebalance=True).invoke(txn([["poll"]]))
    client = SimTxnClient(None, "", random.Random(0), "t", 4, 1, txn_options({"crash_on_rebalance": True}),
                          OffsetTracker())
    client.lib = lib = AwaitedLibrary()
    lib.on_rebalance = client._journal
    return asyncio.run(client.invoke(txn([["poll"]])))


@pytest.mark.parametrize("simulated", [False, True], ids=["blocking", "simulated"])
def test_a_crashed_librarys_rebalances_and_events_go_on_its_ops_completion_in_the_order_they_happened(simulated):
    comp = crash_completion(simulated)
    assert comp.type == INFO and comp.error == CRASHED_ON_REBALANCE
    assert comp.extra["rebalance_log"] == [{"keys": [0, 1], "type": "revoked"}]
    # the crashed library's events (it is gone when the completion is made), by mono: the leader change first
    assert [(e["type"], e["mono"]) for e in comp.extra["client_events"]] == [("leader", 1.0), ("reset", 3.0),
                                                                              ("rebalance", 4.0)]
