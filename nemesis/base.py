"""The Nemesis shape (DESIGN.md): setup, invoke(op) -> op, teardown that heals everything it ever did.

Every nemesis acts on the cluster only through the run's FaultActions (nemesis/actions.py),
which it is handed at setup: that is what puts each fault in the run's ledger, with its
evidence, and what lets the final heal undo everything whoever did it.

What the runner and the composite ask of a nemesis beyond that (its start/stop pairs, its plan,
what it left out, whether it heals last, its target, its refusal for what the cluster or the
nodes lack) is part of the shape, with defaults in NemesisBase, so nobody has to look for an
attribute. Every nemesis's faults are a plan run by the one scheduler (nemesis/plan.py): the
random faults follow the run's schedule; a nemesis that times its own faults against the
cluster's state (SelfDriven: scenarios, the protocol nemesis) makes its own plan. Driving
itself is an ability, asked through nemesis/requirements.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis.plan import Event, Plan, timed
from kafkaesque_harness.nemesis.requirements import ability_refusal, can, capability_refusal, target_refusal

if TYPE_CHECKING:
    from kafkaesque_harness.nemesis.actions import FaultActions


class NemesisRefused(RuntimeError):
    """A fault this cluster or kernel cannot do; the message names the fault and the reason."""


class Nemesis(Protocol):
    name: str
    heal_last: bool         # healed after every other part and the ledger's final heal
    target: str             # --nemesis-target as the capability check reads it ("controller": every node)
    not_run: Sequence[str]  # what it left out for what the nodes lack, one sentence each (faults_not_run)

    def fs(self) -> set[str]:
        """The op names this nemesis handles, e.g. {"start-kill", "stop-kill"}."""

    def pairs(self) -> list[tuple[str, str]]:
        """The (start, stop) op pairs the schedule times; none for a nemesis that drives itself."""

    def plan(self, cluster, events: Iterable[Event], stopped: Callable[[], bool]) -> Plan:
        """Its faults as the one scheduler's plan (nemesis/plan.py): the schedule's start/stop `events`, or
        for a nemesis that drives itself, its own steps."""

    def ability_refusal(self, cluster) -> str | None:
        """One sentence refusing this nemesis for an ability the cluster lacks (nemesis/requirements.py), or None."""

    def capability_refusal(self, cluster, capabilities: dict[str, dict[str, Any]]) -> str | None:
        """One sentence refusing this nemesis for what the probed nodes lack (nemesis/requirements.py), or None."""

    def setup(self, cluster, faults: FaultActions) -> None:
        """Refuse (NemesisRefused) what this cluster cannot do; keep `faults` for acting later."""

    def invoke(self, cluster, op: Op) -> Op:
        """Perform the fault op; return its completion (type "info", value = what was done)."""

    def teardown(self, cluster) -> None:
        """Heal everything this nemesis ever did; must not raise for an already-healed fault."""


@runtime_checkable
class SelfDriven(Protocol):
    """A nemesis that times its own faults against the cluster's state (scenarios, the protocol nemesis)."""

    def own_plan(self, cluster) -> Plan:
        """Its steps, decided one at a time against the cluster's state (the scheduler ends it with the run)."""


class NemesisBase:
    """The defaults of the Nemesis shape; every nemesis of the project derives from it. A nemesis whose
    fault starts and stops names its two ops in `start_f` and `stop_f`: they are its pair and its fs."""

    name = ""
    heal_last = False
    target = ""
    not_run: Sequence[str] = ()
    start_f = ""
    stop_f = ""
    faults: FaultActions | None = None  # the run's FaultActions, from setup

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.start_f, self.stop_f)] if self.start_f else []

    def fs(self) -> set[str]:
        return {self.start_f, self.stop_f} if self.start_f else set()

    def setup(self, cluster, faults: FaultActions) -> None:
        """Refuse a cluster without the abilities the kind declares; keep `faults`. Subclasses call it first."""
        why = self.ability_refusal(cluster)
        if why:
            raise NemesisRefused(why)
        self.faults = faults

    def ability_refusal(self, cluster) -> str | None:
        return ability_refusal(self.name, cluster) or target_refusal(self.name, self.target, cluster)

    def plans(self, cluster, events: Iterable[Event]) -> list[Plan]:
        """What the scheduler runs for this nemesis: its own plan, or the random events' (nemesis/plan.py)."""
        return [self.own_plan(cluster)] if can(self, SelfDriven) else [timed(events, self, cluster)]

    def capability_refusal(self, cluster, capabilities: dict[str, dict[str, Any]]) -> str | None:
        return capability_refusal(self.name, cluster, capabilities, self.target)
