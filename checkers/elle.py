"""Elle-style checking of list-append histories: infer dependencies, find cycles, explain them (issue 5).

As in Elle (Kingsbury & Alvaro), kept in separate steps:
1. inference: each key's version order is its longest read (every read must be a prefix of
   it: otherwise "incompatible-order"); who appended each element; ww edges between
   consecutive appends, wr from an element's appender to each read ending at it, rw from a
   reader to the appender of the first element it did not see; plus process and realtime
   edges (realtime through a frontier, never all pairs).
   The inference reads the transactions once, in invocation order (a history in memory, or a
   file's rows as a stream: ListAppendCheck, so `kafkaesque check` never holds the history), and
   keeps no read's list: a read that agrees with its key's longest read is a prefix of it, so
   four ints say it (issue 44: a million transactions from a file in well under 1 GB).
2. graph: transactions are ints and edges numpy arrays of them; real-time edges are kept as
   each transaction's run of frontier completions, not listed (issue 26: linear time and
   memory, a million transactions in seconds). No cycle when the completion order, or else the
   invocation order, is a topological order (an array comparison each); otherwise strongly
   connected components (an iterative Tarjan) only where backward edges overlap; in each, with
   networkx, the shortest cycle of each class: G0 (ww), G1c (ww+wr), G-single (exactly one rw),
   G2-item (two or more rw), and their -process / -realtime variants when the cycle needs those
   edges.
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
from array import array
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain, compress, islice, repeat
from operator import eq, itemgetter, le, ne, rshift
from typing import Any

import networkx as nx
import numpy as np

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
from kafkaesque_harness.checkers.stream import POS, TIME, TYPE, VALUE, F, OpSource, Row
from kafkaesque_harness.checkers.stream import PROCESS as PROCESS_FIELD
from kafkaesque_harness.history import FAIL, INFO, INVOKE, NEMESIS, OK, Op, pair_ops

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
    """The transactions of a history as parallel columns indexed by id (invocation order): type,
    process and times, and where each one's ops are (`refs`: the Ops themselves for a history in
    memory, their positions in a file for a stream, read back through `fetch` only for the few an
    anomaly's words name). Their micro-ops are not kept: the inference keeps what it needs of them.
    A stream's positions and times are int64 arrays (a list of a million fresh ints is 36 MB) until
    a time that is no int64 turns that column into a list; `no_comp` is what stands for a missing
    completion's position (a missing completion's time is never read: only ok ones' are)."""

    def __init__(self, fetch: Callable[[Any], Op], columns: Callable[[], Any] = list) -> None:
        self.inv_refs: Any = columns()
        self.comp_refs: Any = columns()
        self.no_comp = None if columns is list else -1
        self.types: list[str] = []
        self.processes: list[Any] = []
        self.inv_times: Any = columns()
        self.comp_times: Any = columns()
        self.ids: list[int] = []
        self.n = 0
        self.fetch = fetch

    def inv(self, t: int) -> Op:
        return self.fetch(self.inv_refs[t])

    def comp(self, t: int) -> Op | None:
        ref = self.comp_refs[t]
        if self.no_comp is None:
            return None if ref is None else self.fetch(ref)
        return None if ref == self.no_comp else self.fetch(ref)

    def txn(self, t: int) -> Txn:
        return Txn(t, self.inv(t), self.comp(t))

    def mops(self, t: int) -> list:
        return self.txn(t).mops

    def describe(self, t: int) -> str:
        return self.txn(t).describe()

    def timed(self, t: int) -> _Timed:
        return _Timed(t, self.types[t], self.inv_times[t], self.comp_times[t] if self.types[t] == OK else None)


class _Time:
    __slots__ = ("time",)

    def __init__(self, time_: Any):
        self.time = time_


class _Timed:
    """A transaction as graph.realtime_edges reads it (id, type, inv.time, comp.time), without its ops."""

    __slots__ = ("id", "type", "inv", "comp")

    def __init__(self, id_: int, type_: str, invoked: Any, completed: Any):
        self.id, self.type = id_, type_
        self.inv, self.comp = _Time(invoked), (None if completed is None else _Time(completed))


# An append is remembered as one int: its transaction id above POSITION_BITS, its micro-op's place in
# that transaction below, so the order of these ints is the order the appends were made in.
POSITION_BITS = 20


