"""The pruned search (reads placed at once, reachability of upcoming returns, the log's observed
offsets and unread values, indeterminate ops left out or taken in invocation order, no write right
after an indeterminate op) gives exactly the verdict of a brute-force search over every order, on
small random histories of each model: real executions, and ones with one observation corrupted,
with crashes (indeterminate ops) mixed in."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaesque_harness.checkers.linearizable import check_calls
from kafkaesque_harness.checkers.models import MODELS, UNKNOWN_OUTPUT, Call
from tests.unit.random_histories import next_interval

NEVER = 1 << 60


def brute_force(calls: list[Call], model) -> bool:
    """Some order of all determinate ops and any subset of indeterminate ones, respecting real time
    (a before b whenever a returned before b was invoked), is legal under the model."""
    determinate = [c for c in calls if c.output is not UNKNOWN_OUTPUT]
    optional = [c for c in calls if c.output is UNKNOWN_OUTPUT]
    for k in range(len(optional) + 1):
        for extra in itertools.combinations(optional, k):
            chosen = determinate + list(extra)
            for order in itertools.permutations(chosen):
                if any(order[j].ret < order[i].call for i in range(len(order)) for j in range(i + 1, len(order))):
                    continue
                state, legal = model.init(), True
                for c in order:
                    legal, state = model.step(state, c.input, c.output)
                    if not legal:
                        break
                if legal:
                    return True
    return False


def simulate(model_name: str, seed: int, n: int, corrupt: bool) -> list[Call]:
    """n ops by 3 processes on one key; each takes effect at a random instant of its interval (a crashed
    one maybe not at all, and its completion is never seen); optionally one observation is falsified."""
    rng = random.Random(seed)
    state = {"cas-register": None, "kv": "", "log": ()}[model_name]
    free = [0.0, 0.0, 0.0]
    ops = []  # [start, end, input, output]
    t = 0.0
    for _ in range(n):
        p, start, effect, end = next_interval(rng, free, t)
        t = effect
        crashed = rng.random() < 0.25
        applies = not crashed or rng.random() < 0.5
        kind = rng.random()
        if model_name == "cas-register":
            if kind < 0.35:
                if crashed:
                    continue  # a read with no answer is not a call
                inp, out = ("read",), state
            elif kind < 0.7:
                inp, out = ("write", rng.randrange(3)), None
                state = inp[1] if applies else state
            else:
                a, b = rng.randrange(3), rng.randrange(3)
                inp, out = ("cas", a, b), state == a
                state = b if applies and state == a else state
        elif model_name == "kv":
            if kind < 0.4:
                if crashed:
                    continue
                inp, out = ("get", "k"), state
            elif kind < 0.55:
                inp, out = ("put", "k", rng.choice("xy")), None
                state = inp[2] if applies else state
            else:
                inp, out = ("append", "k", rng.choice("xy")), None
                state = state + inp[2] if applies else state
        else:
            if kind < 0.6:
                inp, out = ("append", rng.choice("ab")), len(state)
                state = state + (inp[1],) if applies else state
            else:
                if crashed:
                    continue
                lo = rng.randrange(len(state) + 1)
                hi = rng.randrange(lo, len(state) + 1)
                final = rng.random() < 0.3
                inp, out = ("read", tuple((o, state[o]) for o in range(lo if not final else 0, hi if not final else len(state))),
                            len(state) if final else None), None
        if crashed:
            out, end = UNKNOWN_OUTPUT, None
        free[p] = end if end is not None else float("inf")
        ops.append([start, end, inp, out])
        if crashed:
            free[p] = 0.0  # a fresh process takes over, as in Jepsen
    if corrupt:
        observed = [o for o in ops if o[3] is not UNKNOWN_OUTPUT and (o[2][0] in ("read", "get", "cas")
                                                                       or (model_name == "log"))]
        if observed:
            o = rng.choice(observed)
            if model_name == "cas-register":
                o[3] = (not o[3]) if o[2][0] == "cas" else rng.choice([None, 0, 1, 2, 3])
            elif model_name == "kv":
                o[3] = rng.choice(["", "x", "y", "xy", "yx", "xx", o[3][:-1] if o[3] else "z"])
            elif o[2][0] == "append":
                o[3] = max(0, o[3] + rng.choice([-1, 1]))
            elif o[2][1]:
                recs = list(o[2][1])
                k = rng.randrange(len(recs))
                recs[k] = (recs[k][0], "b" if recs[k][1] == "a" else "a")
                o[2] = ("read", tuple(recs), o[2][2])
    times = sorted([(o[0], 0, k) for k, o in enumerate(ops)] + [(o[1], 1, k) for k, o in enumerate(ops) if o[1] is not None])
    call, ret = {}, {}
    for pos, (_, kind, k) in enumerate(times):
        (call if kind == 0 else ret)[k] = pos
    return [Call(id=k, key=None, input=o[2], output=o[3], call=call[k], ret=ret.get(k, NEVER + k), op_index=k)
            for k, o in enumerate(ops)]


@pytest.mark.parametrize("model_name", ["cas-register", "kv", "log"])
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(1, 7), corrupt=st.booleans())
def test_the_pruned_search_agrees_with_brute_force(model_name, seed, n, corrupt):
    calls = simulate(model_name, seed, n, corrupt)
    model = MODELS[model_name]()
    expected = brute_force(calls, model)
    if not corrupt:
        assert expected is True  # the simulation itself is a legal order: guards the reference
    valid, _ = check_calls(calls, model, time_limit=30)
    assert valid is expected


def test_the_corruptions_make_both_verdicts_occur():
    """The random histories above are not all legal: each model sees illegal ones too."""
    for model_name in ("cas-register", "kv", "log"):
        model = MODELS[model_name]()
        verdicts = {brute_force(simulate(model_name, seed, 6, True), model) for seed in range(40)}
        assert verdicts == {True, False}, model_name
