"""Controller faults (issue 9 item 4): the metadata quorum's members, by role.

`--nemesis controller` picks, at each start, one move against the controllers the cluster has:
kill the active controller, pause it (a GC pause past its election timeout), cut it off from
everyone, kill a minority of the quorum (it must keep working), or kill a majority (it must
stop making metadata changes and resume when they return). The stop undoes the move. With a
single controller the moves degrade to "the controller" and the majority is all of it; a minority of one
is nobody, so that move is not drawn there (every start acts on some controller).
Partitions need nodes with their own network (docker, or local as root); elsewhere the
isolating move is left out, not faked. Every act and heal is the shared one of
nemesis/actions.py, so each move is in the run's ledger with its evidence.
"""

from __future__ import annotations

import random
from typing import Any

from kafkaesque_harness.history import INFO, Op
from kafkaesque_harness.nemesis import grudge
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.requirements import IsolatedNodes, can

MOVES = ("kill-active", "pause-active", "isolate-active", "kill-minority", "kill-majority")


class ControllerNemesis(NemesisBase):
    name, start_f, stop_f = "controller", "start-controller", "stop-controller"

    def __init__(self, options: dict[str, Any]):
        self.rng = random.Random(options.get("seed", 0) + 9)
        self.options = options
        self.can_isolate = False
        self.quorum = 0

    def moves(self) -> tuple[str, ...]:
        left_out = {"isolate-active"} if not self.can_isolate else set()
        if self.quorum == 1:
            left_out.add("kill-minority")  # (1 - 1) // 2 = 0 controllers: a start that would do nothing
        return tuple(m for m in MOVES if m not in left_out)

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        if not cluster.controller_nodes():
            raise NemesisRefused(f"the controller fault acts on controllers, and the {cluster.name} cluster names "
                                 "none; drop controller from --nemesis")
        self.quorum = len(cluster.controller_nodes())
        if can(cluster, IsolatedNodes) and len(cluster.nodes()) > 1:
            faults.prepare_network()
            self.can_isolate = True

    def _active(self, cluster) -> str:
        controllers = cluster.controller_nodes()
        active = cluster.active_controller()
        return active if active in controllers else self.rng.choice(controllers)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": self._heal()})
        if op.f != self.start_f:
            raise ValueError(f"controller nemesis cannot do {op.f!r}")
        if self.faults.ledger.active(by=self.name):
            self._heal()  # one move at a time
        move = self.rng.choice(self.moves())
        controllers = cluster.controller_nodes()
        if move in ("kill-active", "pause-active", "isolate-active"):
            nodes = [self._active(cluster)]
        else:
            quorum = len(controllers)
            k = (quorum - 1) // 2 if move == "kill-minority" else quorum // 2 + 1
            nodes = self.rng.sample(controllers, max(k, 1))
        for n in nodes:
            if move == "pause-active":
                self.faults.pause(n, self.name, {"move": move})
            elif move == "isolate-active":
                self.faults.cut(grudge.isolate(cluster.nodes(), n), self.name, nodes=[n], detail={"move": move})
            else:
                self.faults.kill(n, self.name, {"move": move})
        return Op(INFO, op.f, op.process, {"move": move, "controllers": nodes, "quorum": len(controllers)})

    def _heal(self) -> list[str]:
        healed = sorted({n for r in self.faults.ledger.active(by=self.name) for n in r.nodes})
        errors = self.faults.heal(by=self.name)
        if errors:
            raise RuntimeError("controller: could not heal " + "; ".join(errors))
        return healed

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self._heal()
