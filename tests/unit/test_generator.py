"""Generators are pure schedules: rates, the info rule, time limits, phases, nemesis cycles."""

import random

import pytest

from kafkaesque_harness.harness.generator import (
    ClientSchedule,
    ProcessTable,
    RateLimiter,
    final_assignments,
)
from kafkaesque_harness.nemesis.schedule import NemesisSchedule


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
    evs = NemesisSchedule([("start-kill", "stop-kill"), ("start-pause", "stop-pause")], 5, 42,
                          mode="sequential").events()
    assert [(e.at, e.f) for e in evs] == [
        (5, "start-kill"), (10, "stop-kill"), (15, "start-pause"), (20, "stop-pause"),
        (25, "start-kill"), (30, "stop-kill"), (35, "start-pause"), (40, "stop-pause")]


def test_no_fault_is_started_that_would_end_after_the_time_limit():
    evs = NemesisSchedule([("start-kill", "stop-kill")], 10, 25, mode="sequential").events()
    assert [e.f for e in evs] == ["start-kill", "stop-kill"]
    assert NemesisSchedule([], 10, 100).events() == []


PAIRS = [("start-kill", "stop-kill"), ("start-partition", "stop-partition"), ("start-lossy-crash", "stop-lossy-crash")]


def _active_spans(evs):
    """(start, stop, name) of every fault window; fails if a fault starts while on or stops while off."""
    on, spans = {}, []
    for e in evs:
        name = e.f.split("-", 1)[1]
        if e.f.startswith("start-"):
            assert name not in on, f"{name} started twice at {e.at}"
            on[name] = e.at
        else:
            assert name in on, f"{name} stopped while off at {e.at}"
            spans.append((on.pop(name), e.at, name))
    assert not on, f"left on at the end: {on}"
    return spans


@pytest.mark.parametrize("seed", range(20))
def test_mix_toggles_each_fault_stops_everything_before_the_limit_and_is_seeded(seed):
    evs = NemesisSchedule(PAIRS, 10, 300, rng_seed=seed).events()
    assert evs == NemesisSchedule(PAIRS, 10, 300, rng_seed=seed).events()
    assert [e.at for e in evs] == sorted(e.at for e in evs)
    assert all(0 < e.at <= 300 for e in evs)
    _active_spans(evs)
    gaps = [b.at - a.at for a, b in zip(evs, evs[1:], strict=False)][:-3]  # the final stops share one time
    assert all(5 - 1e-9 <= g <= 15 + 1e-9 for g in gaps if g > 0)


def test_mix_makes_different_faults_overlap_which_sequential_never_does():
    def overlaps(evs):
        spans = _active_spans(evs)
        return sum(1 for a in spans for b in spans if a[2] < b[2] and a[0] < b[1] and b[0] < a[1])

    assert sum(overlaps(NemesisSchedule(PAIRS, 10, 300, rng_seed=s).events()) for s in range(10)) > 10
    assert all(overlaps(NemesisSchedule(PAIRS, 10, 300, rng_seed=s, mode="sequential").events()) == 0
               for s in range(10))
    assert NemesisSchedule(PAIRS, 10, 300, rng_seed=1).events() != NemesisSchedule(PAIRS, 10, 300, rng_seed=2).events()


def test_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="valid: mix, sequential"):
        NemesisSchedule(PAIRS, 10, 300, mode="random")


def test_final_phase_gets_fresh_processes():
    assert final_assignments([("final-poll", [0]), ("final-poll", [1])], 100) == [
        (100, "final-poll", [0], None), (101, "final-poll", [1], None)]


def test_final_op_extras_reach_the_invocation():
    assert final_assignments([("poll", [["poll"]], {"final": True, "key": 0})], 7) == [
        (7, "poll", [["poll"]], {"final": True, "key": 0})]
