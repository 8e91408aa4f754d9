"""Generators are pure schedules: rates, the info rule, time limits, phases, nemesis cycles."""

import random

from harness.generator import ClientSchedule, NemesisSchedule, ProcessTable, RateLimiter, final_assignments


def mix(rng: random.Random, process: int):
    return ("send", [rng.randrange(3), process]) if rng.random() < 0.5 else ("poll", None)


def simulate(schedule: ClientSchedule, workers: int, op_duration: float = 0.001) -> list:
    """Drive a schedule with a simulated clock: each worker asks, waits until `at`, takes op_duration."""
    clock = {w: 0.0 for w in range(workers)}
    issued = []
    active = set(range(workers))
    while active:
        w = min(active, key=lambda x: clock[x])
        inv = schedule.next(w, clock[w])
        if inv is None:
            active.discard(w)
            continue
        issued.append(inv)
        clock[w] = inv.at + op_duration
    return issued


def test_rate_is_respected_over_all_workers():
    ops = simulate(ClientSchedule(mix, rate=200, time_limit_s=10, seed=1), workers=10)
    assert 1800 <= len(ops) <= 2200
    assert all(0 <= o.at < 10 for o in ops)


def test_unlimited_rate_is_bounded_only_by_op_duration():
    ops = simulate(ClientSchedule(mix, rate=0, time_limit_s=1, seed=1), workers=4, op_duration=0.01)
    assert 390 <= len(ops) <= 404


def test_time_limit_stops_the_schedule():
    s = ClientSchedule(mix, rate=10, time_limit_s=5, seed=2)
    assert s.next(0, 5.0) is None and s.next(0, 6.0) is None
    assert s.next(0, 0.0) is not None


def test_same_seed_same_schedule():
    a = simulate(ClientSchedule(mix, rate=50, time_limit_s=3, seed=7), workers=3)
    b = simulate(ClientSchedule(mix, rate=50, time_limit_s=3, seed=7), workers=3)
    assert [(o.at, o.f, o.value) for o in a] == [(o.at, o.f, o.value) for o in b]


def test_rate_limiter_mean_gap():
    lim = RateLimiter(100, random.Random(3))
    starts = [lim.reserve(0.0) for _ in range(5000)]
    assert abs(starts[-1] / 5000 - 0.01) < 0.001


def test_info_rule_retires_the_process_and_the_worker_continues_fresh():
    pt = ProcessTable(concurrency=5)
    assert [pt.process_of(w) for w in range(5)] == [0, 1, 2, 3, 4]
    assert pt.retire(2) == 7
    assert pt.retire(2) == 12
    assert pt.process_of(2) == 12 and pt.process_of(3) == 3
    assert pt.max_process() == 12


def test_nemesis_schedule_alternates_start_and_stop_and_cycles_faults():
    evs = NemesisSchedule([("start-kill", "stop-kill"), ("start-pause", "stop-pause")], 5, 42).events()
    assert [(e.at, e.f) for e in evs] == [
        (5, "start-kill"), (10, "stop-kill"), (15, "start-pause"), (20, "stop-pause"),
        (25, "start-kill"), (30, "stop-kill"), (35, "start-pause"), (40, "stop-pause")]


def test_no_fault_is_started_that_would_end_after_the_time_limit():
    evs = NemesisSchedule([("start-kill", "stop-kill")], 10, 25).events()
    assert [e.f for e in evs] == ["start-kill", "stop-kill"]
    assert NemesisSchedule([], 10, 100).events() == []


def test_final_phase_gets_fresh_processes():
    assert final_assignments([("final-poll", [0]), ("final-poll", [1])], 100) == [
        (100, "final-poll", [0]), (101, "final-poll", [1])]
