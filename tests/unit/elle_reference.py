"""The list-append checker as it stood before issue 44 (checkers/elle.py at commit 9aebef9), kept
verbatim as the reference the differential test (test_elle_differential.py) holds the new checker to:
equal verdicts and equal anomaly sets on many random small histories. Not used by the product.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from itertools import compress, islice, repeat
from operator import add, and_, eq, ge, le, lt, mul, ne
from typing import Any

import networkx as nx

from kafkaesque_harness.checkers.core import MAX_EXAMPLES, UNKNOWN, Anomaly, Result
from kafkaesque_harness.checkers.graph import (
    PROCESS,
    REALTIME,
    RW,
    WR,
    WW,
    cycle_in,
    edge_kinds,
    kind_subgraph,
    realtime_edges,
    rw_count,
    sccs,
)
from kafkaesque_harness.checkers.reasons import say
from kafkaesque_harness.history import FAIL, INFO, NEMESIS, OK, Op, pair_ops

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
    """One transaction, made only when an anomaly needs its words: the checker itself works on
    parallel lists indexed by transaction id (a million objects cost more than the check)."""

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


class _Txns:
    """The transactions of a history as parallel lists indexed by id (invocation order), with
    the times and process order the graph needs."""

    def __init__(self) -> None:
        self.invs: list[Op] = []
        self.comps: list[Op | None] = []
        self.types: list[str] = []
        self.mops: list[list] = []
        self.ids: list[int] = []
        self.n = 0

    def txn(self, i: int) -> Txn:
        return Txn(i, self.invs[i], self.comps[i])

    def describe(self, i: int) -> str:
        return self.txn(i).describe()


class _Inference:
    """Step 1 in two passes over the transactions: who appended what, each key's version order,
    the reads, process order; then the reads against the finished orders. The non-cyclic
    anomalies land in `found` as they are seen, each kind in read order (as Elle lists them);
    the data and process edges as parallel lists of transaction ids (`src`, `dst`), each kind one
    run (`segments`), with `nobody` (= the number of transactions) for an element no transaction
    appended. Whatever can be done a list at a time is (comprehensions, map, compress, at C
    speed): a Python statement per transaction costs about a second per million."""

    def __init__(self, history: Sequence[Op], found: dict[str, list[dict[str, Any]]], with_process: bool):
        self.txns = txns = _Txns()
        self.found = found
        pairs = [pair for pair in pair_ops(history) if pair[0].f == "txn" and pair[0].process != NEMESIS]
        txns.invs = invs = [inv for inv, _ in pairs]
        txns.comps = comps = [comp for _, comp in pairs]
        txns.types = types = [INFO if comp is None else comp.type for comp in comps]
        txns.mops = [(comp.value if type_ == OK else inv.value) or []
                     for (inv, comp), type_ in zip(pairs, types, strict=True)]
        txns.n = n = len(pairs)
        # One int object per transaction id, shared by every list that holds ids (an int above 256
        # is 28 bytes: each list making its own would cost 28 MB per million).
        txns.ids = ids = list(range(n))
        del pairs
        self._appends_and_reads()
        self._unseen_and_failed_appends()
        src, dst = self._write_edges()
        ww_end = len(src)
        wr_src, wr_dst, rw_src, rw_dst = self._read_edges()
        src += wr_src
        dst += wr_dst
        wr_end = len(src)
        src += rw_src
        dst += rw_dst
        rw_end = len(src)
        if with_process:
            last_of_process: dict[Any, int] = {}
            for t, inv, type_ in zip(ids, invs, types, strict=True):
                if type_ == OK or type_ == INFO:
                    prev = last_of_process.get(inv.process)
                    if prev is not None:
                        src.append(prev)
                        dst.append(t)
                    last_of_process[inv.process] = t
        self.segments = [(WW, 0, ww_end), (WR, ww_end, wr_end), (RW, wr_end, rw_end), (PROCESS, rw_end, len(src))]
        self.src, self.dst = src, dst

    def _appends_and_reads(self) -> None:
        """The first pass: appenders, each key's longest read, and the reads; incompatible orders,
        duplicates and internal inconsistencies as they are read."""
        txns, found = self.txns, self.found
        comps = txns.comps
        # key -> value -> the (last) transaction that appended it; per-key dicts, not (key, value)
        # tuples: a million appends would cost a million tuples
        self.appender = appender = {}
        self.first_appender = first_appender = {}  # (key, value) appended twice -> its first appender
        self.repeat_appenders = repeat_appenders = set()  # appended to one key twice: the only source of G1b
        self.reads = reads = []  # (reader, key, list read, the part others appended)
        self.orders = orders = {}  # key -> its longest read, which every other read must prefix
        orders_without_duplicates: set = set()
        for t, mops, type_ in zip(txns.ids, txns.mops, txns.types, strict=True):
            own: dict[Any, list] | None = None  # this transaction's appends so far, by key
            for f, k, v in mops:
                if f == "append":
                    by_value = appender.get(k)
                    if by_value is None:
                        appender[k] = {v: t}
                    else:
                        if v in by_value:
                            first_appender.setdefault((k, v), by_value[v])
                        by_value[v] = t
                    if own is None:
                        own = {k: [v]}
                    elif k in own:
                        own[k].append(v)
                        repeat_appenders.add(t)
                    else:
                        own[k] = [v]
                    continue
                if type_ != OK:
                    continue
                lst = v if type(v) is list else list(v or ())  # never changed: no copy needed
                cur = orders.get(k)
                if cur is None:
                    orders[k] = cur = lst
                    agrees = True
                elif len(lst) > len(cur):
                    agrees = lst[: len(cur)] == cur
                    if not agrees:
                        found["incompatible-order"].append({"summary": f"key {k} was read as {lst} and as "
                                                                       f"{cur}: neither is a prefix of the other",
                                                            "ops": [comps[t].to_dict()]})
                    orders[k] = cur = lst
                else:
                    # most reads see the whole current order: compare without slicing a copy
                    agrees = lst == cur if len(lst) == len(cur) else cur[: len(lst)] == lst
                    if not agrees:
                        found["incompatible-order"].append({"summary": f"key {k} was read as {cur} and as "
                                                                       f"{lst}: neither is a prefix of the other",
                                                            "ops": [comps[t].to_dict()]})
                # A prefix of an order without duplicates has none: most reads need no set.
                if len(lst) > 1 and (cur is lst or not agrees or k not in orders_without_duplicates):
                    if len(set(lst)) != len(lst):
                        found["duplicate-elements"].append({"summary": f"{txns.describe(t)} read duplicates in "
                                                                       f"key {k}: {lst}", "ops": [comps[t].to_dict()]})
                        if cur is lst:
                            orders_without_duplicates.discard(k)
                    elif cur is lst:
                        orders_without_duplicates.add(k)
                elif cur is lst:
                    orders_without_duplicates.add(k)
                mine = own.get(k) if own is not None else None
                external = lst
                if mine:
                    if lst[-len(mine):] != mine:
                        found["internal"].append({"summary": f"{txns.describe(t)} read {k} = {lst} after "
                                                             f"appending {mine} itself", "ops": [comps[t].to_dict()]})
                    else:
                        external = lst[: len(lst) - len(mine)]
                reads.append((t, k, lst, external))

    def _unseen_and_failed_appends(self) -> None:
        """Appends no read ever saw came after everything any read saw (a read containing a later
        element would contain them too): `unseen`, listed in the order they were first appended.
        And each key's elements whose (last) appender failed."""
        txns, appender, orders = self.txns, self.appender, self.orders
        types, all_mops = txns.types, txns.mops
        unseen_items = []
        for k, by_value in appender.items():
            order = orders.get(k)
            # the set difference at C speed; its order does not matter, the sort below decides
            for v in (by_value.keys() - order if order else by_value.keys()):
                w = by_value[v]
                if types[w] == OK:
                    first = self.first_appender.get((k, v), w)
                    unseen_items.append((first, _append_position(all_mops[first], k, v), k, v, w))
        unseen_items.sort(key=lambda item: (item[0], item[1]))
        self.unseen: list[tuple[Any, Any, int]] = [(k, v, w) for _, _, k, v, w in unseen_items]
        self.unseen_by_key: dict[Any, list[int]] = defaultdict(list)
        for k, _, w in self.unseen:
            self.unseen_by_key[k].append(w)
        # from the failed transactions' own appends: there are few, and all appends are many
        self.failed_appends = failed_appends = {}
        for w in compress(txns.ids, map(eq, types, repeat(FAIL))):
            for f, k, v in all_mops[w]:
                if f == "append" and appender[k][v] == w:
                    failed_appends.setdefault(k, set()).add(v)

    def _write_edges(self) -> tuple[list[int], list[int]]:
        """ww: between consecutive elements of each order, and from its last to each unseen append."""
        n, appender = self.txns.n, self.appender
        src: list[int] = []
        dst: list[int] = []
        self.order_ids = order_ids = {}  # key -> the appenders of its version order, element by element
        nobody: dict[Any, int] = {}
        for k, order in self.orders.items():
            order_ids[k] = ids = list(map(appender.get(k, nobody).get, order, repeat(n, len(order))))
            if len(ids) > 1:
                src += islice(ids, len(ids) - 1)
                dst += islice(ids, 1, None)
        for k, _, w in self.unseen:
            ids = order_ids.get(k)
            if ids:
                src.append(ids[-1])
                dst.append(w)
        return src, dst

    def _read_edges(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """The second pass, over the reads against the finished orders: wr edges (from the
        appender of the last element a read saw), rw edges (to the appender of the first it
        missed, or to each unseen append), aborted reads (G1a) and intermediate reads (G1b)."""
        txns, found, appender, n = self.txns, self.found, self.appender, self.txns.n
        order_ids, unseen_by_key, failed_appends = self.order_ids, self.unseen_by_key, self.failed_appends
        repeat_appenders = self.repeat_appenders
        wr_src: list[int] = []
        wr_dst: list[int] = []
        rw_src: list[int] = []
        rw_dst: list[int] = []
        nobody: dict[Any, int] = {}
        for t, k, lst, external in self.reads:
            ids = order_ids[k]
            if len(lst) < len(ids):
                rw_src.append(t)
                rw_dst.append(ids[len(lst)])
            elif len(lst) == len(ids) and k in unseen_by_key:
                unseen = unseen_by_key[k]
                rw_src += repeat(t, len(unseen))
                rw_dst += unseen
            if not external:
                continue
            last = external[-1]
            w = appender.get(k, nobody).get(last, n)
            wr_src.append(w)
            wr_dst.append(t)
            if failed_appends and k in failed_appends:
                for x in failed_appends[k].intersection(external):
                    examples = found["G1a"]
                    if len(examples) >= MAX_EXAMPLES:
                        # only counted from here: a read of a long list can hold many aborted
                        # elements, and wording each (two transactions' ops) was most of the check
                        examples.append(None)
                        continue
                    examples.append({"summary": f"{txns.describe(t)} read {x} of key {k}, appended by "
                                                f"the failed {txns.describe(appender[k][x])}",
                                     "ops": [txns.comps[t].to_dict(), txns.invs[appender[k][x]].to_dict()]})
            if w in repeat_appenders and w != t and _last_append(txns.mops[w], k) != last:
                found["G1b"].append({"summary": f"{txns.describe(t)} read key {k} ending at {last}, an "
                                                f"intermediate append of {txns.describe(w)}",
                                     "ops": [txns.comps[t].to_dict(), txns.invs[w].to_dict()]})
        return wr_src, wr_dst, rw_src, rw_dst


def _last_append(mops: list, key: Any) -> Any:
    last = _NOTHING
    for f, k, v in mops:
        if f == "append" and k == key:
            last = v
    return last


def _append_position(mops: list, key: Any, value: Any) -> int:
    for i, (f, k, v) in enumerate(mops):
        if f == "append" and k == key and v == value:
            return i
    return len(mops)


_NOTHING = object()


def check_list_append(history: Sequence[Op], consistency_models: Sequence[str] | None = None,
                      cycle_budget_s: float = 30.0) -> Result:
    models = list(consistency_models or ["strict-serializable"])
    for m in models:
        if m not in FORBIDDEN:
            raise ValueError(f"unknown consistency model {m!r}; valid: {', '.join(FORBIDDEN)}")
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    forbidden = set().union(*(FORBIDDEN[m] for m in models))

    # --- 1. inference ---------------------------------------------------------------------------
    # Process and real-time order only matter to the models that forbid their cycles (as in
    # Elle): without them, cycles through them are no anomaly and would only cost search time.
    inference = _Inference(history, found, with_process=any(a.endswith("-process") for a in forbidden))
    txns = inference.txns

    # --- 2. the dependency graph ---------------------------------------------------------------
    graph = _DependencyGraph(inference, forbidden)

    # --- 3. cycles -------------------------------------------------------------------------------
    deadline = time.monotonic() + cycle_budget_s
    timed_out = False
    sccs = graph.cyclic_components()
    explained: dict[tuple[int, int], dict[str, tuple]] = {}  # the cyclic components' edges: {kind: why}
    if sccs:
        members = set().union(*sccs)

        def explain(a: int | None, b: int | None, kind: str, *why: Any) -> None:
            if a is None or b is None or a == b or a not in members or b not in members \
                    or txns.types[a] == FAIL or txns.types[b] == FAIL:
                return
            explained.setdefault((a, b), {}).setdefault(kind, why)  # the first reason, as Elle's order gives

        graph.explain_edges(members, explain)
    succ: dict[int, list[int]] = defaultdict(list)
    for a, b in explained:  # in the order the inference first gave each edge
        succ[a].append(b)
    for scc in sccs:
        # networkx only for the (usually absent) cyclic parts: millions of edges stay plain ints.
        edges = [(a, b) for a in scc for b in succ[a] if b in scc]
        sub = nx.DiGraph()
        sub.add_edges_from((a, b, {"kinds": explained[(a, b)]}) for a, b in edges)
        try:
            for name, cycle in _classify_cycles(sub, edges, deadline):
                found[name].append(_explain(cycle, sub, txns.txn))
        except TimeoutError:
            timed_out = True
            found["cycle-search-timeout"].append({"summary": f"the cycle search ran out of its {cycle_budget_s:.0f} s "
                                                             f"budget in a strongly connected component of "
                                                             f"{len(scc)} transactions: a cycle exists"})
            break

    anomaly_types = sorted(found)
    bad = forbidden | ALWAYS_BAD
    violated = [a for a in anomaly_types if a in bad]
    reasons = []
    if timed_out:
        # A cycle exists, but its class is unknown: it proves a violation only of a model that
        # forbids every class the graph's edge kinds allow; otherwise the verdict is unknown.
        if any(_forbids_every_cycle(m, graph.kinds) for m in models):
            violated.append("cycle-search-timeout")
        else:
            reasons.append(say("cycle-search-out-of-budget", seconds=cycle_budget_s, models=", ".join(models)))
    if not inference.reads:
        reasons.append(NOTHING_READ)
    valid: Any = False if violated else UNKNOWN if reasons else True
    anomalies = [Anomaly(a, len(found[a]), found[a][:MAX_EXAMPLES], _EXPLAIN.get(a, "")) for a in anomaly_types]
    not_models = sorted(m for m in FORBIDDEN if FORBIDDEN[m] & set(anomaly_types))
    return Result(checker="elle-list-append", valid=valid, anomalies=anomalies,
                  stats={"transactions": txns.n, "edges": graph.edge_count, "models": models,
                         "violated": violated, "not": not_models},
                  details={"cycles_text": [ex["summary"] for a in anomaly_types for ex in found[a][:2]]},
                  unknown_reasons=reasons)


class _DependencyGraph:
    """Step 2: the dependency graph with integer transaction ids.

    Data (ww, wr, rw) and process edges are listed as pairs of ints. Real-time edges are not
    listed: Elle links each transaction to the frontier of completions before its invocation,
    about `concurrency` edges per transaction (ten million at a million transactions), and the
    frontier of a transaction is a contiguous run of the completions in time order, so two ints
    per transaction hold it. For cycles only reachability counts, and `a` reaches `b` in real
    time exactly when `a` completed before `b` was invoked, which a chain of one node per
    completion gives with three edges per transaction.

    `edge_count` counts inferred edges, one per reason kind and occurrence, and each frontier
    edge once: a pair linked for two reasons counts twice (deduplicating millions of pairs
    would cost a third of the check).
    """

    def __init__(self, inference: _Inference, forbidden: set[str]):
        txns = inference.txns
        self.txns, self.inference = txns, inference
        self.process = any(a.endswith("-process") for a in forbidden)
        self.realtime = any(a.endswith("-realtime") for a in forbidden)
        n, types = txns.n, txns.types
        self.committed = list(compress(txns.ids, map({OK, INFO}.__contains__, types)))
        # Transaction n stands for "nobody appended it"; it and failed transactions take part in
        # no edge, nor does a transaction with itself. Such edges are rare (an aborted read, a
        # transaction reading its own appends), so look before filtering: with map and compress,
        # at C speed, since a Python loop per edge would be most of the check's time.
        src, dst, segments = inference.src, inference.dst, inference.segments
        all_alive = FAIL not in types and max(src, default=-1) < n and max(dst, default=-1) < n
        if all_alive and not any(map(eq, src, dst)):
            self.kinds = {kind for kind, start, end in segments if end > start}
        else:
            if all_alive:  # only self-loops to drop (a transaction appending twice to a key, one
                mask = bytearray(map(ne, src, dst))  # reading before its append): one map, not five
            else:
                alive = [t != FAIL for t in types] + [False]
                mask = bytearray(map(and_, map(and_, map(alive.__getitem__, src), map(alive.__getitem__, dst)),
                                     map(ne, src, dst)))  # a byte per edge, not a pointer
            self.kinds = {kind for kind, start, end in segments if any(mask[start:end])}
            src, dst = list(compress(src, mask)), list(compress(dst, mask))
        self.src, self.dst = src, dst
        self._realtime_frontiers()
        self.edge_count = len(src)
        if self.realtime:
            if self.well_formed:
                self.edge_count += self.realtime_count
            else:
                self.edge_count += sum(1 for _ in _frontier_edges(txns, self.committed, None))
            if self.realtime_count:
                self.kinds.add(REALTIME)

    def _realtime_frontiers(self) -> None:
        """Each committed transaction's real-time predecessors, Elle's frontier, as a run
        [frontier_lo, frontier_hi) of completion ranks: the completions before its invocation
        (time strictly before: Elle's anchors with all :time 0 have no real-time order) that no
        transaction invoked after them has completed before it."""
        txns, n = self.txns, self.txns.n
        invs, comps, types = txns.invs, txns.comps, txns.types
        by_completion = [t for t in self.committed if types[t] == OK]
        times = [comps[t].time for t in by_completion]
        if not all(map(le, times, islice(times, 1, None))):
            # stable: ties in id order, as Elle's events
            by_completion = [by_completion[i] for i in sorted(range(len(times)), key=times.__getitem__)]
            times = [comps[t].time for t in by_completion]
        rank = [-1] * n
        for _ in map(rank.__setitem__, by_completion, txns.ids):  # ranks 0.. (the ids' ints)
            pass
        invoked = [invs[t].time for t in by_completion]
        self.well_formed = all(map(le, invoked, times))
        committed = self.committed
        invoked_at = [invs[t].time for t in committed]
        if not all(map(le, invoked_at, islice(invoked_at, 1, None))):
            committed = [committed[i] for i in sorted(range(len(committed)), key=invoked_at.__getitem__)]
            invoked_at = [invs[t].time for t in committed]
        # One merge of the invocations with the completions, both in time order: hi, the
        # completions before the invocation; lo, the first of them not earlier than the latest
        # invocation among them (an earlier one left the frontier: a transaction invoked after
        # it completed has completed since).
        lo, hi = [0] * n, [0] * n
        i = j = total = 0
        m = len(times)
        latest: Any = None
        for b, invoked_b in zip(committed, invoked_at, strict=True):
            while j < m and times[j] < invoked_b:
                if latest is None or invoked[j] > latest:
                    latest = invoked[j]
                j += 1
            if j:
                while i < j and times[i] < latest:
                    i += 1
                lo[b], hi[b] = i, j
                total += j - i
        self.completion_rank, self.frontier_lo, self.frontier_hi = rank, lo, hi
        self.by_completion = by_completion
        self.realtime_count = total

    def cyclic_components(self) -> list[set[int]]:
        """The strongly connected components of two or more transactions."""
        n, types = self.txns.n, self.txns.types
        src, dst = self.src, self.dst
        if self.realtime and not self.well_formed:
            return self._cyclic_components_listing_realtime()
        # A topological order proves there is no cycle, in one pass over the edges at C speed:
        # each transaction placed at its completion (Elle's serialization point for a database
        # that commits in order), an indeterminate one just after the completions before its
        # invocation; chain node r (below) just after the r-th completion. Real-time edges all
        # go forward in it by construction.
        rank, hi = self.completion_rank, self.frontier_hi
        pos = [4 * r + 4 if type_ == OK else 4 * h + 2 for r, type_, h in zip(rank, types, hi, strict=True)]
        if all(map(lt, map(pos.__getitem__, src), map(pos.__getitem__, dst))):
            return []  # the common case: nothing listed but the positions
        pos_src, pos_dst = list(map(pos.__getitem__, src)), list(map(pos.__getitem__, dst))
        backward = list(map(ge, pos_src, pos_dst))
        # A cycle goes back as far as it goes forward: the positions it spans are covered by its
        # own backward edges' spans. So only transactions inside a run of overlapping backward
        # spans can be on a cycle, and each cycle stays inside one run: the search needs only
        # those runs (a database committing out of order makes short ones).
        span = 4 * len(self.by_completion) + 8
        runs: list[tuple[int, int]] = []
        run_lo = run_hi = -1
        for key in sorted(map(add, map(mul, compress(pos_dst, backward), repeat(span)), compress(pos_src, backward))):
            lo, high = divmod(key, span)
            if lo > run_hi:
                if run_hi >= 0:
                    runs.append((run_lo, run_hi))
                run_lo, run_hi = lo, high
            elif high > run_hi:
                run_hi = high
        runs.append((run_lo, run_hi))
        by_completion = self.by_completion
        m = len(by_completion) if self.realtime else 0  # chain nodes n .. n + m - 1
        info_at: dict[int, list[int]] = defaultdict(list)  # position -> the other transactions there
        for t in compress(range(n), map(ne, types, repeat(OK))):
            info_at[pos[t]].append(t)
        run_of = {}  # node -> its run
        for i, (lo, high) in enumerate(runs):
            for r in range(max(0, (lo - 4 + 3) // 4), min(len(by_completion), (high - 4) // 4 + 1)):
                run_of[by_completion[r]] = i  # at 4r + 4
                if r < m and lo <= 4 * r + 5 <= high:
                    run_of[n + r] = i
            for at in range(lo + (2 - lo) % 4, high + 1, 4):
                for t in info_at.get(at, ()):
                    run_of[t] = i
        nodes = sorted(run_of)
        local = {x: i for i, x in enumerate(nodes)}
        adjacency: list[list[int]] = [[] for _ in nodes]
        for a, b in zip(src, dst, strict=True):
            ra = run_of.get(a)
            if ra is not None and ra == run_of.get(b):
                adjacency[local[a]].append(local[b])
        if self.realtime:
            # chain node n + r for the r-th completion: its transaction -> it -> the next one,
            # and the latest completion before each invocation -> the invoked transaction
            for x in nodes:
                if x < n:
                    if rank[x] >= 0 and run_of.get(n + rank[x]) == run_of[x]:
                        adjacency[local[x]].append(local[n + rank[x]])
                elif x + 1 < n + m and run_of.get(x + 1) == run_of[x]:
                    adjacency[local[x]].append(local[x + 1])
            for b in self.committed:
                if b in run_of and hi[b] and run_of.get(n + hi[b] - 1) == run_of[b]:
                    adjacency[local[n + hi[b] - 1]].append(local[b])
        cyclic = [real for comp in sccs(adjacency) if len(real := {nodes[x] for x in comp if nodes[x] < n}) > 1]
        # Later runs first, as a search of the whole graph from its first transaction would
        # finish them (edges between runs all go forward): the same examples, in the same order.
        cyclic.sort(key=lambda comp: -run_of[next(iter(comp))])
        return cyclic

    def _cyclic_components_listing_realtime(self) -> list[set[int]]:
        """A history whose times go backwards: list Elle's frontier edges one by one."""
        n = self.txns.n
        adjacency: list[list[int]] = [[] for _ in range(n)]
        for a, b in zip(self.src, self.dst, strict=True):
            adjacency[a].append(b)
        for a, b, *_ in _frontier_edges(self.txns, self.committed, None):
            adjacency[a].append(b)
        return [comp for comp in sccs(adjacency) if len(comp) > 1]

    def explain_edges(self, members: set[int], edge) -> None:
        """The edges among `members`, each with its reason, handed to `edge(a, b, kind, why-format,
        *args)` in Elle's order of inference (ww, then per read wr and rw, process, real time): the
        first reason of a pair is the one told, and the order of a transaction's successors
        decides which cycle networkx reports first."""
        inf, txns = self.inference, self.txns
        keys = {k for t in members for f, k, _ in txns.mops[t]}
        appender = inf.appender
        for k, order in inf.orders.items():
            if k not in keys:
                continue
            by_value = appender.get(k, {})
            for x, y in zip(order, order[1:], strict=False):
                edge(by_value.get(x), by_value.get(y), WW, "appended {} to {} before {} was appended", x, k, y)
        for k, v, w in inf.unseen:
            order = inf.orders.get(k)
            if order and k in keys:
                edge(appender[k].get(order[-1]), w, WW, "appended {} to {}; {}, never read, came later",
                     order[-1], k, v)
        for t, k, lst, external in inf.reads:
            if t not in members:
                continue
            by_value = appender.get(k, {})
            if external:
                edge(by_value.get(external[-1]), t, WR, "appended {} to {}, which the reader saw last",
                     external[-1], k)
            order = inf.orders.get(k, [])
            if len(lst) == len(order):
                for w in inf.unseen_by_key.get(k, ()):
                    edge(t, w, RW, "read {} = {}, which does not hold the later append by the other", k, lst)
            elif len(lst) < len(order):
                edge(t, by_value.get(order[len(lst)]), RW, "read {} = {} without {}, which the other appended",
                     k, lst, order[len(lst)])
        if self.process:
            last_of_process: dict[Any, int] = {}
            for t in self.committed:
                p = txns.invs[t].process
                prev = last_of_process.get(p)
                if prev is not None:
                    edge(prev, t, PROCESS, "came first in the same process")
                last_of_process[p] = t
        if self.realtime:
            if self.well_formed:
                self._explain_realtime(members, edge)
            else:
                for a, b, *why in _frontier_edges(txns, self.committed, members):
                    edge(a, b, REALTIME, *why)

    def _explain_realtime(self, members: set[int], edge) -> None:
        """Frontier edges among `members`, in Elle's order: by invocation, then by completion."""
        txns, rank = self.txns, self.completion_rank
        inv_order = sorted((t for t in self.committed if t in members), key=lambda t: txns.invs[t].time)
        completed = sorted((rank[t], t) for t in members if rank[t] >= 0)
        ranks = [r for r, _ in completed]
        for b in inv_order:
            lo, hi = self.frontier_lo[b], self.frontier_hi[b]
            for i in range(bisect_left(ranks, lo), bisect_left(ranks, hi)):
                edge(completed[i][1], b, REALTIME, "completed before the other began")


def _frontier_edges(txns: _Txns, committed: list[int], members: set[int] | None) -> list[tuple[int, int, str]]:
    """Elle's real-time edges one by one, as (a, b, why), between `members` (None: all)."""
    out: list[tuple[int, int, str]] = []

    def edge(a: Txn, b: Txn, kind: str, why: str) -> None:
        if a.id != b.id and (members is None or (a.id in members and b.id in members)):
            out.append((a.id, b.id, why))

    realtime_edges([txns.txn(t) for t in committed], edge)
    return out


def _classify_cycles(sub, edges: list[tuple[int, int]], deadline: float):
    """Yield (anomaly name, cycle) for the anomaly classes present in this SCC. Acyclicity tests
    and topological order keep this near-linear; paths are shortest where a BFS is affordable."""
    g0 = cycle_in(kind_subgraph(sub, edges, {WW}))
    if g0:
        yield "G0", g0
    wwwr = kind_subgraph(sub, edges, {WW, WR})
    g1c = None if g0 else cycle_in(wwwr)
    if g1c:
        yield "G1c", g1c
    # An anti-dependency a -> b closes a G-single cycle when b reaches a by ww/wr edges. It can only
    # if it goes back in a topological order of those edges; when they have cycles of their own
    # (G0, G1c) and no such order, only if a and b share a strongly connected component of the
    # data edges. A step that is also ww or wr is no anti-dependency step.
    single = None
    data = kind_subgraph(sub, edges, {WW, WR, RW})
    if g0 is None and g1c is None:
        order = {n: i for i, n in enumerate(nx.topological_sort(wwwr))}
        def closes(a: int, b: int) -> bool:
            return order[b] < order[a]
    else:
        component = {x: i for i, comp in enumerate(nx.strongly_connected_components(data)) for x in comp}
        def closes(a: int, b: int) -> bool:
            return component[a] == component[b] and not edge_kinds(sub, a, b) & {WW, WR}
    for a, b in sub.edges:
        if time.monotonic() > deadline:
            raise TimeoutError
        if RW in edge_kinds(sub, a, b) and closes(a, b):
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
    g2 = None
    if single is None:
        if g0 is None and g1c is None:
            g2 = cycle_in(data)  # every cycle of data edges has anti-dependencies, and no G-single: two or more
        else:
            # a cycle through an anti-dependency, never the G0/G1c cycle again (it has none): with no
            # G-single above, it takes two or more
            g2 = next((([a] + nx.shortest_path(data, b, a)) for a, b in sub.edges
                       if RW in edge_kinds(sub, a, b) and closes(a, b)), None)
    if g2:
        yield ("G-single" if rw_count(sub, g2) == 1 else "G2-item"), g2
    if g0 or g1c or single or g2:
        return
    # No cycle on data edges alone: cycles closed by process or real-time order.
    for extra, suffix in ((PROCESS, "-process"), (REALTIME, "-realtime")):
        if time.monotonic() > deadline:
            raise TimeoutError
        g0 = cycle_in(kind_subgraph(sub, edges, {WW, extra}))  # write-write steps only: G0, as Elle names it
        if g0 is not None:
            yield "G0" + suffix, g0
            continue
        cyc = cycle_in(kind_subgraph(sub, edges, {WW, WR, RW, extra}))
        if cyc is None:
            continue
        rws = rw_count(sub, cyc, {extra})
        base = "G1c" if rws == 0 else "G-single" if rws == 1 else "G2-item"  # rws 0 without a G0: a wr step
        yield base + suffix, cyc


def _explain(cycle: list[int], sub, txn) -> dict[str, Any]:
    """The cycle in words, and as data: "edges" holds [from, to, kind] per step, the kind its words name
    (the report draws it), and "ops" the transactions' ops in the cycle's order."""
    words, edges = [], []
    for a, b in zip(cycle, cycle[1:], strict=False):
        kinds = sub[a][b]["kinds"]
        kind = next(k for k in (WW, WR, RW, PROCESS, REALTIME) if k in kinds)
        template, *args = kinds[kind]
        words.append(f"T{a} {kind} T{b}: T{a} {template.format(*args)}")
        edges.append([a, b, kind])
    members = [txn(t) for t in cycle[:-1]]
    summary = ("; ".join(words) + f"; so T{cycle[0]} precedes itself. Transactions: "
               + " ".join(t.describe() for t in members))
    return {"summary": summary, "cycle": cycle, "steps": words, "edges": edges,
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


