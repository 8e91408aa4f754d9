"""The Nemesis shape (DESIGN.md): setup, invoke(op) -> op, teardown that heals everything it ever did.

Every nemesis acts on the cluster only through the run's FaultActions (nemesis/actions.py),
which it is handed at setup: that is what puts each fault in the run's ledger, with its
evidence, and what lets the final heal undo everything whoever did it.

What the runner and the composite ask of a nemesis beyond that (its start/stop pairs, whether
it drives itself, what it left out, whether it heals last, its target, its refusal for what
the nodes lack) is part of the shape, with defaults in NemesisBase, so nobody has to look for
an attribute. Driving itself is an ability (SelfDriven), asked through nemesis/requirements.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from history import Op
from nemesis.requirements import can, capability_refusal, why_not

if TYPE_CHECKING:
    from nemesis.actions import FaultActions


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

    def drivers(self) -> list[SelfDriven]:
        """The nemeses (itself, or its parts) that time their own faults instead of following the schedule."""

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

    def drive(self, cluster, record: Callable[[str, Any, Callable[[], Any]], Any], stopped: Callable[[], bool]
              ) -> None:
        """Run until done or `stopped()`; `record(f, value, thunk)` writes each step's invoke and completion."""


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
        self.faults = faults

    def require(self, cluster, ability: type, need: str) -> None:
        """Refuse, in one sentence, a cluster without `ability` (nemesis/requirements.py): "the NAME fault
        <need>: <why not>; drop NAME from --nemesis"."""
        why = why_not(cluster, ability)
        if why:
            raise NemesisRefused(f"the {self.name} fault {need}: {why}; drop {self.name} from --nemesis")

    def drivers(self) -> list[SelfDriven]:
        return [self] if can(self, SelfDriven) else []

    def capability_refusal(self, cluster, capabilities: dict[str, dict[str, Any]]) -> str | None:
        return capability_refusal(self.name, cluster, capabilities, self.target)
