"""Sequential models for the linearizability checker (Porcupine's shape: init, step, partition, describe).

An operation reaches a model as (input, output): input is what was asked, output what was
observed, or UNKNOWN_OUTPUT for an indeterminate op (it is then always legal and applies
its effect). States are hashable (the search memoizes (linearized set, state)). `observes`
says whether a call's output constrains the state: a history with none (writes only) is
legal in every order and proves nothing.

Models: register, cas-register (and Porcupine's etcd register, which is a CAS register
whose initial state is "absent"), kv (string registers per key, put/append/get), and log
(one append-only log per key: sends append at the next offset, reads return a window of
the log, the final read returns everything up to the end).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

UNKNOWN_OUTPUT = object()  # the op's outcome was not observed (info / timeout)


class _Unseen:
    def __repr__(self) -> str:
        return "<a value no read returned>"


UNSEEN = _Unseen()  # the log search's stand-in for values no read returned
ABSENT = None


@dataclass(frozen=True)
class Call:
    """One operation as the search sees it."""

    id: int
    key: Hashable
    input: Any
    output: Any
    call: int       # position of the invocation (time order)
    ret: int        # position of the completion; a large number for indeterminate ops
    op_index: int   # index of the invocation in the original history (for counterexamples)


class Model:
    name = "model"
    # True when every op with UNKNOWN_OUTPUT is legal in every state: the search may then leave
    # such an op out, and treat two with equal inputs as interchangeable (checkers/linearizable.py).
    indeterminate_always_legal = False

    def init(self) -> Hashable:
        raise NotImplementedError

    def step(self, state: Hashable, input: Any, output: Any) -> tuple[bool, Hashable]:
        raise NotImplementedError

    def preserves_state(self, input: Any, output: Any) -> bool:
        """True if the op, wherever it is legal, leaves the state as it is (a read): the search then
        places it as soon as it is legal, with no alternative to try."""
        return False

    def search_inputs(self, calls: Sequence[Call]) -> list[Any]:
        """The inputs the search steps with: the calls' own, or ones that drop what no op can observe
        (so that states differing only there are one state)."""
        return [c.input for c in calls]

    def invariant(self, determinate: Sequence[tuple[Any, Any]]):
        """A test that every state the search reaches must pass, given the (input as searched, output)
        of the partition's determinate calls (each of which must take effect), or None."""
        return None

    def overwrites(self, input: Any, output: Any) -> bool:
        """True if the op is legal in every state and leaves a state that does not depend on the
        one before (a write, a put)."""
        return False

    def extends_state(self, input: Any, output: Any) -> bool:
        """True if the op, wherever it is legal, leaves a state that `reach` still accepts whenever
        it accepted the state before (an append, a read); False if it may overwrite (a put)."""
        return False

    def reach(self, input: Any, output: Any):
        """For a determinate op: a test of states that is False only if, after ops that extend the
        state (see extends_state) and nothing else, the op can never be legal; None if no test."""
        return None

    def observes(self, c: Call) -> bool:
        """Whether the call's observed output constrains the state (a read, a cas whose outcome is
        known): a history without one is legal in any order, so it proves nothing."""
        return c.output is not UNKNOWN_OUTPUT

    def describe_state(self, state: Hashable) -> str:
        return repr(state)

    def describe_op(self, c: Call) -> str:
        out = "?" if c.output is UNKNOWN_OUTPUT else c.output
        return f"{c.input!r} -> {out!r}"


class CasRegister(Model):
    """read / write v / cas [a b]; inputs ("read",), ("write", v), ("cas", a, b);
    outputs: the value read; for cas True (matched) or False (ran and did not match)."""

    name = "cas-register"
    indeterminate_always_legal = True

    def __init__(self, initial: Any = ABSENT):
        self.initial = initial

    def init(self) -> Hashable:
        return self.initial

    def step(self, state, input, output):
        f = input[0]
        if f == "read":
            return (output is UNKNOWN_OUTPUT or output == state), state
        if f == "write":
            return True, input[1]
        if f == "cas":
            a, b = input[1], input[2]
            if output is UNKNOWN_OUTPUT:
                return True, (b if state == a else state)
            return (state == a) == bool(output), (b if output else state)
        raise ValueError(f"cas-register has no operation {f!r}")

    def overwrites(self, input, output):
        return input[0] == "write"

    def preserves_state(self, input, output):
        # a read, or a cas known not to have matched
        return input[0] == "read" or (input[0] == "cas" and output is not UNKNOWN_OUTPUT and not output)

    def observes(self, c: Call) -> bool:
        return c.input[0] in ("read", "cas") and c.output is not UNKNOWN_OUTPUT

    def describe_state(self, state) -> str:
        return "absent" if state is ABSENT else f"the register holds {state!r}"

    def describe_op(self, c: Call) -> str:
        f = c.input[0]
        unknown = c.output is UNKNOWN_OUTPUT
        if f == "read":
            return "read (no answer)" if unknown else f"read {'absent' if c.output is ABSENT else repr(c.output)}"
        if f == "write":
            return f"write {c.input[1]!r}" + (" (outcome unknown)" if unknown else "")
        res = "outcome unknown" if unknown else ("matched" if c.output else "did not match")
        return f"cas {c.input[1]!r}->{c.input[2]!r} ({res})"


