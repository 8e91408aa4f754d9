"""Nemeses by name (`--nemesis kill,pause`), composed into one that the runner drives."""

from __future__ import annotations

import importlib
from typing import Any

from harness.history import Op

# name -> the class that does it (module, class), imported only when asked for.
_NEMESES = {
    "kill": ("nemesis.process", "KillNemesis"),
    "pause": ("nemesis.process", "PauseNemesis"),
    "partition": ("nemesis.faults", "PartitionNemesis"),
    "lossy-crash": ("nemesis.faults", "LossyCrashNemesis"),
    "clock": ("nemesis.faults", "ClockNemesis"),
    "clock-jump": ("nemesis.faults", "ClockJumpNemesis"),
    "clock-strobe": ("nemesis.faults", "ClockStrobeNemesis"),
    "net": ("nemesis.faults", "NetNemesis"),
    "disk": ("nemesis.faults", "DiskNemesis"),
    "drop-caches": ("nemesis.faults", "DropCachesNemesis"),
}
NEMESIS_NAMES = tuple(_NEMESES)


def _make_one(name: str, options: dict[str, Any]):
    if name not in _NEMESES:
        raise ValueError(f"unknown nemesis {name!r}; valid: {', '.join(NEMESIS_NAMES)}")
    module, cls = _NEMESES[name]
    return getattr(importlib.import_module(module), cls)(options)


class CompositeNemesis:
    """Several nemeses as one: ops dispatch by name; teardown heals every part, whatever fails."""

    name = "composite"

    def __init__(self, parts: list):
        self.parts = parts

    def schedule(self) -> list[tuple[str, str]]:
        return [pair for p in self.parts for pair in p.pairs()]

    def fs(self) -> set[str]:
        return set().union(*(p.fs() for p in self.parts)) if self.parts else set()

    def setup(self, cluster) -> None:
        for p in self.parts:
            p.setup(cluster)

    def invoke(self, cluster, op: Op) -> Op:
        for p in self.parts:
            if op.f in p.fs():
                return p.invoke(cluster, op)
        raise ValueError(f"no nemesis handles {op.f!r}")

    def teardown(self, cluster) -> list[str]:
        errors = []
        for p in self.parts:
            try:
                p.teardown(cluster)
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{p.name}: {type(e).__name__}: {e}")
        return errors


def make_nemesis(names: list[str], options: dict[str, Any]) -> CompositeNemesis:
    return CompositeNemesis([_make_one(n, options) for n in names if n])
