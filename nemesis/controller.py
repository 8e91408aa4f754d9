"""Controller faults (issue 9 item 4): the metadata quorum's members, by role.

`--nemesis controller` picks, at each start, one move against the controllers the cluster has:
kill the active controller, pause it (a GC pause past its election timeout), cut it off from
everyone, kill a minority of the quorum (it must keep working), or kill a majority (it must
stop making metadata changes and resume when they return). The stop undoes the move. With a
single controller the moves degrade to "the controller" and the majority is all of it.
Partitions need nodes with their own network (docker, or local as root); elsewhere the
isolating move is left out, not faked.
"""

from __future__ import annotations

import random
from typing import Any

from harness.history import INFO, Op
from nemesis import grudge

MOVES = ("kill-active", "pause-active", "isolate-active", "kill-minority", "kill-majority")


class ControllerNemesis:
    name, start_f, stop_f = "controller", "start-controller", "stop-controller"

    def __init__(self, options: dict[str, Any]):
        self.rng = random.Random(options.get("seed", 0) + 9)
        self.options = options
        self.killed: set[str] = set()
        self.paused: set[str] = set()
        self.partition = None  # a PartitionNemesis when the nodes can be cut off

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.start_f, self.stop_f)]

    def fs(self) -> set[str]:
        return {self.start_f, self.stop_f}

    def moves(self) -> tuple[str, ...]:
        return MOVES if self.partition is not None else tuple(m for m in MOVES if m != "isolate-active")

    def setup(self, cluster) -> None:
        if getattr(cluster, "isolated_nodes", False):
            from nemesis.faults import PartitionNemesis

            self.partition = PartitionNemesis({**self.options, "target": "controller"})
            self.partition.setup(cluster)

    def _active(self, cluster) -> str:
        controllers = cluster.controller_nodes()
        active = cluster.active_controller()
        return active if active in controllers else self.rng.choice(controllers)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": self._heal(cluster)})
        if op.f != self.start_f:
            raise ValueError(f"controller nemesis cannot do {op.f!r}")
        if self.killed or self.paused or (self.partition is not None and self.partition.cut):
            self._heal(cluster)  # one move at a time
        move = self.rng.choice(self.moves())
        controllers = cluster.controller_nodes()
        if move in ("kill-active", "pause-active", "isolate-active"):
            nodes = [self._active(cluster)]
        else:
            quorum = len(controllers)
            k = (quorum - 1) // 2 if move == "kill-minority" else quorum // 2 + 1
            nodes = self.rng.sample(controllers, max(k, 1) if quorum > 1 or move == "kill-majority" else 0)
        for n in nodes:
            if move == "pause-active":
                cluster.pause(n)
                self.paused.add(n)
            elif move == "isolate-active":
                self.partition.apply(cluster, grudge.isolate(cluster.nodes(), n))
            else:
                cluster.kill(n)
                self.killed.add(n)
        return Op(INFO, op.f, op.process, {"move": move, "controllers": nodes, "quorum": len(controllers)})

    def _heal(self, cluster) -> list[str]:
        healed, errors = [], []
        steps = [(n, cluster.resume) for n in sorted(self.paused)] + [(n, cluster.start) for n in sorted(self.killed)]
        for n, fn in steps:
            try:
                fn(n)
                healed.append(n)
            except Exception as e:  # noqa: BLE001 - heal the rest, then report
                errors.append(f"{n}: {type(e).__name__}: {e}")
        self.paused.clear()
        self.killed.clear()
        if self.partition is not None and self.partition.cut:
            healed += self.partition._heal(cluster)
        if errors:
            raise RuntimeError("controller: could not heal " + "; ".join(errors))
        return healed

    def teardown(self, cluster) -> None:
        self._heal(cluster)
        if self.partition is not None:
            self.partition.teardown(cluster)