def _memory_columns(history: Sequence[Op]) -> tuple[list, ...]:
    """The list-append transactions of a history in memory as the inference's columns, in invocation
    order: invocations, completions (None: never completed), types, processes, invocation times,
    completion times (None: never completed), micro-ops. Paired by pair_ops's rule (a process's next
    op completes its invocation unless it is another invocation), written out for Ops: the generic
    pairing cost a fifth of the check; the columns are built a list at a time."""
    pairs: list[list] = []
    open_by_process: dict[Any, list] = {}
    for op in history:
        if op.type == INVOKE:
            pair = [op, None]
            open_by_process[op.process] = pair  # an open one it replaces never completes
            pairs.append(pair)
        else:
            pair = open_by_process.pop(op.process, None)
            if pair is not None:
                pair[1] = op
    pairs = [pair for pair in pairs if pair[0].f == "txn" and pair[0].process != NEMESIS]
    invs = [inv for inv, _ in pairs]
    comps = [comp for _, comp in pairs]
    del pairs
    types = [INFO if comp is None else comp.type for comp in comps]
    mops = [(comp.value if type_ == OK else inv.value) or [] for inv, comp, type_ in zip(invs, comps, types, strict=True)]
    return (invs, comps, types, [inv.process for inv in invs], [inv.time for inv in invs],
            [None if comp is None else comp.time for comp in comps], mops)


def _row_record(inv: Row, comp: Row | None) -> tuple | None:
    """The same columns' entries for one transaction from a stream's pair of rows (checkers/stream.py),
    the ops named by position; None for a pair that is no list-append transaction."""
    if inv[F] != "txn" or inv[PROCESS_FIELD] == NEMESIS:
        return None
    if comp is None:
        return inv[POS], None, INFO, inv[PROCESS_FIELD], inv[TIME], None, inv[VALUE] or []
    type_ = _TYPES.get(comp[TYPE], comp[TYPE])  # the module's own strings: a parsed one per op costs 50 bytes
    return (inv[POS], comp[POS], type_, inv[PROCESS_FIELD], inv[TIME], comp[TIME],
            (comp[VALUE] if type_ == OK else inv[VALUE]) or [])


_TYPES = {t: t for t in (OK, FAIL, INFO)}


