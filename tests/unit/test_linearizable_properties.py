"""Property tests of the linearizability search: histories generated from a sequential register with
random concurrency and crashes pass; one injected stale read or lost write fails, and the
counterexample names the injected op."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaesque_harness.checkers.linearizable import check_linearizable
from kafkaesque_harness.history import Op
from tests.unit.random_histories import in_time_order, next_interval, numbered


def register_history(seed: int, n: int, crash_rate: float = 0.1):
    """Ops on one register by 4 processes; each takes effect at a random instant inside its interval.

    Returns the ops and, for each read, the ids of writes it could NOT have seen (for injection)."""
    rng = random.Random(seed)
    state = None
    events = []  # (time, op)
    free = [0.0] * 4
    next_pid = list(range(4))
    reads = []
    t = 0.0
    for _ in range(n):
        p, start, effect, end = next_interval(rng, free, t, effect_scale=0.5)
        t = effect  # effects happen in this order: the sequential model is applied below
        pid = next_pid[p]
        if rng.random() < 0.5:
            v = rng.randrange(5)
            state = v
            crashed = rng.random() < crash_rate
            events += [(start, Op("invoke", "write", pid, v)), (end, Op("info" if crashed else "ok", "write", pid, v))]
            if crashed:
                next_pid[p] += 4
        else:
            inv, comp = Op("invoke", "read", pid, None), Op("ok", "read", pid, state)
            events += [(start, inv), (end, comp)]
            reads.append(comp)
        free[p] = end
    return in_time_order(events), reads


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(1, 14))
def test_histories_of_a_real_register_are_linearizable(seed, n):
    ops, reads = register_history(seed, n)
    # writes alone observe nothing: every order is legal, so the verdict is unknown, not valid
    assert check_linearizable(ops, "register", time_limit=30).valid == (True if reads else "unknown")


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(2, 14))
def test_an_impossible_read_is_caught_and_named(seed, n):
    ops, reads = register_history(seed, n, crash_rate=0.0)
    if not reads:
        return
    bad = reads[-1]
    bad.value = 99  # a value no write ever wrote: no order explains it
    r = check_linearizable(ops, "register", time_limit=30)
    assert r.valid is False
    ce = r.details["counterexample"]
    assert ce["culprit"]["op_index"] == bad.index - _offset(ops, bad)


def _offset(ops, completion):
    """The culprit is named by its invocation's index: find the matching invoke."""
    for o in reversed(ops[: completion.index]):
        if o.process == completion.process and o.type == "invoke":
            return completion.index - o.index
    raise AssertionError


def test_stale_read_after_an_acknowledged_write_is_caught():
    ops = [Op("invoke", "write", 0, 1), Op("ok", "write", 0, 1), Op("invoke", "write", 0, 2),
           Op("ok", "write", 0, 2), Op("invoke", "read", 1, None), Op("ok", "read", 1, 1)]
    r = check_linearizable(numbered(ops), "register")
    assert r.valid is False and r.details["counterexample"]["culprit"]["op_index"] == 4


def test_lost_write_then_reordered_reads_are_caught():
    ops = [Op("invoke", "write", 0, 1), Op("ok", "write", 0, 1), Op("invoke", "read", 1, None),
           Op("ok", "read", 1, None)]
    assert check_linearizable(numbered(ops), "register").valid is False


def test_an_indeterminate_write_may_or_may_not_have_happened():
    ops = [Op("invoke", "write", 0, 1), Op("info", "write", 0, None), Op("invoke", "read", 1, None),
           Op("ok", "read", 1, None), Op("invoke", "read", 1, None), Op("ok", "read", 1, 1)]
    assert check_linearizable(numbered(ops), "register").valid is True


