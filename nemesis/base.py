"""The Nemesis shape (DESIGN.md): setup, invoke(op) -> op, teardown that heals everything it ever did."""

from __future__ import annotations

from typing import Protocol

from harness.history import Op


class NemesisRefused(RuntimeError):
    """A fault this cluster or kernel cannot do; the message names the fault and the reason."""


class Nemesis(Protocol):
    name: str

    def fs(self) -> set[str]:
        """The op names this nemesis handles, e.g. {"start-kill", "stop-kill"}."""

    def setup(self, cluster) -> None: ...

    def invoke(self, cluster, op: Op) -> Op:
        """Perform the fault op; return its completion (type "info", value = what was done)."""

    def teardown(self, cluster) -> None:
        """Heal everything this nemesis ever did; must not raise for an already-healed fault."""
