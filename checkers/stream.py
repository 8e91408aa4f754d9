"""What a checker that reads a history once, pair by pair, needs (issue 26): the pairs as light rows, and
compact sets and columns for the state it keeps per record.

A checker written this way checks a history in memory (a list of Ops) and a history file (history/files.py
HistoryFile) with the same code: both become rows (`op_pairs`, `file_pairs`), paired in invocation order
(history/ops.py pair_stream), and an op that an anomaly's example shows is read back by its position
(`op_at`). A row is a tuple, not an Op, because building an object per line is what a history of tens of
millions of lines cannot afford.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, compress, islice
from typing import Any, Protocol

from kafkaesque_harness.history import INVOKE, HistoryFile, Op, pair_stream

# A row: (position in the history, type, f, process, value, time, the op's other fields or None)
Row = tuple
POS, TYPE, F, PROCESS, VALUE, TIME, EXTRA = range(7)
Pairs = Iterator[tuple[Row, Row | None]]

# A read record's seq orders every record every read returned as the pairs come (in invocation order): its
# read's invocation position, then its place among that read's records. The read is found again from it
# (seq >> SEQ_BITS is the invocation; `completion`).
SEQ_BITS = 27
INT64 = (-(1 << 63), (1 << 63) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)


def widened(column: array, v: Any) -> array:
    """`column` (4-byte ints) as 8-byte ints, with `v` appended: a value beyond 32 bits has arrived. The
    columns of positions and offsets start at 4 bytes an entry, half the memory while a history has fewer
    than 2**31 ops; `v` beyond 64 bits raises OverflowError, as appending it to an int64 column does."""
    wide = array("q", column)
    wide.append(v)
    return wide


class OpSource(Protocol):
    """A history as a stream checker reads it: its pairs, again from the start whenever asked (`pairs`); and
    the ops an example shows, read back by position (`op`, `ops_from`). In memory (InMemory) or in its file
    (InFile)."""

    def pairs(self) -> Pairs: ...

    def op(self, pos: int) -> Op: ...

    def ops_from(self, pos: int) -> Iterator[Op]: ...


class InMemory:
    """A history in memory as an OpSource."""

    def __init__(self, history: Sequence[Op]):
        self.history = history

    def pairs(self) -> Pairs:
        return op_pairs(self.history)

    def op(self, pos: int) -> Op:
        return self.history[pos]

    def ops_from(self, pos: int) -> Iterator[Op]:
        return (self.history[k] for k in range(pos, len(self.history)))


class InFile:
    """A history file as an OpSource: never held whole."""

    def __init__(self, history: HistoryFile):
        self.history = history

    def pairs(self) -> Pairs:
        return file_pairs(self.history)

    def op(self, pos: int) -> Op:
        return self.history.op(pos)

    def ops_from(self, pos: int) -> Iterator[Op]:
        return self.history.ops_from(pos)


def completion(ops: OpSource, invocation: int) -> Op | None:
    """The completion the invocation at position `invocation` pairs with (pair_ops's rule: its process's
    next op, unless that is another invocation)."""
    it = ops.ops_from(invocation)
    inv = next(it)
    for op in it:
        if op.process == inv.process:
            return None if op.type == INVOKE else op
    return None


def op_pairs(history: Sequence[Op]) -> Pairs:
    return pair_stream((op.type, op.process, (k, op.type, op.f, op.process, op.value, op.time, op.extra))
                       for k, op in enumerate(history))


def file_pairs(history: HistoryFile) -> Pairs:
    """The file's rows, paired by pair_stream. (A copy of its rule written out in this loop saved about
    0.1 s of CPU per million ops, 2% of a check: not worth a second copy of the rule.)"""
    return pair_stream((d["type"], d["process"], (pos, d["type"], d["f"], d["process"], d.get("value"),
                                                  d.get("time", 0), d))
                       for pos, d in history.rows())


def small_int(v: Any) -> int | None:
    """`v` as the int a set would take it for (True is 1, 2.0 is 2), when it is one; else None."""
    if type(v) is int:
        return v
    if isinstance(v, bool | float):
        try:
            i = int(v)
        except (OverflowError, ValueError):
            return None
        return i if i == v else None
    return None


class IntSet:
    """A set of a history's values: one bit each while they are small ints (the queue workload's are a
    counter), a set for the rest. Membership is a set's (True is 1)."""

    __slots__ = ("bits", "other")

    def __init__(self) -> None:
        self.bits = bytearray()
        self.other: set[Any] = set()

    def add(self, v: Any) -> None:
        i = v if type(v) is int else small_int(v)
        if i is not None and 0 <= i:
            byte = i >> 3
            if byte >= len(self.bits):
                if byte > 4 * len(self.bits) + (1 << 20):  # far beyond the rest: not worth a run of zero bytes
                    self.other.add(v)
                    return
                self.bits.extend(bytes(byte + 1 - len(self.bits) + len(self.bits) // 4))
            self.bits[byte] |= 1 << (i & 7)
        else:
            self.other.add(v)

    def update(self, values: Iterator[Any]) -> None:
        """Add each of `values` (a final read's: a call per value was a tenth of a check)."""
        bits = self.bits
        for v in values:
            if type(v) is int and 0 <= v < len(bits) << 3:
                bits[v >> 3] |= 1 << (v & 7)
            else:
                self.add(v)

    def add_new(self, v: Any) -> bool:
        """Add `v`; whether it was not there before."""
        if type(v) is int and 0 <= v < len(self.bits) << 3:  # the common case, without a call
            byte, bit = v >> 3, 1 << (v & 7)
            if self.bits[byte] & bit or (self.other and v in self.other):
                return False
            self.bits[byte] |= bit
            return True
        if v in self:
            return False
        self.add(v)
        return True

    def __contains__(self, v: Any) -> bool:
        i = v if type(v) is int else small_int(v)
        if i is not None and 0 <= i and (i >> 3) < len(self.bits) and self.bits[i >> 3] >> (i & 7) & 1:
            return True
        return v in self.other

    def missing(self, values: Iterator[Any]) -> list[Any]:
        """The `values` not in the set, in order (membership tested without a call per value)."""
        bits, nbits = self.bits, len(self.bits) << 3
        return [v for v in values
                if not (type(v) is int and 0 <= v < nbits and bits[v >> 3] >> (v & 7) & 1) and v not in self]


class OffsetValues:
    """What the observations of one partition saw at each offset: the first value seen there and the seq of
    its first sighting, and any other value seen there after it, with its own. Two columns indexed by offset
    (16 bytes an offset) while offsets are small and values int64s; a dict of dicts once any is not."""

    __slots__ = ("vals", "seqs", "others", "generic")
    MAX_JUMP = 1 << 20  # an offset this far past the last one turns the columns into a dict

    def __init__(self) -> None:
        self.vals = array("q")
        self.seqs = array("q")  # -1: nothing seen at this offset
        self.others: dict[int, dict[Any, int]] = {}
        self.generic: dict[int, dict[Any, int]] | None = None

    def observe(self, off: int, val: Any, seq: int) -> tuple[Any, int] | bool:
        """Note `val` seen at `off`: False if it had been seen there; True if nothing had; else (the first
        value seen there, its seq). A value that cannot be a dict key raises TypeError, as a dict does."""
        hash(val)
        g = self.generic
        if g is None:
            seqs = self.seqs
            if 0 <= off < len(seqs) and seqs[off] >= 0:
                first = self.vals[off]
                if first == val:
                    return False
                others = self.others.get(off)
                if others is not None and val in others:
                    return False
                self.others.setdefault(off, {})[val] = seq
                return first, seqs[off]
            if type(val) is int and INT64[0] <= val <= INT64[1] and 0 <= off < len(seqs) + self.MAX_JUMP:
                if off >= len(seqs):
                    grow = off + 1 - len(seqs) + len(seqs) // 4
                    seqs.frombytes(b"\xff" * (8 * grow))
                    self.vals.frombytes(bytes(8 * grow))
                self.vals[off] = val
                seqs[off] = seq
                return True
            g = self._to_dict()
        readers = g.get(off)
        if readers is None:
            g[off] = {val: seq}
            return True
        if val in readers:
            return False
        first = next(iter(readers.items()))
        readers[val] = seq
        return first

    def _to_dict(self) -> dict[int, dict[Any, int]]:
        g: dict[int, dict[Any, int]] = {}
        for off, (val, seq) in enumerate(zip(self.vals, self.seqs, strict=True)):
            if seq >= 0:
                g[off] = {val: seq, **self.others.get(off, {})}
        self.generic, self.vals, self.seqs, self.others = g, array("q"), array("q"), {}
        return g

    def holds_firsts(self, recs: list, n: int) -> bool:
        """Whether `recs` (n > 0 of them) are [offset, value] records at offsets that follow on from the
        first's, each holding the value first seen there: the common case of a read. Record by record (a
        read holds three records on average, too few for slicing the columns to pay), unpacked as the
        checkers' record loops unpack them."""
        o = recs[0][0]
        vals, seqs = self.vals, self.seqs
        if type(o) is not int or o < 0 or o + n > len(seqs):
            return False
        try:
            for off, v in recs:
                if off != o or seqs[o] < 0 or v != vals[o]:
                    return False
                o += 1
        except (TypeError, ValueError):  # not [offset, value] pairs: the record loops say what they are
            return False
        return True

    def follow(self, recs: list, n: int, seq: int) -> int:
        """A read's records (n > 0) in the common case: [offset, value] records at offsets that follow on
        from the first's, those seen before holding the value first seen there, then those seen by no read
        yet (int64 values), which are noted as first sightings with seqs from `seq` on (what observe would
        do record by record). Returns how many were new (the last ones of `recs`), or -1 when the read is
        not the common case, having changed nothing."""
        o0 = recs[0][0]
        vals, seqs = self.vals, self.seqs
        if self.generic is not None or type(o0) is not int or o0 < 0 or o0 + n > len(seqs) + self.MAX_JUMP:
            return -1
        o, size = o0, len(seqs)
        try:
            for off, v in recs:  # the records seen before: a prefix (reads follow on), each as first seen
                if off != o:
                    return -1
                if o >= size or seqs[o] < 0:
                    break
                if v != vals[o]:
                    return -1
                o += 1
            else:
                return 0
            k = o - o0
            lo, hi = INT64
            new = array("q")
            for off, v in islice(recs, k, None):  # the rest: seen by no read yet
                if off != o or type(v) is not int or not lo <= v <= hi:
                    return -1
                new.append(v)
                o += 1
        except (TypeError, ValueError):  # not [offset, value] pairs: the record loops say what they are
            return -1
        start = o0 + k
        if o > size:
            grow = o - size + size // 4
            seqs.frombytes(b"\xff" * (8 * grow))
            self.vals.frombytes(bytes(8 * grow))
        if seqs[start:o].count(-1) != n - k:
            return -1  # something was seen among them after all: observe, record by record
        self.vals[start:o] = new
        seqs[start:o] = array("q", range(seq + k, seq + n))
        return n - k

    def first_seq(self, off: int) -> int | None:
        """The seq of the first sighting of anything at `off`, or None."""
        if self.generic is not None:
            readers = self.generic.get(off)
            return next(iter(readers.values())) if readers else None
        return self.seqs[off] if 0 <= off < len(self.seqs) and self.seqs[off] >= 0 else None

    def values_at(self, off: int) -> dict[Any, int]:
        """Every value seen at `off`, first first, with the seq of its first sighting."""
        if self.generic is not None:
            return self.generic.get(off, {})
        s = self.first_seq(off)
        return {} if s is None else {self.vals[off]: s, **self.others.get(off, {})}

    def offsets(self) -> list[int]:
        """The offsets anything was seen at, in order."""
        if self.generic is not None:
            return sorted(self.generic)
        return [off for off, s in enumerate(self.seqs) if s >= 0]

    def entries(self, wanted: Callable[[Any], bool] | None = None) -> Iterator[tuple[int, Any, int]]:
        """(offset, value, seq of its first sighting there) of every value seen, or of those `wanted`."""
        if self.generic is not None:
            for off, readers in self.generic.items():
                for val, seq in readers.items():
                    if wanted is None or wanted(val):
                        yield off, val, seq
            return
        seqs = self.seqs
        for off, val in enumerate(self.vals):
            if seqs[off] >= 0 and (wanted is None or wanted(val)):
                yield off, val, seqs[off]
        for off, readers in self.others.items():
            for val, seq in readers.items():
                if wanted is None or wanted(val):
                    yield off, val, seq

    def values_in(self, wanted: set[Any]) -> Iterator[Any]:
        """The values seen that are among `wanted` (at C speed over the columns)."""
        if self.generic is not None:
            return (v for readers in self.generic.values() for v in readers if v in wanted)
        firsts = compress(self.vals, map(wanted.__contains__, self.vals))
        # a column holds 0 where nothing was seen: a 0 counts only where it was
        if 0 in wanted:
            firsts = (v for v, s in zip(self.vals, self.seqs, strict=True) if s >= 0 and v in wanted)
        return chain(firsts, (v for readers in self.others.values() for v in readers if v in wanted))

    def values(self) -> Iterator[Any]:
        """Every value seen (once per offset it was seen at)."""
        return (val for _, val, _ in self.entries())


class IntColumn:
    """A column of a history's numbers: an array of int32s while they are (4 bytes each), of int64s while
    they are (8 bytes), a list once one is not (any value the history holds)."""

    __slots__ = ("items", "lo", "hi")

    def __init__(self) -> None:
        self.items: array | list = array("i")
        self.lo, self.hi = INT32

    def append(self, v: Any) -> None:
        items = self.items
        if type(items) is array and not (type(v) is int and self.lo <= v <= self.hi):
            if type(v) is int and INT64[0] <= v <= INT64[1]:
                items = self.items = array("q", items)
                self.lo, self.hi = INT64
            else:
                items = self.items = list(items)
        items.append(v)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int) -> Any:
        return self.items[k]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)
