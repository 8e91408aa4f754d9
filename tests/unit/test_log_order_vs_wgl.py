"""The log fast path agrees with the general linearizability search on small random histories,
valid ones and ones with an injected fault; and each anomaly is found on a hand-built history."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaesque_harness.checkers.linearizable import check_linearizable
from kafkaesque_harness.checkers.log_order import check_log_order
from kafkaesque_harness.history import Op
from tests.unit.random_histories import in_time_order, next_interval


def simulate(seed: int, n_ops: int, fault: str | None) -> list[Op]:
    """A random concurrent history of one log: 3 processes send and poll, then a final read.

    Each op takes effect at a random point inside its interval; a few sends end "info"
    (applied or not). `fault` corrupts one observation afterwards."""
    rng = random.Random(seed)
    log: list[int] = []
    events: list[tuple[float, Op]] = []
    t = 0.0
    value = 0
    proc_free = [0.0, 0.0, 0.0]
    next_pid = [0, 1, 2]
    for _ in range(n_ops):
        p, start, effect, end = next_interval(rng, proc_free, t)
        pid = next_pid[p]
        if rng.random() < 0.6:
            value += 1
            inv = Op("invoke", "send", pid, [0, value])
            if rng.random() < 0.15:
                applied = rng.random() < 0.5
                comp = Op("info", "send", pid, None)
                next_pid[p] += 3
                if applied:
                    log.append(value)  # took effect now (logs are built in effect order below)
            else:
                log.append(value)
                comp = Op("ok", "send", pid, [0, [len(log) - 1, value]])
            events.append((start, inv))
            events.append((end, comp))
        else:
            lo = rng.randrange(len(log) + 1)
            hi = min(len(log), lo + rng.randrange(1, 4))
            recs = [[o, log[o]] for o in range(lo, hi)]
            events.append((start, Op("invoke", "poll", pid, None)))
            events.append((end, Op("ok", "poll", pid, {"0": recs})))
        proc_free[p] = end
        # keep effects in time order: the next op starts after this effect
        t = effect
    t_final = max(proc_free) + 1
    final = Op("ok", "final-poll", 99, [0, len(log), [[o, v] for o, v in enumerate(log)]])
    events.append((t_final, Op("invoke", "final-poll", 99, [0])))
    events.append((t_final + 1, final))
    ops = in_time_order(events)
    if fault == "stale-final" and len(log) > 1:
        final.value = [0, len(log) - 1, [[o, v] for o, v in enumerate(log[:-1])]]
    elif fault == "wrong-read":
        polls = [op for op in ops if op.f == "poll" and op.type == "ok" and op.value["0"]]
        if polls:
            polls[0].value["0"][0][1] = 10_000
    elif fault == "swap-acks":
        acks = [op for op in ops if op.f == "send" and op.type == "ok"]
        if len(acks) >= 2:
            a, b = acks[0], acks[-1]
            a.value[1][0], b.value[1][0] = b.value[1][0], a.value[1][0]
    return ops


@settings(max_examples=500, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(1, 9),
       fault=st.sampled_from([None, None, "stale-final", "wrong-read", "swap-acks"]))
def test_fast_path_agrees_with_the_general_search(seed, n, fault):
    history = simulate(seed, n, fault)
    slow = check_linearizable(history, "log", time_limit=30).valid
    fast = check_log_order(history).valid
    assert slow in (True, False)
    assert fast == slow, (fault, [o.to_dict() for o in history])


def test_clean_simulated_histories_are_valid():
    for seed in range(50):
        assert check_log_order(simulate(seed, 12, None)).valid is True


def op(i, type_, f, p, v):
    return Op(type_, f, p, v, index=i, time=i)


def test_realtime_order_violation_is_named():
    h = [op(0, "invoke", "send", 0, [0, 1]), op(1, "ok", "send", 0, [0, [1, 1]]),
         op(2, "invoke", "send", 1, [0, 2]), op(3, "ok", "send", 1, [0, [0, 2]])]
    r = check_log_order(h)
    assert r.valid is False and [a.name for a in r.anomalies] == ["realtime-order"]


def test_stale_final_read_is_named():
    h = [op(0, "invoke", "send", 0, [0, 1]), op(1, "ok", "send", 0, [0, [0, 1]]),
         op(2, "invoke", "final-poll", 1, [0]), op(3, "ok", "final-poll", 1, [0, 0, []])]
    r = check_log_order(h)
    assert "stale-read" in [a.name for a in r.anomalies]


def test_future_read_is_named():
    h = [op(0, "invoke", "poll", 1, None), op(1, "ok", "poll", 1, {"0": [[0, 7]]}),
         op(2, "invoke", "send", 0, [0, 7]), op(3, "ok", "send", 0, [0, [0, 7]])]
    r = check_log_order(h)
    assert [a.name for a in r.anomalies] == ["future-read"]