def test_budget_exhaustion_is_unknown_never_a_guess():
    ops, _ = register_history(5, 60, crash_rate=0.3)
    r = check_linearizable(ops, "register", time_limit=1e-9)
    assert r.valid in ("unknown", True)  # a tiny budget may still finish a tiny search
    big = []
    for k in range(40):  # 40 concurrent writes then a read: a wide search
        big.append(Op("invoke", "write", k, k))
    for k in range(40):
        big.append(Op("ok", "write", k, k))
    big += [Op("invoke", "read", 99, None), Op("ok", "read", 99, 1000)]
    r = check_linearizable(numbered(big), "register", time_limit=0.05)
    assert r.valid == "unknown" and r.stats["unknown_partitions"] == ["None"]
    (reason,) = r.unknown_reasons
    assert reason.startswith("the search ran out of its 0.05 s time limit before deciding the history")


def kv_history(seed: int, n: int, concurrent: bool):
    """Ops on a few string keys; with `concurrent`, intervals overlap and some puts crash (info)."""
    rng = random.Random(seed)
    state = {k: "" for k in "abc"}
    events, free, next_pid = [], [0.0] * 3, [0, 1, 2]
    t = 0.0
    gets = []
    for _ in range(n):
        p = rng.randrange(3)
        start = max(t, free[p]) + (rng.random() if concurrent else 1.0)
        effect = start + (rng.random() * 0.5 if concurrent else 0.1)
        end = effect + (rng.random() if concurrent else 0.1)
        t = effect if concurrent else end
        pid, k = next_pid[p], rng.choice("abc")
        r = rng.random()
        if r < 0.3:
            v = f"x{rng.randrange(100)}"
            state[k] += v
            crashed = concurrent and rng.random() < 0.1
            events += [(start, Op("invoke", "append", pid, [k, v])),
                       (end, Op("info" if crashed else "ok", "append", pid, [k, v]))]
            if crashed:
                next_pid[p] += 3
        elif r < 0.5:
            v = f"p{rng.randrange(100)}"
            state[k] = v
            events += [(start, Op("invoke", "put", pid, [k, v])), (end, Op("ok", "put", pid, [k, v]))]
        else:
            comp = Op("ok", "get", pid, [k, state[k]])
            events += [(start, Op("invoke", "get", pid, [k, None])), (end, comp)]
            gets.append(comp)
        free[p] = end
    return in_time_order(events), gets


def invocation_index(ops, completion):
    return next(o.index for o in reversed(ops[: completion.index]) if o.process == completion.process)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(1, 16))
def test_concurrent_kv_histories_with_crashes_pass(seed, n):
    ops, gets = kv_history(seed, n, concurrent=True)
    assert check_linearizable(ops, "kv", time_limit=30).valid == (True if gets else "unknown")


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(3, 16), fault=st.sampled_from(["stale", "lost", "reorder"]))
def test_injected_stale_read_lost_write_or_reordered_pair_fails_naming_the_op(seed, n, fault):
    ops, gets = kv_history(seed, n, concurrent=False)
    if fault in ("stale", "lost"):
        # stale: a get returns an older value of its key; lost: it returns the value as if the
        # latest write to it had not happened: in a sequential history both are the previous value.
        candidates = [g for g in gets if g.value[1] != _previous(ops, g)]
        if not candidates:
            return
        bad = candidates[len(candidates) // 2]
        bad.value = [bad.value[0], _previous(ops, bad)]
        culprits = {invocation_index(ops, bad)}
    else:
        pairs = [(a, b) for i, a in enumerate(gets) for b in gets[i + 1:]
                 if a.value[0] == b.value[0] and a.value[1] != b.value[1]]
        if not pairs:
            return
        a, b = pairs[0]
        a.value, b.value = b.value, a.value
        culprits = {invocation_index(ops, a), invocation_index(ops, b)}
    r = check_linearizable(ops, "kv", time_limit=30)
    assert r.valid is False
    assert r.details["counterexample"]["culprit"]["op_index"] in culprits


def _previous(ops, get_completion):
    """The value the get's key held before the last write that completed before the get began."""
    k = get_completion.value[0]
    inv = invocation_index(ops, get_completion)
    values = [""]
    for o in ops[:inv]:
        if o.type == "ok" and o.f in ("put", "append") and o.value[0] == k:
            values.append(o.value[1] if o.f == "put" else values[-1] + o.value[1])
    return values[-2] if len(values) >= 2 else values[-1]
