"""The Nemesis shape (DESIGN.md): setup, invoke(op) -> op, teardown that heals everything it ever did.

Every nemesis acts on the cluster only through the run's FaultActions (nemesis/actions.py),
which it is handed at setup: that is what puts each fault in the run's ledger, with its
evidence, and what lets the final heal undo everything whoever did it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from history import Op

if TYPE_CHECKING:
    from nemesis.actions import FaultActions


class NemesisRefused(RuntimeError):
    """A fault this cluster or kernel cannot do; the message names the fault and the reason."""


class Nemesis(Protocol):
    name: str

    def fs(self) -> set[str]:
        """The op names this nemesis handles, e.g. {"start-kill", "stop-kill"}."""

    def setup(self, cluster, faults: FaultActions) -> None:
        """Refuse (NemesisRefused) what this cluster cannot do; keep `faults` for acting later."""

    def invoke(self, cluster, op: Op) -> Op:
        """Perform the fault op; return its completion (type "info", value = what was done)."""

    def teardown(self, cluster) -> None:
        """Heal everything this nemesis ever did; must not raise for an already-healed fault."""
