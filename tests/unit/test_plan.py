"""The one scheduler (nemesis/plan.py): every plan, random, scenario or protocol, is run by drive(): steps due
later are waited for, a step's result goes back into the plan and its error is thrown in where it was
yielded, a wait holds its step until its condition holds, several plans run together with the next step
whichever is due first (the nemesis is one process: a wait holds it, a pause does not), and neither a set
stop nor the time limit lets a step begin after it."""

from __future__ import annotations

import pytest

from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis.plan import PlanStep, Stalled, drive, in_turn, pause, timed
from tests.unit.fakes import FastClock, FastStop, StepLog, run_plans


def test_results_are_sent_back_and_errors_thrown_in_where_the_step_was_yielded():
    seen = []

    def plan():
        got = yield PlanStep("scenario-bind", {"role": "leader"}, lambda: {"L": "broker-1"})
        seen.append(("result", got))
        try:
            yield PlanStep("scenario-kill", {}, lambda: 1 / 0)
        except ZeroDivisionError as e:
            seen.append(("error", type(e).__name__))
            return  # a scenario ends at a failed step
        seen.append("never")

    log = run_plans([plan()])
    assert [f for f, _, _ in log.ops] == ["scenario-bind", "scenario-kill"]
    assert log.ops[1][2] == "error: division by zero"  # the completion carries the error
    assert seen == [("result", {"L": "broker-1"}), ("error", "ZeroDivisionError")]


def test_an_error_the_plan_does_not_handle_reaches_the_caller():
    def plan():
        yield PlanStep("scenario-kill", {}, lambda: (_ for _ in ()).throw(RuntimeError("no such node")))

    with pytest.raises(RuntimeError, match="no such node"):
        run_plans([plan()])


class Invoked:
    def __init__(self, fail: set[str] = frozenset()):
        self.ops, self.fail = [], fail

    def invoke(self, cluster, op: Op) -> Op:
        self.ops.append(op.f)
        if op.f in self.fail:
            raise RuntimeError(f"{op.f} failed")
        return Op("info", op.f, op.process, {"did": op.f})


class Event:
    def __init__(self, at, f):
        self.at, self.f = at, f


def test_timed_steps_wait_for_their_time_and_a_failed_one_does_not_end_the_schedule():
    nemesis = Invoked(fail={"start-kill"})
    events = [Event(5.0, "start-kill"), Event(10.0, "stop-kill"), Event(12.5, "start-pause")]
    log = run_plans([timed(events, nemesis, None)])
    assert nemesis.ops == ["start-kill", "stop-kill", "start-pause"]  # the failed start did not end it
    assert [t for _, t in log.began_at] == [5.0, 10.0, 12.5]
    assert [r for _, _, r in log.ops] == ["error: start-kill failed", {"did": "stop-kill"}, {"did": "start-pause"}]


def test_a_stop_during_the_wait_ends_the_plan_before_the_next_step_and_closes_it():
    nemesis = Invoked()
    closed = []

    def plan():
        try:
            yield from timed([Event(5.0, "start-kill"), Event(10.0, "stop-kill")], nemesis, None)
        finally:
            closed.append(True)

    run_plans([plan()], stop_at=7.0)
    assert nemesis.ops == ["start-kill"] and closed == [True]


def test_no_step_begins_at_or_after_the_time_limit():
    nemesis = Invoked()
    run_plans([timed([Event(5.0, "start-kill"), Event(30.0, "stop-kill")], nemesis, None)], end=30.0)
    assert nemesis.ops == ["start-kill"]


def test_a_step_due_before_the_time_limit_does_not_begin_once_an_act_ran_past_it():
    # A tansu-s3 campaign's kills came after its 20 s limit: a start-kill that took 3.6 s and its stop-kill 8.5 s
    # under load left the next start (due at 19 s) overdue at 31 s, and drive() began it then.
    clock = FastClock()
    log = StepLog(clock)

    class Slow(Invoked):
        def invoke(self, cluster, op: Op) -> Op:
            clock.t += 8.0  # each act takes 8 s
            return super().invoke(cluster, op)

    nemesis = Slow()
    events = [Event(5.0, "start-kill"), Event(10.0, "stop-kill"), Event(19.0, "start-pause")]
    drive([timed(events, nemesis, None)], log, FastStop(clock), clock, end=20.0)
    assert nemesis.ops == ["start-kill", "stop-kill"]  # the stop-kill ended at 21 s: the start-pause never began