class Register(CasRegister):
    name = "register"

    def step(self, state, input, output):
        if input[0] == "cas":
            raise ValueError("the register model has no cas; use --model cas-register")
        return super().step(state, input, output)


class KV(Model):
    """String registers per key, initially "": ("get", k) -> s, ("put", k, s), ("append", k, s)."""

    name = "kv"
    indeterminate_always_legal = True

    def init(self) -> Hashable:
        return ""

    def step(self, state, input, output):
        f = input[0]
        if f == "get":
            return (output is UNKNOWN_OUTPUT or output == state), state
        if f == "put":
            return True, input[2]
        if f == "append":
            return True, state + input[2]
        raise ValueError(f"kv has no operation {f!r}")

    def preserves_state(self, input, output):
        return input[0] == "get"

    def overwrites(self, input, output):
        return input[0] == "put"

    def extends_state(self, input, output):
        return input[0] != "put"

    def reach(self, input, output):
        # appends only lengthen the string: a get can still see "ab..." only from a prefix of it
        return output.startswith if input[0] == "get" and isinstance(output, str) else None

    def observes(self, c: Call) -> bool:
        return c.input[0] == "get" and c.output is not UNKNOWN_OUTPUT

    def describe_state(self, state) -> str:
        return f"the key holds {state!r}"


class Log(Model):
    """One append-only log (per key). Inputs: ("append", v) -> offset; ("read", ((o, v), ...), end)
    where end is None for a window read (a poll) or the HWM the read claims is the log's end
    (a final read). State: the tuple of committed values."""

    name = "log"
    indeterminate_always_legal = True

    def init(self) -> Hashable:
        return ()

    def step(self, state, input, output):
        f = input[0]
        if f == "append":
            if output is UNKNOWN_OUTPUT or output == len(state):
                return True, state + (input[1],)
            return False, state
        if f == "read":
            if output is UNKNOWN_OUTPUT:
                return True, state  # a read with no answer constrains nothing (as in the other models)
            records, end = input[1], input[2]
            for o, v in records:
                if o >= len(state) or state[o] != v:
                    return False, state
            return (end is None or end == len(state)), state
        raise ValueError(f"log has no operation {f!r}")

    def preserves_state(self, input, output):
        return input[0] == "read"

    def search_inputs(self, calls):
        # A value that no read returned is never compared with anything: sends of such values are
        # interchangeable, so the search sees one placeholder for all of them.
        seen = set()
        try:
            for c in calls:
                if c.input[0] == "read":
                    seen.update(v for _, v in c.input[1])
            return [("append", UNSEEN) if c.input[0] == "append" and c.input[1] not in seen else c.input
                    for c in calls]
        except TypeError:  # an unhashable value: keep every input as it is
            return [c.input for c in calls]

    def invariant(self, determinate):
        # Offsets never change value, and every acknowledgement and read must take effect: a state
        # may only put at its last offset the value that any of them observed there (if any). Each
        # step appends one record, so testing the last offset of each new state tests them all.
        observed: dict[int, Any] = {}
        for input, output in determinate:
            if input[0] == "append":
                observed.setdefault(output, input[1])
            else:
                for o, v in input[1]:
                    observed.setdefault(o, v)
        if not observed:
            return None
        missing = object()

        def keeps_observed_values(state):
            v = observed.get(len(state) - 1, missing)
            return v is missing or (bool(state) and state[-1] == v)
        return keeps_observed_values

    def extends_state(self, input, output):
        return True  # the log only grows

    def reach(self, input, output):
        if input[0] == "append":
            return lambda state: len(state) <= output  # the log must not have passed its offset
        records, end = input[1], input[2]

        def can_still_read(state):
            n = len(state)
            return (end is None or end >= n) and all(state[o] == v for o, v in records if o < n)
        return can_still_read

    def observes(self, c: Call) -> bool:
        return c.input[0] == "read" or c.output is not UNKNOWN_OUTPUT  # a read, or an append's offset

    def describe_state(self, state) -> str:
        tail = ", ".join(map(repr, state[-6:]))
        return f"the log has {len(state)} record(s)" + (f", ending ...{tail}" if state else "")

    def describe_op(self, c: Call) -> str:
        if c.input[0] == "append":
            out = "outcome unknown" if c.output is UNKNOWN_OUTPUT else f"acknowledged at offset {c.output}"
            return f"send {c.input[1]!r} ({out})"
        records, end = c.input[1], c.input[2]
        span = f"offsets {records[0][0]}..{records[-1][0]}" if records else "nothing"
        return f"read {span}" + (f" and an end of {end}" if end is not None else "")


MODELS = {"register": Register, "cas-register": CasRegister, "etcd": CasRegister, "kv": KV, "log": Log}
