"""Nemeses by name (`--nemesis kill,pause`), composed into one that the runner drives."""

from __future__ import annotations

from typing import Any

from harness.history import Op

NEMESIS_NAMES = ("kill", "pause", "partition", "lossy-crash", "clock", "net", "disk")


def _make_one(name: str, options: dict[str, Any]):
    if name == "kill":
        from nemesis.process import KillNemesis

        return KillNemesis(options)
    if name == "pause":
        from nemesis.process import PauseNemesis

        return PauseNemesis(options)
    if name == "partition":
        from nemesis.faults import PartitionNemesis

        return PartitionNemesis(options)
    if name == "lossy-crash":
        from nemesis.faults import LossyCrashNemesis

        return LossyCrashNemesis(options)
    if name == "disk":
        from nemesis.faults import DiskNemesis

        return DiskNemesis(options)
    if name == "net":
        from nemesis.faults import NetNemesis

        return NetNemesis(options)
    if name == "clock":
        from nemesis.faults import ClockNemesis

        return ClockNemesis(options)
    raise ValueError(f"unknown nemesis {name!r}; valid: {', '.join(NEMESIS_NAMES)}")


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