def test_plans_in_turn_each_get_their_own_results():
    got = []

    def part(name):
        got.append((name, (yield PlanStep(f"scenario-{name}", None, lambda: name.upper()))))

    run_plans([in_turn([part("a"), part("b")])])
    assert got == [("a", "A"), ("b", "B")]


def test_a_step_is_due_after_the_previous_one_ended_and_a_pause_records_nothing():
    def plan():
        yield pause(10.0)
        yield PlanStep("scenario-kill", {}, lambda: None)
        yield PlanStep("scenario-start", {}, lambda: None, after=3.0)

    log = run_plans([plan()])
    assert log.began_at == [("scenario-kill", 10.0), ("scenario-start", 13.0)]
    assert [f for f, _, _ in log.ops] == ["scenario-kill", "scenario-start"]


def test_a_wait_ends_when_its_condition_holds_with_what_was_seen():
    clock_at = []

    def plan(clock):
        reached = yield PlanStep("scenario-wait", {}, timeout=30.0,
                                 until=lambda: (clock() >= 2.0, {"isr": [1]} if clock() >= 2.0 else {"isr": [1, 2]}))
        clock_at.append((clock(), reached))

    clock = FastClock()
    log = StepLog(clock)
    drive([plan(clock)], log, FastStop(clock), clock)
    assert clock_at and 2.0 <= clock_at[0][0] < 2.5 and clock_at[0][1] == {"isr": [1]}


def test_a_wait_not_reached_in_time_is_thrown_into_its_plan_naming_what_was_last_seen():
    caught = []

    def plan():
        try:
            yield PlanStep("scenario-wait", {}, timeout=1.0, until=lambda: (False, {"leader": "broker-1"}),
                           what="leader-is broker-2")
        except Stalled as e:
            caught.append(str(e))

    log = run_plans([plan()])
    assert caught == ["leader-is broker-2 not reached in 1 s (last seen: {'leader': 'broker-1'})"]
    assert log.ops[0][2].startswith("error: leader-is broker-2 not reached")


def test_a_condition_that_cannot_be_seen_ends_the_wait_at_once():
    def cannot():
        raise Stalled("this cluster reports no log end offsets")

    def plan():
        try:
            yield PlanStep("scenario-wait", {}, timeout=60.0, until=cannot)
        except Stalled:
            return

    log = run_plans([plan()])
    assert log.ops == [("scenario-wait", {}, "error: this cluster reports no log end offsets")]
    assert log.began_at == [("scenario-wait", 0.0)]


def test_merged_plans_take_whichever_step_is_due_first_and_a_wait_holds_the_nemesis():
    nemesis = Invoked()

    def scenario():
        yield pause(1.0)
        yield PlanStep("scenario-pause", {}, lambda: "paused")
        yield pause(6.0)  # a sleep of the scenario: the random kill due at 5 s lands in it
        yield PlanStep("scenario-resume", {}, lambda: "resumed")
        try:
            yield PlanStep("scenario-wait", {}, timeout=20.0, until=lambda: (False, {}))  # never holds: 20 s
        except Stalled:
            return  # a scenario ends at a wait not reached
        yield PlanStep("scenario-kill", {}, lambda: "never")

    random_faults = timed([Event(5.0, "start-kill"), Event(10.0, "stop-kill")], nemesis, None)
    log = run_plans([scenario(), random_faults])
    begun = [(f, round(t, 1)) for f, t in log.began_at]
    # the stop due at 10 s waits for the wait that holds the nemesis from 7 s to 27 s: ops never overlap
    assert begun == [("scenario-pause", 1.0), ("start-kill", 5.0), ("scenario-resume", 7.0),
                     ("scenario-wait", 7.0), ("stop-kill", 27.0)]
    assert [f for f, _, _ in log.ops] == [f for f, _ in begun]  # each began op ended before the next began
    assert nemesis.ops == ["start-kill", "stop-kill"]
    wait_end = [r for f, _, r in log.ops if f == "scenario-wait"]
    assert wait_end and wait_end[0].startswith("error: scenario-wait not reached in 20 s")


def test_a_wait_still_holding_at_the_time_limit_is_recorded_as_not_reached():
    def plan():
        try:
            yield PlanStep("scenario-wait", {}, timeout=60.0, until=lambda: (False, {"isr": [1]}))
        except Stalled:
            return

    log = run_plans([plan()], end=5.0)
    assert log.ops == [("scenario-wait", {}, "error: scenario-wait not reached in the time the run had left "
                                             "(last seen: {'isr': [1]})")]
