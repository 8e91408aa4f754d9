"""Faults of a diskless cluster (issue 43): the object store its brokers keep their data in (the nodes of
role `storage`, clusters/examples/tansu-s3.toml), the links to it, and the clients' link to one broker.

- storage-pause: SIGSTOP the store (every request of every broker hangs); the stop resumes it.
- storage-kill: SIGKILL the store and, at the stop, start it again; refused by name where the store keeps
  its objects only in memory (ObjectStore.store_kill_unavailable: moto's server), since it would come
  back empty and every record would be lost by construction, not by a bug.
- storage-partition: cut one broker, or every broker, off from the store (both directions); the stop
  reconnects them. `storage_partition_target`: one-broker, all-brokers, or mixed (each fault draws one).
- storage-slow: a tbf bandwidth limit on the store's egress (its answers to every broker held to
  `storage_rate`); the stop removes it.
- client-partition: one broker drops every packet from the harness's clients (ClientCuts), while it still
  reaches the store; the stop reconnects them.

Kill and pause of brokers are the kill and pause faults (nemesis/process.py), which target the brokers
only. A partition between brokers, which share nothing but the store, cuts nothing the system uses: the
partition fault refuses such a cluster by name (nemesis/faults.py) and points here. Every act, its
evidence and its heal are nemesis/actions.py's, in the run's ledger.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from kafkaesque_harness.history import INFO, Op
from kafkaesque_harness.nemesis import grudge
from kafkaesque_harness.nemesis.actions import FaultActions
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.grudge import STORAGE_PARTITION_TARGETS, storage_grudge
from kafkaesque_harness.nemesis.process import ProcessFault


def _rng(options: dict[str, Any], name: str) -> random.Random:
    # crc32, not hash(): str hashes change from process to process, and --seed must replay a run
    return random.Random(options.get("seed", 0) + zlib.crc32(name.encode()) % 1000)


class StoragePauseNemesis(ProcessFault):
    """SIGSTOP every storage node; `stop-storage-pause` resumes them."""

    name, start_f, stop_f = "storage-pause", "start-storage-pause", "stop-storage-pause"
    act, undo = staticmethod(FaultActions.pause), staticmethod(FaultActions.resume)

    def _targets(self, cluster) -> list[str]:
        return cluster.storage_nodes()

    def _mine(self) -> set[str]:
        return {n for r in self.faults.ledger.active(("pause",), by=self.name) for n in r.nodes}


class StorageKillNemesis(ProcessFault):
    """SIGKILL every storage node; `stop-storage-kill` starts them again (a durable store only)."""

    name, start_f, stop_f = "storage-kill", "start-storage-kill", "stop-storage-kill"
    act, undo = staticmethod(FaultActions.kill), staticmethod(FaultActions.start)

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        why = cluster.store_kill_unavailable()
        if why:
            raise NemesisRefused(f"the storage-kill fault is refused: {why}; run the store with persistence "
                                 "(durable = true) or drop storage-kill from --nemesis (storage-pause freezes it "
                                 "without losing its objects)")

    def _targets(self, cluster) -> list[str]:
        return cluster.storage_nodes()

    def _mine(self) -> set[str]:
        return {n for r in self.faults.ledger.active(("kill",), by=self.name) for n in r.nodes}


class StoragePartitionNemesis(NemesisBase):
    """Cut brokers off from the store (both ways); the stop reconnects them."""

    name, start_f, stop_f = "storage-partition", "start-storage-partition", "stop-storage-partition"

    def __init__(self, options: dict[str, Any]):
        self.rng = _rng(options, self.name)
        self.shape = options.get("storage_partition_target", "mixed")
        if self.shape not in STORAGE_PARTITION_TARGETS:
            raise ValueError(f"storage_partition_target {self.shape!r}: use one of "
                             f"{', '.join(STORAGE_PARTITION_TARGETS)}")

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        faults.prepare_network()

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            self.faults.heal_cuts(by=self.name)  # one cut of ours at a time
            shape = self.rng.choice(STORAGE_PARTITION_TARGETS[:2]) if self.shape == "mixed" else self.shape
            store = cluster.storage_nodes()[0]
            g, cut = storage_grudge(cluster.broker_nodes(), store, shape, self.rng)
            self.faults.cut(g, by=self.name, detail={"shape": shape, "store": store})
            return Op(INFO, op.f, op.process, {"storage-partition": cut, "store": store, "shape": shape,
                                               "description": grudge.describe(g)})
        if op.f == self.stop_f:
            healed = self.faults.heal_cuts(by=self.name)
            return Op(INFO, op.f, op.process, {"healed": sorted({n for r in healed for n in r.nodes})})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self.faults.heal_cuts(by=self.name)


class StorageSlowNemesis(NemesisBase):
    """Hold the store's egress to `storage_rate` (tbf); the stop removes the limit."""

    name, start_f, stop_f = "storage-slow", "start-storage-slow", "stop-storage-slow"

    def __init__(self, options: dict[str, Any]):
        self.rate = options.get("storage_rate", "256kbit")

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            slowed = [n for n in cluster.storage_nodes()
                      if not self.faults.ledger.active(("slow-link",), node=n, by=self.name)]
            for node in slowed:
                self.faults.slow_link(node, self.rate, by=self.name)
            return Op(INFO, op.f, op.process, {"storage-slow": slowed, "rate": self.rate})
        if op.f == self.stop_f:
            healed = self.faults.restore_links(by=self.name)
            return Op(INFO, op.f, op.process, {"healed": sorted({n for r in healed for n in r.nodes})})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self.faults.restore_links(by=self.name)


class ClientPartitionNemesis(NemesisBase):
    """Cut the harness's clients off from one random broker; the stop reconnects them."""

    name, start_f, stop_f = "client-partition", "start-client-partition", "stop-client-partition"

    def __init__(self, options: dict[str, Any]):
        self.rng = _rng(options, self.name)

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        if len(cluster.broker_nodes()) < 2:
            raise NemesisRefused(f"the client-partition fault cuts the clients off from one broker, and the "
                                 f"{cluster.name} cluster has {len(cluster.broker_nodes())}: nothing would be left to "
                                 "reach; describe more brokers or drop client-partition from --nemesis")
        faults.prepare_network()

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            self.faults.heal_client_cuts(by=self.name)  # one broker at a time
            node = self.rng.choice(sorted(cluster.broker_nodes()))
            rec = self.faults.cut_clients(node, by=self.name)
            return Op(INFO, op.f, op.process, {"client-partition": [node], "clients": rec.detail.get("clients")})
        if op.f == self.stop_f:
            healed = self.faults.heal_client_cuts(by=self.name)
            return Op(INFO, op.f, op.process, {"healed": sorted({n for r in healed for n in r.nodes})})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            self.faults.heal_client_cuts(by=self.name)
