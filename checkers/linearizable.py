"""Linearizability: Wing & Gong / Lowe's just-in-time search, as Porcupine does it (issue 5).

The search walks the history's call/return entries in time order, tentatively linearizing
a call whenever the model accepts it in the current state, and backtracking when it meets
the return of an op it has not linearized. Memoizing (linearized set, model state) prunes
revisits. P-compositionality: the model's key splits the history, and each part is checked
on its own. Indeterminate ops (info, or never completed) return "after everything" with an
unknown output: they may take effect at any point after their invocation, or never.

Beyond Porcupine, exact prunings that the models enable (see _search_steps) keep the search
to a few nodes per op on Porcupine's own histories (etcd_002: 148 nodes, kv c50-ok: 8,988),
where plain WGL explored 1-3 x 10^5:
reads are placed as soon as they are legal, indeterminate ops that change nothing, repeat an
equal one out of order, or come right before a write are not placed, and a new state must
still allow the next pending returns (and, for a log, every observed offset).

A time budget (and a memo-size budget) make the verdict "unknown" rather than a guess, and so
does a history in which no op observed the state (writes only: every order is legal). On
failure the counterexample is the smallest failing prefix of the history: the op that no
order allows, the ops concurrent with it, and the state a valid order reached before it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import compress
from typing import Any

from kafkaesque_harness.checkers.core import UNKNOWN, Anomaly, Result
from kafkaesque_harness.checkers.models import MODELS, UNKNOWN_OUTPUT, Call, Model
from kafkaesque_harness.checkers.reasons import REASONS, say
from kafkaesque_harness.history import FAIL, INFO, NEMESIS, OK, Op, pair_ops

NEVER = 1 << 60  # the return position of an indeterminate op


REACH_TARGETS = 3  # how many upcoming returns a new state is tested against (cost vs pruning)


class Budget(Exception):
    """The time or memory budget ran out: the verdict is unknown. The message says which."""


def _search_steps(calls: Sequence[Call], model: Model, max_cache: int):
    """One partition's search as a generator: it yields every 1,024 steps (so several partitions can
    be raced, and a deadline checked, without restarting anyone) and returns (legal, final state).

    Wing & Gong / Lowe over a doubly linked list of call and return entries, memoizing (linearized
    set as an int bitset, model state), plus prunings that keep the verdict exact:
      - a determinate op that never changes the state (a read, per the model's `preserves_state`)
        is linearized as soon as it is legal, with no alternative tried: if any order works, one
        that places it first works too, since it changes nothing and only frees later ops;
      - a new state must pass the model's `invariant` of the partition (a log keeps every offset
        that some op observed for the value observed there);
      - a new state must still allow the next few pending determinate ops (the model's `reach`):
        until the first pending op that may overwrite the state (a put), only ops that extend it
        can come before them, and a kv get of "ab" cannot follow a state "ac";
      - an indeterminate op whose effect leaves the state as it is is skipped: an order that uses
        it there works without it;
      - indeterminate ops with the same input are interchangeable, so they are linearized in
        invocation order only;
      - an op that overwrites the state whatever it was (a write, a put) is not placed right after
        an indeterminate op: the order without that indeterminate op does as well, with less used.
    The last three need the model's promise that an indeterminate op is always legal
    (`indeterminate_always_legal`): then the search also stops when every determinate op is
    placed, as the remaining indeterminate ones may take effect after everything, or never.
    """
    n = len(calls)
    init = model.init()
    if n == 0:
        return True, init
    optional = model.indeterminate_always_legal
    # The entry list: positions 0..m-1 in time order (calls before returns at equal times), the
    # head at m; m + 1 is a dead end where a node that fails at once sends its scan. Entry e < n is
    # call e, entry n + i the return of call i. cid: the call's id at a call position, -1
    # elsewhere; rid: the op's id at any position; match: a call position's return position.
    m = 2 * n
    times = [c.call * 2 for c in calls] + [c.ret * 2 + 1 for c in calls]
    order = sorted(range(m), key=times.__getitem__)  # int keys: no tuple comparisons
    head = m
    nxt = list(range(1, m + 2))
    nxt[m - 1] = -1
    nxt[head] = 0
    prv = list(range(-1, m))
    prv[0] = head
    prv[head] = -1
    cid = [e if e < n else -1 for e in order] + [-1, -1]
    rid = [e if e < n else e - n for e in order]
    pos = [0] * m
    for p, e in enumerate(order):
        pos[e] = p
    match = [0] * m
    for i in range(n):
        match[pos[i]] = pos[n + i]
    step = model.step
    inputs = model.search_inputs(calls)
    outputs = [c.output for c in calls]
    unknown = [out is UNKNOWN_OUTPUT for out in outputs]
    # (Set-up is most of a small history's check: what is not needed is not built. Each change here
    # was timed in CPU time against the one before it; a comprehension or a plain loop beats map
    # and dict tricks on lists this short, so those stay.)
    optional_op = unknown if optional else [False] * n
    observer, extends, reach, overwrites, transitions = _traits(model, calls, unknown)
    tests_reach = reach.count(None) != n
    invariant = None if type(model).invariant is Model.invariant else \
        model.invariant([(inp, out) for inp, out, u in zip(inputs, outputs, unknown, strict=True) if not u])
    # gate[i]: the indeterminate op with input equal to i's invoked just before it (-1: none)
    gate = [-1] * n
    if optional and True in unknown:
        last: dict[Any, int] = {}
        # the indeterminate calls in invocation order (as the entry order has them: time, then id)
        for i in sorted(compress(range(n), unknown), key=times.__getitem__):
            try:
                gate[i] = last.get(inputs[i], -1)
                last[inputs[i]] = i
            except TypeError:  # an unhashable input: no class, no gate
                pass
    determinate_left = n - sum(optional_op)
    if determinate_left == 0:
        return True, init
    state = init
    linearized = 0
    cache: set = set()
    # per placed call: (its call entry, the node's state, forced, the node's targets)
    stack: list[tuple[int, Any, bool, tuple]] = []
    targets: tuple = ()  # (op, reach test) of the next pending returns a new state must allow
    steps = 0
    arrived = True  # at a new node: look for a forced op first
    p = nxt[head]
    while True:
        descend = False  # set with p (the call to place), new_state and forced
        if arrived:
            arrived = False
            q = nxt[head]
            while (i := cid[q]) >= 0:
                if observer[i]:
                    tr = transitions[i]
                    t = tr.get(state)
                    if t is None:
                        t = tr[state] = step(state, inputs[i], outputs[i])
                    if t[0]:
                        key = (linearized | (1 << i), state)
                        if key in cache:
                            q = -2  # this node was judged already: it fails
                            break
                        p, new_state, forced, descend = q, state, True, True
                        break
                q = nxt[q]
            if descend:
                pass
            elif q == -2:
                p = m + 1
            else:
                p = nxt[head]
                # the pending returns up to the first call that may overwrite the state
                if tests_reach:
                    targets = _reach_targets(nxt[head], nxt, cid, rid, extends, unknown, reach)
        if not descend:
            # scan the calls before the first pending return
            after_optional = optional_op[cid[stack[-1][0]]] if stack else False
            while (i := cid[p]) >= 0:
                steps += 1
                if steps & 0x3FF == 0:
                    if len(cache) > max_cache:
                        raise Budget(f"memo limit of {max_cache:,} states")
                    yield
                if after_optional and overwrites[i]:
                    p = nxt[p]  # the indeterminate op just placed would be wasted: the node before it tries this
                    continue
                tr = transitions[i]
                t = tr.get(state)
                if t is None:
                    t = tr[state] = step(state, inputs[i], outputs[i])
                if t[0]:
                    new_state = t[1]
                    if optional_op[i] and (new_state is state or new_state == state
                                           or (gate[i] >= 0 and not (linearized >> gate[i]) & 1)):
                        p = nxt[p]
                        continue
                    if invariant is not None and not invariant(new_state):
                        p = nxt[p]
                        continue
                    for o, test in targets:
                        if o != i and not test(new_state):
                            break
                    else:
                        key = (linearized | (1 << i), new_state)
                        if key not in cache:
                            forced, descend = False, True
                            break
                p = nxt[p]
        if descend:
            # place call p: remember the node, lift the call and its return out of the list
            cache.add(key)
            stack.append((p, state, forced, targets))
            state, linearized = new_state, key[0]
            r = match[p]
            a, b = prv[p], nxt[p]
            nxt[a] = b
            prv[b] = a
            a, b = prv[r], nxt[r]
            nxt[a] = b
            if b != -1:
                prv[b] = a
            if not optional_op[i]:
                determinate_left -= 1
                if determinate_left == 0:
                    return True, state
            arrived = True
            continue
        # a pending return (or a failed node): undo the last choice; a forced one fails its node too
        while True:
            if not stack:
                return False, None
            p, state, forced, targets = stack.pop()
            i = cid[p]
            linearized &= ~(1 << i)
            if not optional_op[i]:
                determinate_left += 1
            r = match[p]
            nxt[prv[r]] = r
            if (b := nxt[r]) != -1:
                prv[b] = r
            nxt[prv[p]] = p
            prv[nxt[p]] = p
            if not forced:
                break
        p = nxt[p]


def _traits(model: Model, calls: Sequence[Call], unknown: list[bool]) -> tuple[list, ...]:
    """Per call, what the model says of it: observer (a determinate op that never changes the
    state), extends, reach test, overwrites, and its transition memo (state -> step's result).
    Calls with equal (input, output) share one answer and one memo."""
    by_kind: dict[Any, tuple] = {}
    observer, extends, reach, overwrites, transitions = [], [], [], [], []
    for c, u in zip(calls, unknown, strict=True):
        try:
            kind = by_kind.get((c.input, c.output))
        except TypeError:  # unhashable: this call's own answer
            kind = None
        if kind is None:
            kind = (not u and model.preserves_state(c.input, c.output), model.extends_state(c.input, c.output),
                    None if u else model.reach(c.input, c.output), model.overwrites(c.input, c.output), {})
            try:
                by_kind[(c.input, c.output)] = kind
            except TypeError:
                pass
        observer.append(kind[0])
        extends.append(kind[1])
        reach.append(kind[2])
        overwrites.append(kind[3])
        transitions.append(kind[4])
    return observer, extends, reach, overwrites, transitions


def _reach_targets(w: int, nxt: list[int], cid: list[int], rid: list[int], extends: list[bool],
                   unknown: list[bool], reach: list) -> tuple:
    """(op, reach test) of the first pending returns, walking the entry list from `w` and stopping at
    the first pending call that may overwrite the state: until then, only ops that extend the
    state can take effect before those returns."""
    targets = []
    while w != -1:
        if (i := cid[w]) >= 0:
            if not extends[i]:
                break
        else:
            o = rid[w]
            if unknown[o]:
                break  # only indeterminate returns remain
            if (test := reach[o]) is not None:
                targets.append((o, test))
                if len(targets) == REACH_TARGETS:
                    break
        w = nxt[w]
    return tuple(targets)


def _search(calls: Sequence[Call], model: Model, deadline: float, max_cache: int) -> tuple[bool, Any]:
    """One partition: True (and a final state) if some order of `calls` is legal, else False."""
    search = _search_steps(calls, model, max_cache)
    try:
        while True:
            next(search)
            if time.monotonic() > deadline:
                raise Budget("time")
    except StopIteration as done:
        return done.value


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
    keys = [c.key for c in calls]
    if keys and keys.count(keys[0]) == len(keys):
        parts: dict[Any, Sequence[Call]] = {keys[0]: calls}  # one partition (a register's history)
    else:
        parts = {}
        for c in calls:
            parts.setdefault(c.key, []).append(c)
    verdicts: dict[Any, Any] = {}
    # Race the partitions in rounds of a growing number of steps (as Porcupine runs them side by
    # side): an illegal partition is usually refuted quickly, a legal one may take long to confirm.
    pending = {key: _search_steps(part, model, max_cache) for key, part in parts.items()}
    slices = 2  # per partition and round, of 1,024 steps each
    while pending:
        for key in list(pending):
            search = pending[key]
            try:
                for _ in range(slices):
                    next(search)
                    if time.monotonic() > deadline:
                        raise Budget("time")
                continue
            except StopIteration as done:
                ok = done.value[0]
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
        slices *= 2
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
