"""What a fault is, declared in one place: the shape every module of nemesis/kinds/ fills in.

A fault kind says its name (`--nemesis NAME`), one line of help, the options it reads (each with
its type, default and help: `--nemesis-option KEY=VALUE`), what it needs of the cluster
(abilities: names for now, the Protocols of nemesis/requirements.py to come) and of each node
(capabilities the set-up probe measures, clusters/capabilities.py), and the factory of the
nemesis that acts and heals. The registry (nemesis/registry.py) finds every kind by itself, so
adding a fault is adding one file to nemesis/kinds/ that defines `KIND`.

The nemesis the factory makes has the Nemesis shape of nemesis/base.py and acts only through the
run's FaultActions and FaultLedger, like every other.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# What a kind may say it needs of the cluster (checked by the nemesis's own setup today):
ABILITIES = {
    "remotes": "a shell on each node, and nodes with a network, disk and clock of their own",
    "data-dir": "the broker's data dir on its node (our reference broker)",
    "lossy-disk": "brokers writing through the lossy file system",
    "clock": "nodes started with the clock preload",
    "pausable": "processes that can be paused and resumed",
    "controller-admin": "the reference broker's controller (membership changes)",
    "drop-caches": "a writable /proc/sys/vm/drop_caches on the nodes",
}


@dataclass(frozen=True)
class Option:
    """One setting a kind reads from the nemesis options (the key is global: prefix it with the kind)."""

    key: str
    kind: type           # bool, int, float or str
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    low: float | None = None    # numbers: the smallest value allowed (inclusive)
    high: float | None = None   # numbers: the largest value allowed (inclusive)

    def parse(self, text: str) -> Any:
        """A command line's text as this option's value (ValueError with the reason when it is not)."""
        if self.kind is bool:
            if text.lower() in ("true", "yes", "1", "on"):
                return True
            if text.lower() in ("false", "no", "0", "off"):
                return False
            raise ValueError("is not true or false")
        try:
            return self.kind(text)
        except ValueError:
            raise ValueError(f"is not {_WORDS[self.kind]}") from None

    def problem(self, value: Any) -> str | None:
        """Why `value` is not a value of this option (a phrase: "is not a number"), or None."""
        if self.kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            ok = isinstance(value, self.kind) and (self.kind is bool or not isinstance(value, bool))
        if not ok:
            return f"is not {_WORDS[self.kind]}"
        if self.choices and value not in self.choices:
            return f"is not one of {', '.join(map(str, self.choices))}"
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            return f"is not within [{self.low:g}, {self.high:g}]" if self.high is not None else \
                f"is below {self.low:g}"
        return None


_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True)
class FaultKind:
    name: str                                # --nemesis NAME, and the ledger's `by`
    help: str                                # one line: what it does to the cluster, and how it is undone
    make: Callable[[dict[str, Any]], Any]    # options -> the nemesis (nemesis/base.py's shape)
    options: tuple[Option, ...] = ()
    abilities: tuple[str, ...] = ()          # keys of ABILITIES
    capabilities: tuple[str, ...] = ()       # what the set-up probe must find on the nodes (iptables, fuse, ...)
    on: Literal["brokers", "all"] = "brokers"  # ... on which nodes
    alone: bool = False                      # times its own faults against the cluster: no other part beside it

    def __post_init__(self) -> None:
        unknown = [a for a in self.abilities if a not in ABILITIES]
        if unknown:
            raise ValueError(f"fault kind {self.name}: unknown ability {unknown[0]!r}; valid: {', '.join(ABILITIES)}")

    def defaults(self) -> dict[str, Any]:
        return {o.key: o.default for o in self.options}


def lazy(path: str) -> Callable[[dict[str, Any]], Any]:
    """A factory for the class at "module:Class", imported only when a run asks for the fault (so
    listing the kinds imports none of the nemeses)."""
    module, _, cls = path.partition(":")

    def make(options: dict[str, Any]) -> Any:
        return getattr(importlib.import_module(module), cls)(options)

    make.__qualname__ = f"lazy({path})"
    return make
