"""Process faults: kill (SIGKILL, later restart), stop (SIGTERM, a controlled shutdown, later restart) and pause
(SIGSTOP, later SIGCONT) of the nodes' processes,
and stall-producer, the same pause for one of the workload's own client processes (inside the harness: a
transactional producer stops mid-transaction past its timeout, workloads/stalls.py).

Targets come from nemesis/targets.py with the cluster's own view of who leads; the acts,
their evidence and the heals are the shared ones of nemesis/actions.py (so each kill and
pause is in the run's ledger). The stop restarts or resumes everything this nemesis hit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.history import INFO, Op
from kafkaesque_harness.nemesis.actions import FaultActions, resumed
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.targets import choose, running_brokers


class ProcessFault(NemesisBase):
    """Each target hit by `act` at the start (one of FaultActions' process faults); `undo` heals it at the stop."""

    name = ""
    start_f = stop_f = ""
    act: Callable[..., Any]    # FaultActions.kill, .pause: (faults, node, by=...)
    undo: Callable[..., Any]   # FaultActions.start, .resume: (faults, node)

    def __init__(self, options: dict[str, Any]):
        self.target = options.get("target", "random-node")
        self.topic = options.get("topic", "queue")
        self.rng = random.Random(options.get("seed", 0))

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        if self.target == "controller" and not cluster.controller_nodes():
            raise NemesisRefused(f"the {self.name} fault targets the controller, and the {cluster.name} cluster "
                                 "names no controller node; pick another --nemesis-target")

    def _targets(self, cluster) -> list[str]:
        leaders, isrs = [], []
        if self.target in ("leader", "isr-member", "last-isr-member", "mixed"):
            parts = cluster.partitions(self.topic)
            leaders = sorted({cluster.node_name(p.leader) for p in parts if p.leader >= 0})
            isrs = [[cluster.node_name(r) for r in p.isr] for p in parts]
        brokers = running_brokers(cluster)
        if not brokers:
            return []
        leaders = [n for n in leaders if n in brokers]
        return choose(self.target, brokers, self.rng, leaders=leaders,
                      controllers=cluster.controller_nodes(), isrs=isrs)

    def _mine(self) -> set[str]:
        """The nodes this nemesis has hit and not healed yet (the ledger's answer, not a list of its own)."""
        return {n for r in self.faults.ledger.active((self.name,), by=self.name) for n in r.nodes}

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            nodes = [n for n in self._targets(cluster) if n not in self._mine()]
            for n in nodes:
                self.act(self.faults, n, by=self.name)
            return Op(INFO, op.f, op.process, {self.name: nodes})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": self._heal_all()})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def _heal_all(self) -> list[str]:
        """Heal every node hit; one node's failure does not stop the others being healed."""
        healed, errors = [], []
        for n in sorted(self._mine()):
            try:
                self.undo(self.faults, n)
                healed.append(n)
            except Exception as e:  # noqa: BLE001 - reported after the rest are healed
                errors.append(f"{n}: {type(e).__name__}: {e}")
        if errors:
            raise RuntimeError(f"{self.name}: could not heal " + "; ".join(errors))
        return healed

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self._heal_all()

class KillNemesis(ProcessFault):
    """SIGKILL the targets; `stop-kill` restarts them (kill -9, as a crash)."""

    name, start_f, stop_f = "kill", "start-kill", "stop-kill"
    act, undo = staticmethod(FaultActions.kill), staticmethod(FaultActions.start)


class StopNemesis(ProcessFault):
    """SIGTERM the targets (a controlled shutdown: the controller moves their leaderships, a coordinator's too,
    before they exit, and they register clean when they come back); `stop-stop` restarts them. Random plans
    draw it like kill: the shutdown path (clean-shutdown file, leadership moved with the broker still up) is
    one a kill never takes."""

    name, start_f, stop_f = "stop", "start-stop", "stop-stop"
    act, undo = staticmethod(FaultActions.stop), staticmethod(FaultActions.start)


class PauseNemesis(ProcessFault):
    """SIGSTOP the targets; `stop-pause` resumes them (a GC pause or a frozen VM)."""

    name, start_f, stop_f = "pause", "start-pause", "stop-pause"
    act, undo = staticmethod(FaultActions.pause), staticmethod(FaultActions.resume)


class StallProducerNemesis(NemesisBase):
    """At the start one client process stops inside an open transaction for its transaction timeout plus
    `stall_past_timeout_s` (FaultActions.stall_producer: any process that holds one); the stop waits for it
    to go on and records what its transaction came to."""

    name, start_f, stop_f = "stall-producer", "start-stall-producer", "stop-stall-producer"

    def __init__(self, options: dict[str, Any]):
        self.past_timeout_s = float(options.get("stall_past_timeout_s", 3.0))

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        why = faults.stall_refusal(f"the {self.name} fault")
        if why:
            raise NemesisRefused(f"{why}, or drop {self.name} from --nemesis")

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            seconds = round(self.faults.txn_timeout_s + self.past_timeout_s, 3)
            rec = self.faults.stall_producer(seconds, self.name)
            if not rec.applied:
                raise RuntimeError(rec.apply_error)
            return Op(INFO, op.f, op.process, {"stalled": rec.evidence, "seconds": seconds})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"resumed": resumed(self.faults.resume_producers(by=self.name))})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self.faults.resume_producers(by=self.name, release=True)
