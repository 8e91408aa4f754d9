"""Elle-style checking of list-append histories: infer dependencies, find cycles, explain them (issue 5).

As in Elle (Kingsbury & Alvaro), kept in separate steps:
1. inference: each key's version order is its longest read (every read must be a prefix of
   it: otherwise "incompatible-order"); who appended each element; ww edges between
   consecutive appends, wr from an element's appender to each read ending at it, rw from a
   reader to the appender of the first element it did not see; plus process and realtime
   edges (realtime through a frontier, never all pairs).
2. graph: networkx; strongly connected components; in each, the shortest cycle of each
   class: G0 (ww), G1c (ww+wr), G-single (exactly one rw), G2-item (two or more rw), and
   their -process / -realtime variants when the cycle needs those edges.
3. explanation: each cycle step by step in words, with the transactions' ops.
Non-cyclic anomalies: G1a (aborted read), G1b (intermediate read), internal inconsistency,
incompatible-order, duplicate-elements. A cycle-search budget ends the search with
"cycle-search-timeout"; a non-trivial SCC still proves a cycle exists, which violates a model
that forbids every cycle class (serializable, repeatable read, strict serializable) and leaves
the others (snapshot isolation, read committed) unknown. A history in which no committed
transaction read anything is unknown: no dependency can be inferred from appends alone.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import networkx as nx

from checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from checkers.reasons import say
from history import FAIL, INFO, NEMESIS, OK, Op, pair_ops

WW, WR, RW, PROCESS, REALTIME = "ww", "wr", "rw", "process", "realtime"
KIND_BIT = {WW: 1, WR: 2, RW: 4, PROCESS: 8, REALTIME: 16}

# Which anomalies each consistency model forbids (Adya / Elle), smallest model first.
FORBIDDEN = {
    "read-committed": {"G0", "G1a", "G1b", "G1c"},
    "repeatable-read": {"G0", "G1a", "G1b", "G1c", "G-single", "G2-item"},
    "snapshot-isolation": {"G0", "G1a", "G1b", "G1c", "G-single"},
    "serializable": {"G0", "G1a", "G1b", "G1c", "G-single", "G2-item"},
    "strict-serializable": {"G0", "G1a", "G1b", "G1c", "G-single", "G2-item", "G0-realtime", "G1c-realtime",
                            "G-single-realtime", "G2-item-realtime", "G0-process", "G1c-process",
                            "G-single-process", "G2-item-process"},
}
ALWAYS_BAD = {"internal", "incompatible-order", "duplicate-elements"}
DATA_CYCLES = ("G0", "G1c", "G-single", "G2-item")
NOTHING_READ = say("nothing-read-by-transactions")


def _forbids_every_cycle(model: str, edge_kinds: set[str]) -> bool:
    """Whether `model` forbids every cycle the graph could hold, whatever its class: then a cycle
    known to exist (a strongly connected component whose search ran out of time) violates it."""
    needed = set(DATA_CYCLES)
    for kind in edge_kinds & {PROCESS, REALTIME}:
        needed |= {f"{c}-{kind}" for c in DATA_CYCLES}
    return needed <= FORBIDDEN[model]


class Txn:
    __slots__ = ("id", "inv", "comp", "type", "mops")

    def __init__(self, id_: int, inv: Op, comp: Op | None):
        self.id, self.inv, self.comp = id_, inv, comp
        self.type = comp.type if comp is not None else INFO
        self.mops = (comp.value if comp is not None and comp.type == OK else inv.value) or []

    def describe(self) -> str:
        parts = []
        for f, k, v in self.mops:
            parts.append(f"append {v} to {k}" if f == "append" else f"read {k} = {v}")
        return f"T{self.id} (op #{self.inv.index}, process {self.inv.process}: {', '.join(parts)})"


def _txns(history: Sequence[Op]) -> list[Txn]:
    out = []
    for inv, comp in pair_ops(history):
        if inv.process == NEMESIS or inv.f != "txn":
            continue
        out.append(Txn(len(out), inv, comp))
    return out


def check_list_append(history: Sequence[Op], consistency_models: Sequence[str] | None = None,
                      cycle_budget_s: float = 30.0) -> Result:
    models = list(consistency_models or ["strict-serializable"])
    for m in models:
        if m not in FORBIDDEN:
            raise ValueError(f"unknown consistency model {m!r}; valid: {', '.join(FORBIDDEN)}")
    txns = _txns(history)
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)

    # --- 1. inference ---------------------------------------------------------------------------
    appender: dict[tuple[Any, Any], Txn] = {}
    appends_by_txn_key: dict[tuple[int, Any], list[Any]] = defaultdict(list)
    for t in txns:
        if t.type == FAIL and t.comp is not None:
            mops = t.inv.value or []
        else:
            mops = t.mops
        for f, k, v in mops:
            if f == "append":
                appender[(k, v)] = t
                appends_by_txn_key[(t.id, k)].append(v)
    reads: list[tuple[Txn, Any, list, list]] = []  # (reader, key, list read, the part others appended)
    for t in txns:
        if t.type != OK:
            continue
        own: dict[Any, list] = defaultdict(list)
        for f, k, v in t.mops:
            if f == "append":
                own[k].append(v)
            else:
                lst = list(v or [])
                if len(set(lst)) != len(lst):
                    found["duplicate-elements"].append({"summary": f"{t.describe()} read duplicates in key {k}: {lst}",
                                                        "ops": [t.comp.to_dict()]})
                if own[k] and lst[-len(own[k]):] != own[k]:
                    found["internal"].append({"summary": f"{t.describe()} read {k} = {lst} after appending "
                                                         f"{own[k]} itself", "ops": [t.comp.to_dict()]})
                external = lst[: len(lst) - len(own[k])] if own[k] and lst[-len(own[k]):] == own[k] else lst
                reads.append((t, k, lst, external))
    orders: dict[Any, list] = {}
    for t, k, lst, _ in reads:
        cur = orders.get(k, [])
        if len(lst) > len(cur):
            cur, lst = lst, cur
        if cur[: len(lst)] != lst:
            found["incompatible-order"].append({"summary": f"key {k} was read as {cur} and as {lst}: neither is a "
                                                           "prefix of the other", "ops": [t.comp.to_dict()]})
        orders[k] = cur
    failed_appends: dict[Any, set] = defaultdict(set)
    for (k, v), w in appender.items():
        if w.type == FAIL:
            failed_appends[k].add(v)
    for t, k, _, lst in reads:
        for v in failed_appends.get(k, set()).intersection(lst):
            w = appender[(k, v)]
            found["G1a"].append({"summary": f"{t.describe()} read {v} of key {k}, appended by the failed "
                                            f"{w.describe()}", "ops": [t.comp.to_dict(), w.inv.to_dict()]})
        if lst:
            w = appender.get((k, lst[-1]))
            if w is not None and w is not t:
                mine = appends_by_txn_key[(w.id, k)]
                if mine and lst[-1] != mine[-1]:
                    found["G1b"].append({"summary": f"{t.describe()} read key {k} ending at {lst[-1]}, an "
                                                    f"intermediate append of {w.describe()}",
                                         "ops": [t.comp.to_dict(), w.inv.to_dict()]})

    # --- 2. the dependency graph ---------------------------------------------------------------
    committed = [t for t in txns if t.type in (OK, INFO)]
    forbidden = set().union(*(FORBIDDEN[m] for m in models))
    n = len(txns) + 1
    # (a, b) as one int -> its kinds as bits: a history has millions of edges and a handful of cycles,
    # so the first pass keeps no explanation; the edges of a cyclic component get theirs from a second
    # pass over the same inference, restricted to that component (below).
    edges: dict[int, int] = {}
    succ: dict[int, list[int]] = defaultdict(list)

    def edge(a: Txn | None, b: Txn | None, kind: str, *why: Any) -> None:
        if a is None or b is None or a is b or a.type == FAIL or b.type == FAIL:
            return
        key = a.id * n + b.id
        bits = edges.get(key)
        if bits is None:
            edges[key] = KIND_BIT[kind]
            succ[a.id].append(b.id)
        else:
            edges[key] = bits | KIND_BIT[kind]

    _dependency_edges(orders, appender, reads, committed, forbidden, edge)

    # --- 3. cycles -------------------------------------------------------------------------------
    deadline = time.monotonic() + cycle_budget_s
    id_to_txn = {t.id: t for t in txns}
    timed_out = False
    sccs = _nontrivial_sccs(succ)
    explained: dict[tuple[int, int], dict[str, tuple]] = {}  # the cyclic components' edges: {kind: why}
    if sccs:
        members = set().union(*sccs)

        def explain(a: Txn | None, b: Txn | None, kind: str, *why: Any) -> None:
            if a is None or b is None or a.id not in members or b.id not in members or a is b \
                    or a.type == FAIL or b.type == FAIL:
                return
            explained.setdefault((a.id, b.id), {}).setdefault(kind, why)  # the first reason, as the first pass

        _dependency_edges(orders, appender, reads, committed, forbidden, explain)
    for scc in sccs:
        # networkx only for the (usually absent) cyclic parts: millions of edges stay plain ints.
        sub = nx.DiGraph()
        sub.add_edges_from((a, b, {"kinds": explained[(a, b)]}) for a in scc for b in succ[a] if b in scc)
        try:
            for name, cycle in _classify_cycles(sub, deadline):
                found[name].append(_explain(cycle, sub, id_to_txn))
        except TimeoutError:
            timed_out = True
            found["cycle-search-timeout"].append({"summary": f"the cycle search ran out of its {cycle_budget_s:.0f} s "
                                                             f"budget in a strongly connected component of "
                                                             f"{len(scc)} transactions: a cycle exists"})
            break

    anomaly_types = sorted(found)
    bad = set().union(*(FORBIDDEN[m] for m in models)) | ALWAYS_BAD
    violated = [a for a in anomaly_types if a in bad]
    reasons = []
    if timed_out:
        # A cycle exists, but its class is unknown: it proves a violation only of a model that
        # forbids every class the graph's edge kinds allow; otherwise the verdict is unknown.
        seen_bits = 0
        for bits in edges.values():
            seen_bits |= bits
        kinds = {k for k, bit in KIND_BIT.items() if seen_bits & bit}
        if any(_forbids_every_cycle(m, kinds) for m in models):
            violated.append("cycle-search-timeout")
        else:
            reasons.append(say("cycle-search-out-of-budget", seconds=cycle_budget_s, models=", ".join(models)))
    if not any(t.type == OK and any(f != "append" for f, *_ in t.mops) for t in txns):
        reasons.append(NOTHING_READ)
    valid: Any = False if violated else UNKNOWN if reasons else True
    anomalies = [Anomaly(a, len(found[a]), found[a][:MAX_EXAMPLES], _EXPLAIN.get(a, "")) for a in anomaly_types]
    not_models = sorted(m for m in FORBIDDEN if FORBIDDEN[m] & set(anomaly_types))
    return Result(checker="elle-list-append", valid=valid, anomalies=anomalies,
                  stats={"transactions": len(txns), "edges": len(edges), "models": models,
                         "violated": violated, "not": not_models},
                  details={"cycles_text": [ex["summary"] for a in anomaly_types for ex in found[a][:2]]},
                  unknown_reasons=reasons)



def _dependency_edges(orders: dict[Any, list], appender: dict[tuple[Any, Any], Txn],
                      reads: list[tuple[Txn, Any, list, list]], committed: list[Txn], forbidden: set[str],
                      edge) -> None:
    """Every dependency edge the inference gives, handed to `edge(a, b, kind, why-format, *args)`."""
    for k, order in orders.items():
        for x, y in zip(order, order[1:], strict=False):
            edge(appender.get((k, x)), appender.get((k, y)), WW, "appended {} to {} before {} was appended", x, k, y)
    # Appends no read ever saw came after everything any read saw (a read containing a later
    # element would contain them too): ww from the last observed appender, rw from full reads.
    unseen: dict[Any, list[Txn]] = defaultdict(list)
    order_sets = {k: set(order) for k, order in orders.items()}
    for (k, v), w in appender.items():
        if w.type == OK and v not in order_sets.get(k, ()):
            unseen[k].append(w)
            if orders.get(k):
                edge(appender.get((k, orders[k][-1])), w, WW,
                     "appended {} to {}; {}, never read, came later", orders[k][-1], k, v)
    for t, k, lst, external in reads:
        if external:
            edge(appender.get((k, external[-1])), t, WR, "appended {} to {}, which the reader saw last",
                 external[-1], k)
        order = orders.get(k, [])
        if len(lst) == len(order):
            for w in unseen[k]:
                edge(t, w, RW, "read {} = {}, which does not hold the later append by the other", k, lst)
        elif len(lst) < len(order):
            edge(t, appender.get((k, order[len(lst)])), RW, "read {} = {} without {}, which the other appended",
                 k, lst, order[len(lst)])
    # Process and real-time order only matter to the models that forbid their cycles (as in
    # Elle): without them, cycles through them are no anomaly and would only cost search time.
    if any(a.endswith("-process") for a in forbidden):
        by_process: dict[Any, list[Txn]] = defaultdict(list)
        for t in committed:
            by_process[t.inv.process].append(t)
        for ts in by_process.values():
            for a, b in zip(ts, ts[1:], strict=False):
                edge(a, b, PROCESS, "came first in the same process")
    if any(a.endswith("-realtime") for a in forbidden):
        _realtime_edges(committed, edge)


def _nontrivial_sccs(succ: dict[int, list[int]]) -> list[set[int]]:
    """Strongly connected components with two or more nodes (iterative Tarjan: no recursion limit)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[set[int]] = []
    counter = 0
    for root in list(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = succ.get(node, ())
            recurse = False
            while i < len(children):
                child = children[i]
                i += 1
                if child not in index:
                    work.append((node, i))
                    work.append((child, 0))
                    recurse = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if recurse:
                continue
            if work and low[node] < low[work[-1][0]]:
                low[work[-1][0]] = low[node]
            if low[node] == index[node]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _realtime_edges(txns: list[Txn], edge) -> None:
    """T1 completed before T2 was invoked. Through a frontier of the latest completions, as Elle
    does, so the edge count stays near-linear."""
    events = []
    for t in txns:
        events.append((t.inv.time, 1, t))
        if t.type == OK:
            events.append((t.comp.time, 0, t))
    # At equal times an invocation sorts first: "before" is strict (Elle's anchors with all
    # :time 0 have no real-time order at all).
    events.sort(key=lambda e: (e[0], -e[1]))
    frontier: list[Txn] = []
    for _, kind, t in events:
        if kind == 1:
            for a in frontier:
                edge(a, t, REALTIME, "completed before the other began")
        else:
            frontier = [a for a in frontier if not a.comp.time < t.inv.time] + [t]


def _kinds(sub, a, b) -> set[str]:
    return set(sub[a][b]["kinds"])


def _view(sub, allowed: set[str]):
    return nx.subgraph_view(sub, filter_edge=lambda a, b: bool(_kinds(sub, a, b) & allowed))


def _cycle_in(view) -> list[int] | None:
    try:
        edges = nx.find_cycle(view)
    except nx.NetworkXNoCycle:
        return None
    return [a for a, _ in edges] + [edges[0][0]]


def _rw_count(sub, cyc: list[int], extra: set[str] = frozenset()) -> int:
    """Anti-dependencies the cycle needs: steps with no ww/wr (or allowed extra) edge."""
    return sum(1 for x, y in zip(cyc, cyc[1:], strict=False) if not _kinds(sub, x, y) & ({WW, WR} | extra))


def _classify_cycles(sub, deadline: float):
    """Yield (anomaly name, cycle) for the anomaly classes present in this SCC. Acyclicity tests
    and topological order keep this near-linear; paths are shortest where a BFS is affordable."""
    g0 = _cycle_in(_view(sub, {WW}))
    if g0:
        yield "G0", g0
    wwwr = _view(sub, {WW, WR})
    g1c = None if g0 else _cycle_in(wwwr)
    if g1c:
        yield "G1c", g1c
    single = None
    if g0 is None and g1c is None:
        order = {n: i for i, n in enumerate(nx.topological_sort(wwwr))}
        for a, b in sub.edges:
            if time.monotonic() > deadline:
                raise TimeoutError
            if RW in _kinds(sub, a, b) and order[b] < order[a]:
                try:
                    path = nx.shortest_path(wwwr, b, a)
                except nx.NetworkXNoPath:
                    continue
                if single is None or len(path) + 1 < len(single):
                    single = [a] + path
                    if len(single) <= 3:
                        break
    if single:
        yield "G-single", single
    data = _view(sub, {WW, WR, RW})
    g2 = None if single else _cycle_in(data)
    if g2:
        yield ("G-single" if _rw_count(sub, g2) == 1 else "G2-item"), g2
    if g0 or g1c or single or g2:
        return
    # No cycle on data edges alone: cycles closed by process or real-time order.
    for extra, suffix in ((PROCESS, "-process"), (REALTIME, "-realtime")):
        if time.monotonic() > deadline:
            raise TimeoutError
        cyc = _cycle_in(_view(sub, {WW, WR, RW, extra}))
        if cyc is None:
            continue
        rws = _rw_count(sub, cyc, {extra})
        base = "G1c" if rws == 0 else "G-single" if rws == 1 else "G2-item"
        yield base + suffix, cyc


def _explain(cycle: list[int], sub, txns: dict[int, Txn]) -> dict[str, Any]:
    words = []
    for a, b in zip(cycle, cycle[1:], strict=False):
        kinds = sub[a][b]["kinds"]
        kind = next(k for k in (WW, WR, RW, PROCESS, REALTIME) if k in kinds)
        template, *args = kinds[kind]
        words.append(f"T{a} {kind} T{b}: T{a} {template.format(*args)}")
    members = [txns[t] for t in cycle[:-1]]
    summary = ("; ".join(words) + f"; so T{cycle[0]} precedes itself. Transactions: "
               + " ".join(t.describe() for t in members))
    return {"summary": summary, "cycle": cycle, "steps": words,
            "ops": [(t.comp or t.inv).to_dict() for t in members][:MAX_EXAMPLES]}


_EXPLAIN = {
    "G0": "A cycle of write-write dependencies (dirty writes).",
    "G1a": "A transaction read an element appended by a transaction that failed (aborted read).",
    "G1b": "A transaction read an intermediate state of another transaction (intermediate read).",
    "G1c": "A cycle of write-write and write-read dependencies (circular information flow).",
    "G-single": "A dependency cycle with exactly one anti-dependency (read skew).",
    "G2-item": "A dependency cycle with two or more anti-dependencies (write skew).",
    "internal": "A transaction did not read its own earlier append.",
    "incompatible-order": "Two reads of a key disagree on its order: neither is a prefix of the other.",
    "duplicate-elements": "A read returned the same element twice.",
    "cycle-search-timeout": "The cycle search ran out of budget; a strongly connected component proves a cycle.",
}
for _base in ("G0", "G1c", "G-single", "G2-item"):
    for _suffix, _what in (("-process", "process order"), ("-realtime", "real-time order")):
        _EXPLAIN[_base + _suffix] = _EXPLAIN[_base].rstrip(".") + f", closed by {_what}."


class ElleListAppendChecker:
    name = "elle-list-append"

    def __init__(self, consistency_models: Sequence[str] | None = None, cycle_budget_s: float = 30.0):
        self.models, self.budget = consistency_models, cycle_budget_s

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_list_append(history, self.models, self.budget)


__all__ = ["ElleListAppendChecker", "FORBIDDEN", "UNKNOWN", "check_list_append"]


def queue_to_list_append(history: Sequence[Op]) -> list[Op]:
    """A queue history as list-append transactions, so Elle can judge it (issue 5).

    Each partition log is one list: an acknowledged or indeterminate send appends its value
    to its key; a consumer's reads are prefixes (its consumer starts at the log start and
    moves forward), so each poll becomes a read of everything that process has read of the
    key so far; a final read is a read of the whole prefix it drained. Sends that failed
    append nothing. A poll continues its consumer's prefix unless it went back or skipped an
    offset (the queue checker's rule, checkers/queue.py proven_between: an offset is skipped
    only when some acknowledgement or read proves a record is there; a jump over offsets
    nothing proves, a transaction marker's, continues the prefix).
    """
    from checkers.queue import QUEUE_VALUES, poll_items, proven_between

    pairs = pair_ops(history)
    proven = _proven_offsets(pairs)
    out: list[Op] = []
    seen: dict[tuple[Any, int], list] = defaultdict(list)
    last: dict[tuple[Any, int], int] = {}  # (process, key) -> the last offset its prefix holds
    for inv, comp in pairs:
        if inv.process == NEMESIS:
            continue
        t = comp.type if comp is not None else INFO
        if inv.f == "send":
            key, _, value = QUEUE_VALUES.written(inv)
            mops = [["append", key, value]]
            out.append(Op("invoke", "txn", inv.process, mops, time=inv.time, index=inv.index))
            if comp is not None:
                out.append(Op(t, "txn", inv.process, mops, time=comp.time, index=comp.index))
        elif inv.f in ("poll", "final-poll") and t == OK:
            # One read per key: a consumer's positions in different partitions move
            # independently, so a multi-partition poll is no snapshot (that would be write skew).
            for key, recs in poll_items(inv.f, comp.value):
                if inv.f == "final-poll":
                    mop = ["r", key, [v for _, v in recs]]
                else:
                    acc, at = seen[(inv.process, key)], last.get((inv.process, key), -1)
                    if recs:
                        first = int(recs[0][0])
                        if first <= at or proven_between(proven.get(key, ()), at, first):
                            acc.clear()  # not a continuation of this consumer's prefix: no prefix claim
                            last[(inv.process, key)] = -1  # a later read from the log start is one again
                            continue
                        last[(inv.process, key)] = int(recs[-1][0])
                    acc.extend(v for _, v in recs)
                    mop = ["r", key, list(acc)]
                out.append(Op("invoke", "txn", inv.process, [["r", key, None]], time=inv.time, index=inv.index))
                out.append(Op(OK, "txn", inv.process, [mop], time=comp.time, index=comp.index))
    return out


def _proven_offsets(pairs: Sequence[tuple[Op, Op | None]]) -> dict[int, list[int]]:
    """key -> the sorted offsets proven to hold a record: acknowledged sends' and every record read."""
    from checkers.queue import QUEUE_VALUES, poll_items

    out: dict[int, set[int]] = defaultdict(set)
    for inv, comp in pairs:
        if comp is None or comp.type != OK or inv.process == NEMESIS:
            continue
        if inv.f == "send":
            key, offset, _ = QUEUE_VALUES.written(comp)
            out[key].add(int(offset))
        elif inv.f in ("poll", "final-poll"):
            for key, recs in poll_items(inv.f, comp.value):
                out[key].update(int(o) for o, _ in recs)
    return {key: sorted(offsets) for key, offsets in out.items()}


class QueueElleChecker:
    """Elle on a queue history (requested with `kafkaesque run --elle`), serializable by default.

    It judges the order of each partition log (incompatible orders, duplicates, aborted and
    intermediate reads, dependency cycles); acknowledged-write loss is the queue checker's
    question, since without real time a lost append could always be serialized last."""

    name = "elle-queue"

    def __init__(self, consistency_models: Sequence[str] | None = None, cycle_budget_s: float = 60.0):
        self.models, self.budget = list(consistency_models or ["serializable"]), cycle_budget_s

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        r = check_list_append(queue_to_list_append(history), self.models, self.budget)
        r.checker = self.name
        return r
