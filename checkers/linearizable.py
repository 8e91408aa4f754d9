"""Linearizability: Wing & Gong / Lowe's just-in-time search, as Porcupine does it (issue 5).

The search walks the history's call/return entries in time order, tentatively linearizing
a call whenever the model accepts it in the current state, and backtracking when it meets
the return of an op it has not linearized. Memoizing (linearized set, model state) prunes
revisits. P-compositionality: the model's key splits the history, and each part is checked
on its own. Indeterminate ops (info, or never completed) return "after everything" with an
unknown output: they may take effect at any point after their invocation, or never.

A time budget (and a memo-size budget) make the verdict "unknown" rather than a guess, and so
does a history in which no op observed the state (writes only: every order is legal). On
failure the counterexample is the smallest failing prefix of the history: the op that no
order allows, the ops concurrent with it, and the state a valid order reached before it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from checkers.core import UNKNOWN, Anomaly, Result
from checkers.models import MODELS, UNKNOWN_OUTPUT, Call, Model
from checkers.reasons import REASONS, say
from history import FAIL, INFO, NEMESIS, OK, Op, pair_ops

NEVER = 1 << 60  # the return position of an indeterminate op


class Budget(Exception):
    """The time or memory budget ran out: the verdict is unknown. The message says which."""


class StepsExhausted(Exception):
    """This round's step budget ran out (check_calls retries with a larger one)."""


