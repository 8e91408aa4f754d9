"""What a fault is, declared in one place: the shape every module of nemesis/kinds/ fills in.

A fault kind says its name (`--nemesis NAME`), one line of help, the options it reads (each with
its type, default and help: `--nemesis-option KEY=VALUE`), what it needs of the cluster
(abilities: the Protocols of clusters/base.py, each with the phrase that says why, checked for
every kind by nemesis/requirements.py before any fault is set up) and of each node
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

from kafkaesque_harness.clusters.base import (
    ClientCuts,
    ClockControl,
    ControllerAdmin,
    IsolatedNodes,
    LossyDisk,
    ObjectStore,
    PageCacheDrop,
    Pausable,
    SegmentFiles,
)


@dataclass(frozen=True)
class Need:
    """An ability a kind needs of the cluster (a Protocol of clusters/base.py) and why, as the refusal
    says it: "the NAME fault <why>: <what the cluster lacks>; drop NAME from --nemesis"."""

    ability: type
    why: str


# What the kinds need of the cluster, said once.
OWN_NODES = Need(IsolatedNodes, "needs nodes with their own network, disk and clock (--cluster docker, or "
                                "--cluster local as root for a namespace per node)")
LOSSY_DISK = Need(LossyDisk, "needs brokers writing through the lossy file system")
CLOCK_PRELOAD = Need(ClockControl, "needs nodes started with the clock preload")
PAUSABLE = Need(Pausable, "needs a cluster that can pause processes")
DATA_DIRS = Need(SegmentFiles, "needs the brokers' data dirs and logs")
CONTROLLER_ADMIN = Need(ControllerAdmin, "changes replica sets through the reference broker's controller")
PAGE_CACHE_DROP = Need(PageCacheDrop, "needs the nodes' page-cache control")
OBJECT_STORE = Need(ObjectStore, "acts on the object store the brokers keep their data in (a node of role storage "
                                 "in a cluster file: clusters/examples/tansu-s3.toml)")
CLIENT_CUTS = Need(ClientCuts, "needs the address the harness's clients reach each broker from")


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
    abilities: tuple[Need, ...] = ()         # what it needs of the cluster (nemesis/requirements.py checks)
    capabilities: tuple[str, ...] = ()       # what the set-up probe must find on the nodes (iptables, fuse, ...)
    on: Literal["brokers", "all"] = "brokers"  # ... on which nodes
    self_driven: bool = False                # times its own faults against the cluster: one such part a run,
                                             # random faults beside it (nemesis/plan.py drive)

    def __post_init__(self) -> None:
        wrong = [a for a in self.abilities if not isinstance(a, Need)]
        if wrong:
            raise ValueError(f"fault kind {self.name}: ability {wrong[0]!r} is not a Need; declare it as "
                             "Need(a Protocol of clusters/base.py, why)")

    def defaults(self) -> dict[str, Any]:
        return {o.key: o.default for o in self.options}


def lazy(path: str) -> Callable[[dict[str, Any]], Any]:
    """A factory for the class at "module:Class", imported only when a run asks for the fault (so
    listing the kinds imports none of the nemeses). The module is named in full, from the namespace:
    a bare `nemesis.x` would be found only from a checkout's root."""
    module, _, cls = path.partition(":")
    if not module.startswith("kafkaesque_harness.") or not cls:
        raise ValueError(f"lazy({path!r}): name the class as 'kafkaesque_harness.<room>.<module>:<Class>'")

    def make(options: dict[str, Any]) -> Any:
        return getattr(importlib.import_module(module), cls)(options)

    make.__qualname__ = f"lazy({path})"
    return make