class _Found:
    """The non-cyclic anomalies as they are seen, each kind in read order (as Elle lists them): all
    counted, only the first MAX_EXAMPLES of a kind worded (each held as what words it, until the end)."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = defaultdict(list)

    def add(self, name: str, words: Callable[[], dict[str, Any]]) -> None:
        examples = self.lists[name]
        examples.append(words if len(examples) < MAX_EXAMPLES else None)


BATCH = 4096  # transactions a stream hands the first pass at a time


class _Inference:
    """Step 1, fed the transactions in invocation order (`add_columns` for a history in memory, `add`
    one at a time for a stream) and then finished (`finish`): who appended what, each key's version
    order, the reads, process order; then the reads against the finished orders. Nothing of a
    transaction is kept but its type, process and times, and of a read four ints (reader, lineage,
    length, the length others appended): a read is always a prefix of its key's longest read that
    agrees with it (its "lineage": one per key unless reads disagree), so the list itself need not be
    kept. The data and process edges come out as parallel lists of transaction ids (`src`, `dst`),
    each kind one run (`segments`), with `nobody` (= the number of transactions) for an element no
    transaction appended. Whatever can be done a list at a time is (map, compress, at C speed): a
    Python statement per transaction costs about a second per million."""

    def __init__(self, fetch: Callable[[Any], Op], found: _Found, with_process: bool,
                 columns: Callable[[], Any] = list):
        self.txns = _Txns(fetch, columns)
        self.found = found
        self.with_process = with_process
        self.appender: dict[Any, dict[Any, int]] = {}  # key -> value -> the last append of it (see POSITION_BITS)
        self.first_append: dict[tuple[Any, Any], int] = {}  # (key, value) appended twice -> its first append
        self.repeat_appends: dict[int, dict[Any, list]] = {}  # appended to one key twice (the only source of G1b)
        # key -> [its longest read (which every other read must prefix), that read's lineage, whether
        # that read is known to hold no duplicates]: one look-up per read
        self.key_state: dict[Any, list] = {}
        self.lineage_lists: list[list] = []  # lineage -> its longest read so far
        self.lineage_keys: list[Any] = []
        self.read_rows = array("q")  # per read: reader, lineage, length, the length others appended
        self.failed_candidates: list[tuple[int, Any, Any]] = []  # (failed txn, key, value) of each append
        self._pending: list[tuple[str, list]] = []  # a stream's transactions not yet absorbed

    def add_columns(self, inv_refs: list, comp_refs: list, types: list[str], processes: list, inv_times: list,
                    comp_times: list, mops: list[list]) -> None:
        txns = self.txns
        txns.inv_refs += inv_refs
        txns.comp_refs += comp_refs
        txns.types += types
        txns.processes += processes
        txns.inv_times += inv_times
        txns.comp_times += comp_times
        self._absorb(zip(types, mops, strict=True))

    def add(self, record: tuple) -> None:
        """One transaction of a stream (_row_record's columns)."""
        inv_ref, comp_ref, type_, process, invoked, completed, mops = record
        txns = self.txns
        txns.inv_refs.append(inv_ref)
        txns.comp_refs.append(txns.no_comp if comp_ref is None else comp_ref)
        txns.types.append(type_)
        txns.processes.append(process)
        for name, value in (("inv_times", invoked), ("comp_times", 0 if completed is None else completed)):
            column = getattr(txns, name)
            try:
                column.append(value)
            except (TypeError, OverflowError):  # no int64: this column becomes a list
                setattr(txns, name, [*column, value])
        self._pending.append((type_, mops))
        if len(self._pending) >= BATCH:
            self._absorb(self._pending)
            self._pending = []

    def _absorb(self, items: Iterable[tuple[str, list]]) -> None:
        """The first pass over (type, micro-ops) of the next transactions: appenders, each key's
        longest read and lineages, and the reads; incompatible orders, duplicates and internal
        inconsistencies as they are read."""
        txns, found = self.txns, self.found
        appender, first_append, repeat_appends = self.appender, self.first_append, self.repeat_appends
        key_state, lineage_lists, lineage_keys = self.key_state, self.lineage_lists, self.lineage_keys
        add_read = self.read_rows.extend
        failed_candidates = self.failed_candidates
        t = self.txns.n
        for type_, mops in items:
            own: dict[Any, list] | None = None  # this transaction's appends so far, by key
            if len(mops) >> POSITION_BITS:
                raise ValueError(f"transaction {t} has {len(mops)} micro-ops, more than the checker's "
                                 f"{1 << POSITION_BITS:,}")
            ok = type_ == OK
            for at, (f, k, v) in enumerate(mops, t << POSITION_BITS):
                if f == "append":
                    by_value = appender.get(k)
                    if by_value is None:
                        appender[k] = {v: at}
                    else:
                        if v in by_value:
                            first_append.setdefault((k, v), by_value[v])
                        by_value[v] = at
                    if own is None:
                        own = {k: [v]}
                    elif k in own:
                        own[k].append(v)
                        repeat_appends[t] = own
                    else:
                        own[k] = [v]
                    if type_ == FAIL:
                        failed_candidates.append((t, k, v))
                    continue
                if not ok:
                    continue
                lst = v if type(v) is list else list(v or ())  # never changed: no copy needed
                length = len(lst)
                state = key_state.get(k)
                if state is None:
                    lineage = len(lineage_lists)
                    key_state[k] = state = [lst, lineage, False]
                    lineage_lists.append(lst)
                    lineage_keys.append(k)
                    cur, agrees = lst, True
                else:
                    cur, lineage = state[0], state[1]
                    if length > len(cur):
                        agrees = lst[: len(cur)] == cur
                        if agrees:
                            lineage_lists[lineage] = lst
                        else:
                            found.add("incompatible-order", partial(_incompatible, txns, t, k, lst, cur))
                            lineage = len(lineage_lists)  # the older reads keep theirs
                            lineage_lists.append(lst)
                            lineage_keys.append(k)
                        cur = state[0] = lst
                        state[1], state[2] = lineage, False
                    else:
                        # most reads see the whole current order: compare without slicing a copy
                        agrees = lst == cur if length == len(cur) else cur[:length] == lst
                        if not agrees:
                            found.add("incompatible-order", partial(_incompatible, txns, t, k, cur, lst))
                            lineage = len(lineage_lists)  # a lineage of its own
                            lineage_lists.append(lst)
                            lineage_keys.append(k)
                # A prefix of an order without duplicates has none: most reads need no set.
                if length > 1 and (cur is lst or not agrees or not state[2]):
                    if len(set(lst)) != length:
                        found.add("duplicate-elements", partial(_duplicates, txns, t, k, lst))
                        if cur is lst:
                            state[2] = False
                    elif cur is lst:
                        state[2] = True
                elif cur is lst:
                    state[2] = True
                external = length
                if own is not None and (mine := own.get(k)):
                    if lst[-len(mine):] != mine:
                        found.add("internal", partial(_internal, txns, t, k, lst, list(mine)))
                    else:
                        external -= len(mine)
                add_read((t, lineage, length, external))
            t += 1
        self.txns.n = t

    def finish(self) -> None:
        """The second half, once every transaction is in: the unseen and failed appends, then the
        edges, as numpy arrays of transaction ids."""
        if self._pending:
            self._absorb(self._pending)
            self._pending = []
        self.orders = {k: state[0] for k, state in self.key_state.items()}
        self.lineage_of_key = {k: state[1] for k, state in self.key_state.items()}
        txns = self.txns
        # One int object per transaction id, shared by every list that holds ids (an int above 256
        # is 28 bytes: each list making its own would cost 28 MB per million).
        txns.ids = list(range(txns.n))
        self._unseen_and_failed_appends()
        ww_src, ww_dst = self._write_edges()
        wr_src, wr_dst, rw_src, rw_dst = self._read_edges()
        parts = [(ww_src, ww_dst), (wr_src, wr_dst), (rw_src, rw_dst)]
        if self.with_process:
            parts.append(self._process_edges())
        self.segments, end = [], 0
        for kind, (part, _) in zip((WW, WR, RW, PROCESS), parts, strict=False):
            self.segments.append((kind, end, end + len(part)))
            end += len(part)
        if not self.with_process:
            self.segments.append((PROCESS, end, end))
        self.src = np.concatenate([np.asarray(s, dtype=np.int64) for s, _ in parts])
        self.dst = np.concatenate([np.asarray(d, dtype=np.int64) for _, d in parts])

    def _process_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Each committed (ok or info) transaction's edge from the one its process ran before, in the
        order of the later one: a stable sort by process, not a loop per transaction."""
        txns = self.txns
        number = {p: i for i, p in enumerate(dict.fromkeys(txns.processes))}
        committed = np.flatnonzero(np.fromiter(map({OK, INFO}.__contains__, txns.types), dtype=bool, count=txns.n))
        process = np.fromiter(map(number.__getitem__, txns.processes), dtype=np.int64, count=txns.n)[committed]
        by_process = np.argsort(process, kind="stable")
        ordered, process = committed[by_process], process[by_process]
        same = process[1:] == process[:-1]
        src, dst = ordered[:-1][same], ordered[1:][same]
        by_dst = np.argsort(dst, kind="stable")
        return src[by_dst], dst[by_dst]

    @property
    def read_count(self) -> int:
        return len(self.read_rows) // 4

    def read_columns(self) -> tuple[array, array, array, array]:
        """The reads as four columns: reader, lineage, length, the length others appended."""
        rows = self.read_rows
        return rows[0::4], rows[1::4], rows[2::4], rows[3::4]

    def reads(self, members: set[int] | None = None) -> Iterator[tuple[int, Any, list, list]]:
        """The reads (reader, key, list read, the part others appended), in read order; only the
        readers among `members` if given. Rebuilt from their lineages: for the few an explanation needs."""
        lists, keys = self.lineage_lists, self.lineage_keys
        for t, lineage, length, external in zip(*self.read_columns(), strict=True):
            if members is None or t in members:
                lst = lists[lineage][:length]
                yield t, keys[lineage], lst, lst[:external]

    def appended_by(self, k: Any) -> dict[Any, int]:
        """value -> the transaction that (last) appended it to key k."""
        return {v: at >> POSITION_BITS for v, at in self.appender.get(k, {}).items()}

    def _unseen_and_failed_appends(self) -> None:
        """Appends no read ever saw came after everything any read saw (a read containing a later
        element would contain them too): `unseen`, listed in the order they were first appended.
        And each key's elements whose (last) appender failed."""
        types, appender, orders, first_append = self.txns.types, self.appender, self.orders, self.first_append
        unseen_items = []
        for k, by_value in appender.items():
            order = orders.get(k)
            # the set difference at C speed; its order does not matter, the sort below decides
            for v in (by_value.keys() - order if order else by_value.keys()):
                last = by_value[v]
                w = last >> POSITION_BITS
                if types[w] == OK:
                    unseen_items.append((first_append.get((k, v), last), k, v, w))
        unseen_items.sort(key=itemgetter(0))
        self.unseen: list[tuple[Any, Any, int]] = [(k, v, w) for _, k, v, w in unseen_items]
        self.unseen_by_key: dict[Any, list[int]] = defaultdict(list)
        for k, _, w in self.unseen:
            self.unseen_by_key[k].append(w)
        self.failed_appends = failed_appends = {}
        for w, k, v in self.failed_candidates:
            if appender[k][v] >> POSITION_BITS == w:
                failed_appends.setdefault(k, set()).add(v)
        self.failed_candidates = []

    def _write_edges(self) -> tuple[list[int], list[int]]:
        """ww: between consecutive elements of each order, and from its last to each unseen append.
        Also each lineage's appenders, element by element (`lineage_ids`: the key's order's for the
        lineage of its longest read), with `nobody` for an element no transaction appended."""
        n, appender, ids_of = self.txns.n, self.appender, self.txns.ids
        src: list[int] = []
        dst: list[int] = []
        nobody_at = n << POSITION_BITS
        shared = ids_of + [n]  # the ids' own ints, and n for nobody
        self.lineage_ids = lineage_ids = []
        for k, lst in zip(self.lineage_keys, self.lineage_lists, strict=True):
            ats = map(appender.get(k, {}).get, lst, repeat(nobody_at, len(lst)))
            lineage_ids.append(list(map(shared.__getitem__, map(rshift, ats, repeat(POSITION_BITS)))))
        self.order_ids = order_ids = {k: lineage_ids[lineage] for k, lineage in self.lineage_of_key.items()}
        for ids in order_ids.values():
            if len(ids) > 1:
                src += islice(ids, len(ids) - 1)
                dst += islice(ids, 1, None)
        for k, _, w in self.unseen:
            ids = order_ids.get(k)
            if ids:
                src.append(ids[-1])
                dst.append(w)
        return src, dst

    def _read_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The second pass, over the reads against the finished orders, an array at a time: wr edges
        (from the appender of the last element a read saw), rw edges (to the appender of the first it
        missed, or to each unseen append), each kind in read order; then, in Python, only the reads
        that may show an aborted read (G1a: of a key with failed appends) or an intermediate one (G1b:
        ending at the append of a transaction that appended twice to the key)."""
        lineage_ids, lineage_keys = self.lineage_ids, self.lineage_keys
        lengths = np.fromiter(map(len, lineage_ids), dtype=np.int64, count=len(lineage_ids))
        offsets = np.zeros(len(lineage_ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(chain.from_iterable(lineage_ids), dtype=np.int64, count=int(offsets[-1]))
        final = np.fromiter(map(self.lineage_of_key.__getitem__, lineage_keys), dtype=np.int64,
                            count=len(lineage_keys))  # lineage -> its key's order's lineage
        unseen_of = [self.unseen_by_key.get(k, ()) for k in lineage_keys]
        unseen_counts = np.fromiter(map(len, unseen_of), dtype=np.int64, count=len(unseen_of))
        unseen_offsets = np.zeros(len(unseen_of) + 1, dtype=np.int64)
        np.cumsum(unseen_counts, out=unseen_offsets[1:])
        unseen_flat = np.fromiter(chain.from_iterable(unseen_of), dtype=np.int64, count=int(unseen_offsets[-1]))
        rows = np.frombuffer(self.read_rows, dtype=np.int64).reshape(-1, 4) if self.read_rows else \
            np.zeros((0, 4), dtype=np.int64)
        reader, lineage, length, external = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
        key = final[lineage]
        key_length = lengths[key]
        # rw: a read shorter than its key's order missed the next element's append; one as long as
        # it missed every unseen append of the key
        short = length < key_length
        whole = (length == key_length) & (unseen_counts[key] > 0)
        counts = short.astype(np.int64) + np.where(whole, unseen_counts[key], 0)
        rw_src = np.repeat(reader, counts)
        starts = np.cumsum(counts) - counts
        rw_dst = np.empty(len(rw_src), dtype=np.int64)
        rw_dst[starts[short]] = flat[offsets[key[short]] + length[short]]
        if whole.any():
            many = counts[whole]
            within = np.arange(int(many.sum()), dtype=np.int64) - np.repeat(np.cumsum(many) - many, many)
            rw_dst[np.repeat(starts[whole], many) + within] = \
                unseen_flat[np.repeat(unseen_offsets[key[whole]], many) + within]
        # wr: from the appender of the last element others appended
        seen = external > 0
        wr_dst = reader[seen]
        wr_src = flat[offsets[lineage[seen]] + external[seen] - 1]
        if self.failed_appends or self.repeat_appends:
            failed_lineage = np.fromiter((k in self.failed_appends for k in lineage_keys), dtype=bool,
                                         count=len(lineage_keys))
            repeaters = np.fromiter(self.repeat_appends, dtype=np.int64, count=len(self.repeat_appends))
            suspect = failed_lineage[lineage[seen]] | np.isin(wr_src, repeaters)
            self._aborted_and_intermediate_reads(np.flatnonzero(seen)[suspect].tolist(), wr_src[suspect].tolist())
        return wr_src, wr_dst, rw_src, rw_dst

    def _aborted_and_intermediate_reads(self, reads: list[int], writers: list[int]) -> None:
        """G1a and G1b among the reads given (by their place in read order), with the appender of each
        one's last element others appended."""
        found, txns, failed_appends, repeat_appends = self.found, self.txns, self.failed_appends, self.repeat_appends
        rows, lineage_lists, lineage_keys = self.read_rows, self.lineage_lists, self.lineage_keys
        for r, w in zip(reads, writers, strict=True):
            t, lineage, external = rows[4 * r], rows[4 * r + 1], rows[4 * r + 3]
            k = lineage_keys[lineage]
            seen = lineage_lists[lineage][:external]
            if failed_appends and k in failed_appends:
                for x in failed_appends[k].intersection(seen):
                    found.add("G1a", partial(_aborted_read, self, t, k, x))
            last = seen[-1]
            if w in repeat_appends and w != t and _last_append(repeat_appends[w], k) != last:
                found.add("G1b", partial(_intermediate_read, txns, t, k, last, w))


def _incompatible(txns: _Txns, t: int, k: Any, longer: list, shorter: list) -> dict[str, Any]:
    return {"summary": f"key {k} was read as {longer} and as {shorter}: neither is a prefix of the other",
            "ops": [txns.comp(t).to_dict()]}


def _duplicates(txns: _Txns, t: int, k: Any, lst: list) -> dict[str, Any]:
    return {"summary": f"{txns.describe(t)} read duplicates in key {k}: {lst}", "ops": [txns.comp(t).to_dict()]}


def _internal(txns: _Txns, t: int, k: Any, lst: list, mine: list) -> dict[str, Any]:
    return {"summary": f"{txns.describe(t)} read {k} = {lst} after appending {mine} itself",
            "ops": [txns.comp(t).to_dict()]}


def _aborted_read(inference: _Inference, t: int, k: Any, x: Any) -> dict[str, Any]:
    txns, w = inference.txns, inference.appender[k][x] >> POSITION_BITS
    return {"summary": f"{txns.describe(t)} read {x} of key {k}, appended by the failed {txns.describe(w)}",
            "ops": [txns.comp(t).to_dict(), txns.inv(w).to_dict()]}


def _intermediate_read(txns: _Txns, t: int, k: Any, last: Any, w: int) -> dict[str, Any]:
    return {"summary": f"{txns.describe(t)} read key {k} ending at {last}, an intermediate append of "
                       f"{txns.describe(w)}",
            "ops": [txns.comp(t).to_dict(), txns.inv(w).to_dict()]}


def _last_append(own: dict[Any, list], key: Any) -> Any:
    """The last value a transaction appended to `key` (its appends by key), or _NOTHING."""
    values = own.get(key)
    return values[-1] if values else _NOTHING


_NOTHING = object()


def check_list_append(history: Sequence[Op], consistency_models: Sequence[str] | None = None,
                      cycle_budget_s: float = 30.0) -> Result:
    """Check a list-append history in memory (the same check as a stream of a file's rows: ListAppendCheck)."""
    check = ListAppendCheck(consistency_models, cycle_budget_s, _itself)
    check.inference.add_columns(*_memory_columns(history))
    return check.result()


def _itself(op: Op) -> Op:
    return op


class ListAppendCheck:
    """The check as a stream reader (checkers/core.py PairReader): fed a history's pairs of rows in
    invocation order (`feed`), holding per transaction only a few ints and per read four, then asked
    for the result. `fetch` reads back an op an anomaly's words need (an Op itself in memory, a
    position in a file)."""

    def __init__(self, consistency_models: Sequence[str] | None, cycle_budget_s: float,
                 fetch: Callable[[Any], Op], columns: Callable[[], Any] = list):
        self.models = list(consistency_models or ["strict-serializable"])
        for m in self.models:
            if m not in FORBIDDEN:
                raise ValueError(f"unknown consistency model {m!r}; valid: {', '.join(FORBIDDEN)}")
        self.budget = cycle_budget_s
        self.forbidden = set().union(*(FORBIDDEN[m] for m in self.models))
        self.found = _Found()
        # Process and real-time order only matter to the models that forbid their cycles (as in
        # Elle): without them, cycles through them are no anomaly and would only cost search time.
        self.inference = _Inference(fetch, self.found,
                                    with_process=any(a.endswith("-process") for a in self.forbidden), columns=columns)

    def feed(self, inv: Row, comp: Row | None) -> None:
        record = _row_record(inv, comp)
        if record is not None:
            self.inference.add(record)

    def result(self) -> Result:
        models, forbidden, cycle_budget_s = self.models, self.forbidden, self.budget
        # --- 1. inference (its second half: the reads against the finished orders) ------------------
        inference = self.inference
        inference.finish()
        txns = inference.txns
        found = self.found.lists

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
                found["cycle-search-timeout"].append({"summary": f"the cycle search ran out of its "
                                                                 f"{cycle_budget_s:.0f} s budget in a strongly "
                                                                 f"connected component of {len(scc)} "
                                                                 f"transactions: a cycle exists"})
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
        if not inference.read_count:
            reasons.append(NOTHING_READ)
        valid: Any = False if violated else UNKNOWN if reasons else True
        # only the first examples of each kind are worded, now
        examples = {a: [e() if callable(e) else e for e in found[a][:MAX_EXAMPLES]] for a in anomaly_types}
        anomalies = [Anomaly(a, len(found[a]), examples[a], _EXPLAIN.get(a, "")) for a in anomaly_types]
        not_models = sorted(m for m in FORBIDDEN if FORBIDDEN[m] & set(anomaly_types))
        return Result(checker="elle-list-append", valid=valid, anomalies=anomalies,
                      stats={"transactions": txns.n, "edges": graph.edge_count, "models": models,
                             "violated": violated, "not": not_models},
                      details={"cycles_text": [ex["summary"] for a in anomaly_types for ex in examples[a][:2]]},
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
        # transaction reading its own appends): look before filtering, an array at a time.
        src, dst, segments = inference.src, inference.dst, inference.segments
        all_alive = FAIL not in types and (not len(src) or (src.max() < n and dst.max() < n))
        keep = src != dst
        if not all_alive:
            alive = np.fromiter(map(ne, types, repeat(FAIL)), dtype=bool, count=n)
            alive = np.append(alive, False)
            keep &= alive[src] & alive[dst]
        if keep.all():
            self.kinds = {kind for kind, start, end in segments if end > start}
        else:
            self.kinds = {kind for kind, start, end in segments if keep[start:end].any()}
            src, dst = src[keep], dst[keep]
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
        transaction invoked after them has completed before it. For each invocation, in time order:
        hi, the number of completions before it; lo, the first of them not earlier than the latest
        invocation among them (an earlier one left the frontier: a transaction invoked after it
        completed has completed since). Binary searches and a running maximum over int64 arrays;
        times that are no int64 (floats, beyond 64 bits) take the same merge in Python."""
        txns, n = self.txns, self.txns.n
        inv_times, comp_times, types = txns.inv_times, txns.comp_times, txns.types
        by_completion = [t for t in self.committed if types[t] == OK]
        self.invoked = None  # the invocation times as an int64 array, when they fit one
        completed_list = list(map(comp_times.__getitem__, by_completion))
        if not (set(map(type, inv_times)) <= {int} and set(map(type, completed_list)) <= {int}):
            return self._realtime_frontiers_merged(by_completion)
        try:
            invoked_all = np.array(inv_times, dtype=np.int64)
            completed = np.array(completed_list, dtype=np.int64)
        except OverflowError:
            return self._realtime_frontiers_merged(by_completion)
        del completed_list
        self.invoked = invoked_all
        order = np.argsort(completed, kind="stable")  # ties in id order, as Elle's events
        by_completion_np = np.asarray(by_completion, dtype=np.int64)[order]
        times = completed[order]
        rank = np.full(n, -1, dtype=np.int64)
        rank[by_completion_np] = np.arange(len(by_completion_np))
        invoked = invoked_all[by_completion_np]
        self.well_formed = bool((invoked <= times).all())
        committed = np.asarray(self.committed, dtype=np.int64)
        committed = committed[np.argsort(invoked_all[committed], kind="stable")]
        invoked_at = invoked_all[committed]
        lo, hi = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        if len(times):
            his = np.searchsorted(times, invoked_at, side="left")
            latest = np.maximum.accumulate(invoked)
            los = np.minimum(his, np.searchsorted(times, latest[np.maximum(his - 1, 0)], side="left"))
            los[his == 0] = 0
            lo[committed], hi[committed] = los, his
        # arrays, not lists: three lists of a million ints were a tenth of a streamed check's memory
        self.completion_rank, self.frontier_lo, self.frontier_hi = rank, lo, hi
        self.by_completion = by_completion_np.tolist()
        self.realtime_count = int((hi - lo).sum())

    def _realtime_frontiers_merged(self, by_completion: list[int]) -> None:
        """_realtime_frontiers for times numpy cannot hold: one merge of the invocations with the
        completions, both in time order."""
        txns, n = self.txns, self.txns.n
        inv_times, comp_times = txns.inv_times, txns.comp_times
        times = list(map(comp_times.__getitem__, by_completion))
        if not all(map(le, times, islice(times, 1, None))):
            # stable: ties in id order, as Elle's events
            by_completion = [by_completion[i] for i in sorted(range(len(times)), key=times.__getitem__)]
            times = list(map(comp_times.__getitem__, by_completion))
        rank = [-1] * n
        for _ in map(rank.__setitem__, by_completion, txns.ids):  # ranks 0.. (the ids' ints)
            pass
        invoked = list(map(inv_times.__getitem__, by_completion))
        self.well_formed = all(map(le, invoked, times))
        committed = self.committed
        invoked_at = list(map(inv_times.__getitem__, committed))
        if not all(map(le, invoked_at, islice(invoked_at, 1, None))):
            committed = [committed[i] for i in sorted(range(len(committed)), key=invoked_at.__getitem__)]
            invoked_at = list(map(inv_times.__getitem__, committed))
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
        ok = np.fromiter(map(eq, types, repeat(OK)), dtype=bool, count=n)
        pos = np.where(ok, 4 * np.asarray(rank, dtype=np.int64) + 4, 4 * np.asarray(hi, dtype=np.int64) + 2)
        pos_src, pos_dst = pos[src], pos[dst]
        backward = pos_src >= pos_dst
        if not backward.any():
            return []  # the common case: nothing listed but the positions
        if self.invoked is not None:
            # A database that commits out of order may still serialize in invocation order: each
            # transaction placed at its invocation (ties in id order) is a topological order too if
            # every edge goes forward in it. Real-time edges do (a completed before b was invoked,
            # and was invoked before it completed), and so do process edges.
            at_invocation = np.empty(n, dtype=np.int64)
            at_invocation[np.argsort(self.invoked, kind="stable")] = np.arange(n)
            if (at_invocation[src] < at_invocation[dst]).all():
                return []
        # A cycle goes back as far as it goes forward: the positions it spans are covered by its
        # own backward edges' spans. So only transactions inside a run of overlapping backward
        # spans can be on a cycle, and each cycle stays inside one run: the search needs only
        # those runs (a database committing out of order makes short ones).
        spans = np.stack([pos_dst[backward], pos_src[backward]], axis=1)
        spans = spans[np.lexsort((spans[:, 1], spans[:, 0]))]
        reach = np.maximum.accumulate(spans[:, 1])
        first = np.flatnonzero(np.concatenate(([True], spans[1:, 0] > reach[:-1])))  # each run's first span
        runs = list(zip(spans[first, 0].tolist(), np.maximum.reduceat(spans[:, 1], first).tolist(), strict=True))
        pos = pos.tolist()
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
        # the edges inside a run, picked out an array at a time: a Python statement per edge (millions)
        # was most of the check when completions come out of order
        run_at = np.full(n + m, -1, dtype=np.int64)  # node -> its run, -1 for none
        run_at[np.fromiter(run_of.keys(), dtype=np.int64, count=len(run_of))] = \
            np.fromiter(run_of.values(), dtype=np.int64, count=len(run_of))
        run_src = run_at[src]
        inside = (run_src >= 0) & (run_src == run_at[dst])
        for a, b in zip(src[inside].tolist(), dst[inside].tolist(), strict=True):
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
        for a, b in zip(self.src.tolist(), self.dst.tolist(), strict=True):
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
        keys = {k for t in members for f, k, _ in txns.mops(t)}
        appender = {k: inf.appended_by(k) for k in keys}  # key -> value -> its (last) appender
        for k, order in inf.orders.items():
            if k not in keys:
                continue
            by_value = appender[k]
            for x, y in zip(order, order[1:], strict=False):
                edge(by_value.get(x), by_value.get(y), WW, "appended {} to {} before {} was appended", x, k, y)
        for k, v, w in inf.unseen:
            order = inf.orders.get(k)
            if order and k in keys:
                edge(appender[k].get(order[-1]), w, WW, "appended {} to {}; {}, never read, came later",
                     order[-1], k, v)
        for t, k, lst, external in inf.reads(members):
            by_value = appender[k]
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
                p = txns.processes[t]
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
        inv_order = sorted((t for t in self.committed if t in members), key=txns.inv_times.__getitem__)
        completed = sorted((rank[t], t) for t in members if rank[t] >= 0)
        ranks = [r for r, _ in completed]
        for b in inv_order:
            lo, hi = self.frontier_lo[b], self.frontier_hi[b]
            for i in range(bisect_left(ranks, lo), bisect_left(ranks, hi)):
                edge(completed[i][1], b, REALTIME, "completed before the other began")


def _frontier_edges(txns: _Txns, committed: list[int], members: set[int] | None) -> list[tuple[int, int, str]]:
    """Elle's real-time edges one by one, as (a, b, why), between `members` (None: all)."""
    out: list[tuple[int, int, str]] = []

    def edge(a: _Timed, b: _Timed, kind: str, why: str) -> None:
        if a.id != b.id and (members is None or (a.id in members and b.id in members)):
            out.append((a.id, b.id, why))

    realtime_edges([txns.timed(t) for t in committed], edge)
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


class ElleListAppendChecker:
    name = "elle-list-append"

    def __init__(self, consistency_models: Sequence[str] | None = None, cycle_budget_s: float = 30.0):
        self.models, self.budget = consistency_models, cycle_budget_s

    def check(self, test: dict[str, Any], history: Sequence[Op]) -> Result:
        return check_list_append(history, self.models, self.budget)

    def stream(self, test: dict[str, Any], cutoff: int | None, ops: OpSource) -> ListAppendCheck:
        """The check of a history file in one pass, never holding it (checkers/core.py run_checkers)."""
        return ListAppendCheck(self.models, self.budget, ops.op, columns=partial(array, "q"))


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
    from kafkaesque_harness.checkers.queue import QUEUE_VALUES, poll_items, proven_between

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
    from kafkaesque_harness.checkers.queue import QUEUE_VALUES, poll_items

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
