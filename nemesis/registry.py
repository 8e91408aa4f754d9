"""Nemeses by name (`--nemesis kill,pause`), composed into one that the runner drives."""

from __future__ import annotations

import importlib
from typing import Any

from history import Op
from nemesis.base import NemesisBase, NemesisRefused, SelfDriven

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
    "protocol": ("nemesis.protocol", "ProtocolNemesis"),
    "drop-caches": ("nemesis.faults", "DropCachesNemesis"),
    "controller": ("nemesis.controller", "ControllerNemesis"),
    "membership": ("nemesis.membership", "MembershipNemesis"),
}
NEMESIS_NAMES = tuple(_NEMESES)


SCENARIO_PREFIX = "scenario:"  # `--nemesis scenario:NAME` runs one protocol-aware scenario (nemesis/scenario.py)


def scenario_names() -> tuple[str, ...]:
    from nemesis.scenario import SCENARIOS

    return tuple(SCENARIO_PREFIX + s for s in SCENARIOS)


def nemesis_problem(names: list[str], where: str = "") -> str | None:
    """Why this list of nemesis names cannot run, in one sentence, or None: the one check the CLI
    and campaign files share (`where` says where the names came from)."""
    files = [n for n in names if n.startswith(SCENARIO_PREFIX) and n.endswith(".toml")]
    bad = [n for n in names if n not in NEMESIS_NAMES and n not in scenario_names() and n not in files]
    if bad:
        return (f"unknown nemesis {', '.join(map(repr, bad))}{where}; valid: {', '.join(NEMESIS_NAMES)}, "
                f"one of {', '.join(scenario_names())}, or scenario:FILE.toml")
    for n in files:
        from nemesis.scenario import ScenarioFileError, load_scenario_file

        try:
            load_scenario_file(n[len(SCENARIO_PREFIX):])
        except ScenarioFileError as e:
            return str(e).rstrip(".") + where
    if any(n.startswith(SCENARIO_PREFIX) or n == "protocol" for n in names) and len(names) > 1:
        return f"a scenario or the protocol nemesis times its own faults against the cluster's state: give it alone{where}"
    return None


def _make_one(name: str, options: dict[str, Any]):
    if name.startswith(SCENARIO_PREFIX):
        from nemesis.scenario import ScenarioNemesis

        return ScenarioNemesis(name[len(SCENARIO_PREFIX):], options)
    if name not in _NEMESES:
        raise ValueError(f"unknown nemesis {name!r}; valid: {', '.join(NEMESIS_NAMES)}")
    module, cls = _NEMESES[name]
    return getattr(importlib.import_module(module), cls)(options)


class CompositeNemesis(NemesisBase):
    """Several nemeses as one: ops dispatch by name; teardown heals every part, whatever fails, then
    whatever the run's ledger still holds active."""

    name = "composite"

    def __init__(self, parts: list):
        self.parts = parts
        self.faults = None  # the run's FaultActions, from setup

    def drivers(self) -> list[SelfDriven]:
        """Parts that time their own faults (scenarios) instead of following the schedule."""
        return [d for p in self.parts for d in p.drivers()]

    def pairs(self) -> list[tuple[str, str]]:
        return [pair for p in self.parts for pair in p.pairs()]

    def schedule(self) -> list[tuple[str, str]]:
        """The start/stop pairs of every part, for the runner's NemesisSchedule."""
        return self.pairs()

    @property
    def not_run(self) -> list[str]:
        """What the parts left out for what the nodes lack (results.json `faults_not_run`)."""
        return [x for p in self.parts for x in p.not_run]

    def fs(self) -> set[str]:
        return set().union(*(p.fs() for p in self.parts)) if self.parts else set()

    def setup(self, cluster, faults) -> None:
        # What the nodes cannot do is refused for every part before any part is set up
        # (nemesis/requirements.py), so a refusal never leaves a half-prepared fault behind.
        caps = cluster.capabilities
        if caps:
            for p in self.parts:
                why = p.capability_refusal(cluster, caps)
                if why:
                    raise NemesisRefused(why)
        self.faults = faults
        for p in self.parts:
            p.setup(cluster, faults)

    def invoke(self, cluster, op: Op) -> Op:
        for p in self.parts:
            if op.f in p.fs():
                return p.invoke(cluster, op)
        raise ValueError(f"no nemesis handles {op.f!r}")

    def teardown(self, cluster) -> list[str]:
        errors = []

        def heal(p) -> None:
            try:
                p.teardown(cluster)
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{p.name}: {type(e).__name__}: {e}")

        # Parts marked heal_last (membership) wait for every broker, so the others heal first, and the
        # ledger then undoes whatever is still active, whoever did it (a part whose own heal failed).
        for p in [p for p in self.parts if not p.heal_last]:
            heal(p)
        if self.faults is not None:
            errors += self.faults.heal_everything()
        for p in [p for p in self.parts if p.heal_last]:
            heal(p)
        return errors


def make_nemesis(names: list[str], options: dict[str, Any]) -> CompositeNemesis:
    return CompositeNemesis([_make_one(n, options) for n in names if n])