def _search(calls: Sequence[Call], model: Model, deadline: float, max_cache: int,
            max_steps: int | None = None) -> tuple[bool, Any]:
    """One partition: True (and a final state) if some order of `calls` is legal, else False."""
    n = len(calls)
    if n == 0:
        return True, model.init()
    events = sorted([(c.call, 0, i) for i, c in enumerate(calls)] + [(c.ret, 1, i) for i, c in enumerate(calls)])
    m = len(events)
    head = m
    nxt = list(range(1, m + 1)) + [0]
    nxt[m - 1] = -1
    prv = [k - 1 for k in range(m)] + [-1]
    prv[0] = head
    is_call = [e[1] == 0 for e in events]
    cid = [e[2] for e in events]
    match = [0] * m
    pos_of_call = [0] * n
    for p, (_, kind, i) in enumerate(events):
        if kind == 0:
            pos_of_call[i] = p
    for p, (_, kind, i) in enumerate(events):
        if kind == 1:
            match[pos_of_call[i]] = p
    step = model.step
    inputs = [c.input for c in calls]
    outputs = [c.output for c in calls]
    state = model.init()
    linearized = 0
    cache: set = set()
    stack: list[tuple[int, Any]] = []
    p = nxt[head]
    steps = 0
    while nxt[head] != -1:
        steps += 1
        if steps & 0x3FF == 0:
            if time.monotonic() > deadline:
                raise Budget("time")
            if len(cache) > max_cache:
                raise Budget(f"memo limit of {max_cache:,} states")
            if max_steps is not None and steps > max_steps:
                raise StepsExhausted
        if is_call[p]:
            i = cid[p]
            ok, new_state = step(state, inputs[i], outputs[i])
            if ok:
                key = (linearized | (1 << i), new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((p, state))
                    state, linearized = new_state, key[0]
                    # lift the call and its return out of the list
                    r = match[p]
                    nxt[prv[p]] = nxt[p]
                    if nxt[p] != -1:
                        prv[nxt[p]] = prv[p]
                    nxt[prv[r]] = nxt[r]
                    if nxt[r] != -1:
                        prv[nxt[r]] = prv[r]
                    p = nxt[head]
                    continue
            p = nxt[p]
        else:
            if not stack:
                return False, None
            p, state = stack.pop()
            linearized &= ~(1 << cid[p])
            r = match[p]
            nxt[prv[r]] = r
            if nxt[r] != -1:
                prv[nxt[r]] = r
            nxt[prv[p]] = p
            if nxt[p] != -1:
                prv[nxt[p]] = p
            p = nxt[p]
    return True, state


# --- from histories to calls -------------------------------------------------------------------
def calls_from_history(history: Sequence[Op], model_name: str) -> list[Call]:
    """Our op schema to model calls (see checkers/models.py for each model's encoding)."""
    calls: list[Call] = []
    pos = {id(op): k for k, op in enumerate(history)}
    for inv, comp in pair_ops(history):
        if inv.process == NEMESIS:
            continue
        t = comp.type if comp is not None else INFO
        ret = pos[id(comp)] if comp is not None and t != INFO else NEVER + len(calls)
        base = {"call": pos[id(inv)], "ret": ret, "op_index": inv.index}
        for key, inp, out in _encode(inv, comp, t, model_name):
            calls.append(Call(id=len(calls), key=key, input=inp, output=out, **base))
    return calls


def _encode(inv: Op, comp: Op | None, t: str, model_name: str):
    f = inv.f
    unknown = t == INFO
    if model_name in ("register", "cas-register", "etcd"):
        if f == "read":
            if t == OK:
                yield None, ("read",), comp.value
        elif f == "write":
            if t != FAIL:  # a failed write definitely did not happen
                yield None, ("write", inv.value), UNKNOWN_OUTPUT if unknown else None
        elif f == "cas":
            a, b = inv.value
            yield None, ("cas", a, b), UNKNOWN_OUTPUT if unknown else (t == OK)
        else:
            raise ValueError(f"op {inv.index}: {model_name} has no operation {f!r}")
    elif model_name == "kv":
        key, value = inv.value
        if f == "get":
            if t == OK:
                yield key, ("get", key), comp.value[1]
        elif f in ("put", "append"):
            if t != FAIL:
                yield key, (f, key, value), UNKNOWN_OUTPUT if unknown else None
        else:
            raise ValueError(f"op {inv.index}: kv has no operation {f!r}")
    elif model_name == "log":
        if f == "send":
            if t == OK:
                key, (offset, value) = int(comp.value[0]), comp.value[1]
                yield key, ("append", value), int(offset)
            elif unknown:
                yield int(inv.value[0]), ("append", inv.value[1]), UNKNOWN_OUTPUT
        elif f == "poll" and t == OK:
            for k, recs in (comp.value or {}).items():
                if recs:
                    yield int(k), ("read", tuple((int(o), v) for o, v in recs), None), None
        elif f == "final-poll" and t == OK:
            key, hwm, recs = comp.value
            yield int(key), ("read", tuple((int(o), v) for o, v in recs), int(hwm)), None
    else:
        raise ValueError(f"unknown model {model_name!r}; valid: {', '.join(MODELS)}")


# --- the checker -----------------------------------------------------------------------------------
def check_calls(calls: Sequence[Call], model: Model, time_limit: float | None = 60.0,
                max_cache: int = 5_000_000, budget_spent: list[str] | None = None) -> tuple[Any, dict[Any, Any]]:
    """Check every partition; returns (valid, {key: True/False/"unknown"}). When a budget runs out,
    which one is appended to `budget_spent` (if given)."""
    deadline = time.monotonic() + (time_limit if time_limit else 1e9)
    parts: dict[Any, list[Call]] = {}
    for c in calls:
        parts.setdefault(c.key, []).append(c)
    verdicts: dict[Any, Any] = {}
    # Race the partitions with a growing step budget (as Porcupine does): an illegal
    # partition is usually refuted quickly, while a legal one may take long to confirm.
    pending = dict(parts)
    max_steps = 2000
    while pending:
        for key in list(pending):
            try:
                ok, _ = _search(pending[key], model, deadline, max_cache, max_steps)
            except StepsExhausted:
                continue
            except Budget as spent:
                verdicts[key] = UNKNOWN
                if budget_spent is not None:
                    budget_spent.append(str(spent))
                pending.clear()
                break
            verdicts[key] = ok
            del pending[key]
            if ok is False:
                return False, verdicts  # one illegal partition decides the verdict
        max_steps *= 4
    for key in parts:
        verdicts.setdefault(key, UNKNOWN)
    if any(v is False for v in verdicts.values()):
        return False, verdicts
    if any(v == UNKNOWN for v in verdicts.values()):
        return UNKNOWN, verdicts
    return True, verdicts


def counterexample(part: Sequence[Call], model: Model, time_limit: float = 10.0) -> dict[str, Any]:
    """The smallest failing prefix of one illegal partition, explained."""
    deadline = time.monotonic() + time_limit
    returns = sorted({c.ret for c in part if c.ret < NEVER})

    def prefix(t: int) -> list[Call]:
        """The history cut just before position t: ops still open at t become indeterminate."""
        out = []
        for c in part:
            if c.call < t:
                out.append(c if c.ret < t else Call(c.id, c.key, c.input, UNKNOWN_OUTPUT, c.call,
                                                     NEVER + c.id, c.op_index))
        return out

    lo, hi = 0, len(returns) - 1  # find the first return time whose prefix fails
    try:
        while lo < hi:
            mid = (lo + hi) // 2
            ok, _ = _search(prefix(returns[mid] + 1), model, deadline, 2_000_000)
            if ok:
                lo = mid + 1
            else:
                hi = mid
        t = returns[lo]
        culprit = next(c for c in part if c.ret == t)
        before_ok, state = (_search(prefix(culprit.call), model, deadline, 2_000_000)
                            if culprit.call > 0 else (True, model.init()))
    except Budget:
        return {"text": "the search budget ran out while shrinking the counterexample", "ops": []}
    concurrent = [c for c in part if c is not culprit and c.call < culprit.ret and c.ret > culprit.call]
    state_text = model.describe_state(state) if before_ok else "no legal state"
    text = (f"Everything up to op #{culprit.op_index}'s invocation can be ordered legally (one such order "
            f"leaves: {state_text}). Op #{culprit.op_index}, {model.describe_op(culprit)}, cannot be placed: "
            f"no order of it and the {len(concurrent)} op(s) concurrent with it is legal.")
    return {
        "text": text,
        "culprit": {"op_index": culprit.op_index, "op": model.describe_op(culprit)},
        "state_before": state_text,
        "concurrent": [{"op_index": c.op_index, "op": model.describe_op(c)} for c in concurrent[:20]],
        "ops": sorted([culprit.op_index] + [c.op_index for c in concurrent]),
    }


NOTHING_OBSERVED = REASONS["nothing-observed"].template


def check_linearizable(history: Sequence[Op], model: str | Model, time_limit: float | None = 60.0,
                       calls: Sequence[Call] | None = None) -> Result:
    m = MODELS[model]() if isinstance(model, str) else model
    calls = calls if calls is not None else calls_from_history(history, m.name if isinstance(model, Model) else model)
    t0 = time.monotonic()
    spent: list[str] = []
    valid, verdicts = check_calls(calls, m, time_limit, budget_spent=spent)
    unknown = [str(k) for k, v in verdicts.items() if v == UNKNOWN]
    stats = {"ops": len(calls), "partitions": len({c.key for c in calls}), "seconds": round(time.monotonic() - t0, 3),
             "unknown_partitions": unknown}
    reasons = []
    if unknown:
        budget = " and ".join(f"its {time_limit} s time limit" if b == "time" else f"its {b}"
                              for b in dict.fromkeys(spent)) or "its budget"
        what = "the history" if unknown == ["None"] else f"partition(s) {', '.join(unknown[:8])}"
        reasons.append(say("search-out-of-budget", budget=budget, what=what))
    if valid is True and not any(m.observes(c) for c in calls):
        # Every order of ops that observe nothing is legal: "valid" would be vacuous.
        valid = UNKNOWN
        reasons.append(NOTHING_OBSERVED.format(model=m.name, ops=len(calls)))
    anomalies, details = [], {}
    if valid is False:
        bad = next(k for k, v in verdicts.items() if v is False)
        ce = counterexample([c for c in calls if c.key == bad], m)
        details = {"counterexample": ce, "counterexample_text": ce["text"], "partition": str(bad)}
        ops_by_index = {op.index: op for op in history}
        examples = [{"summary": ce["text"], "ops": [ops_by_index[i].to_dict() for i in ce.get("ops", [])
                                                      if i in ops_by_index][:8]}]
        where = "the history" if bad is None else f"key {bad}"
        anomalies.append(Anomaly("nonlinearizable", 1, examples,
                                 f"No order of the operations on {where} is consistent with both real time "
                                 f"and the {m.name} model."))
    return Result(checker=f"linearizable-{m.name}", valid=valid, anomalies=anomalies, stats=stats, details=details,
                  unknown_reasons=reasons)


class LinearizableChecker:
    def __init__(self, model: str, time_limit: float = 60.0):
        self.model, self.time_limit = model, time_limit
        self.name = f"linearizable-{model}"

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_linearizable(history, self.model, self.time_limit)
