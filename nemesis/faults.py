"""Faults that act on a node through its Remote: network partitions, lossy crashes, clock skew.

Each works on any backend whose nodes have a Remote and an address of their own (docker,
local as root, SSH); a backend that cannot do a fault makes `setup` refuse it by name with
the reason, before the test starts, never in the middle. What each fault does to a node, how
that is seen and how it is undone is nemesis/actions.py's, shared with every other nemesis;
these classes decide which nodes and when.

- partition: iptables DROP rules from clusters/netrules.py in each node's own chain, in the
  shapes of nemesis/grudge.py (isolate a random node, halves, majorities ring, bridge,
  isolate the leader of a partition, isolate the controller, one-way).
- lossy-crash: SIGKILL the broker, then make its lossy file system drop every unsynced
  byte (clusters/lossyfs.py), as a power cut would; the broker stays down until the stop.
  By default it respects the protocol's fault budget (001 5: at most min ISR - 1 concurrent
  lossy unclean shutdowns), so a correct broker must lose nothing. A power-cut broker counts
  against the budget until it is back in every ISR of the partitions it holds, not merely
  restarted: until then it is no copy of the committed log (001 5.1.2, Unclean Exclusion).
- clock, clock-jump, clock-strobe: skew a node's wall clock by a random offset, step it an hour
  forward or back, or make it flip between two values every few ms (the preload reads its
  control file live); never the host's or the kernel's clock.
- drop-caches: evict the kernel's page cache on a node, where /proc/sys lets us (else refused).
- disk: corrupt a stopped broker's segment (a flipped bit or a cut tail), then restart it.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.base import DROP_CACHES
from kafkaesque_harness.history import BEYOND_BUDGET, INFO, Op
from kafkaesque_harness.nemesis import grudge
from kafkaesque_harness.nemesis.actions import CLOCK_FAULTS
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.observe import cached_kib
from kafkaesque_harness.nemesis.requirements import ObjectStore, can
from kafkaesque_harness.nemesis.targets import running_brokers

__all__ = ["DROP_CACHES", "PARTITION_TARGETS", "beyond_fault_budget"]


def beyond_fault_budget(power_cut: int, min_isr: int) -> bool:
    """More brokers power-cut at once than the durability contract covers (001: min ISR - 1)."""
    return power_cut > max(min_isr - 1, 0)


# Kafka's internal topics: a power-cut broker must be back in their ISRs too (groups' offsets, transactions).
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
PARTITION_TARGETS = ("random-node", "halves", "majorities-ring", "bridge", "leader", "controller", "one-way")
SHAPES_OF_THREE = ("majorities-ring", "bridge")  # need at least three nodes (nemesis/grudge.py)


class _Fault(NemesisBase):
    name = ""
    start_f = stop_f = ""

    def __init__(self, options: dict[str, Any]):
        self.options = options
        # crc32, not hash(): str hashes change from process to process, and --seed must replay a run
        self.rng = random.Random(options.get("seed", 0) + zlib.crc32(self.name.encode()) % 1000)
        self.topic = options.get("topic", "queue")

    def teardown(self, cluster) -> None:
        if self.faults is not None:
            errors = self.faults.heal(by=self.name)
            if errors:
                raise RuntimeError(f"{self.name}: " + "; ".join(errors))

    def _leader_nodes(self, cluster) -> list[str]:
        return sorted({cluster.node_name(p.leader) for p in cluster.partitions(self.topic) if p.leader >= 0})

    def _mine(self, kinds: tuple[str, ...]) -> list[str]:
        """The nodes this nemesis has faults of these kinds active on (the ledger's answer)."""
        return sorted({n for r in self.faults.ledger.active(kinds, by=self.name) for n in r.nodes})


class PartitionNemesis(_Fault):
    name, start_f, stop_f = "partition", "start-partition", "stop-partition"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        target = options.get("partition_target") or options.get("target", "random-node")
        self.target = target if target in PARTITION_TARGETS or target == "mixed" else "random-node"
        self.shape = self.target

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        nodes = cluster.nodes()
        if len(nodes) < 2:
            raise NemesisRefused(f"the partition fault needs at least two nodes to cut apart; the {cluster.name} "
                                 f"cluster has {len(nodes)} ({', '.join(nodes)}); describe more nodes or drop "
                                 "partition from --nemesis")
        if self.target in SHAPES_OF_THREE and len(nodes) < 3:
            raise NemesisRefused(f"a {self.target} partition needs at least three nodes; the {cluster.name} cluster "
                                 f"has {len(nodes)}; pick another --nemesis-target")
        if self.target == "controller" and not cluster.controller_nodes():
            raise NemesisRefused(f"the partition fault targets the controller, and the {cluster.name} cluster names "
                                 "no controller node; pick another --nemesis-target")
        shared_store = cluster.brokers_share_nothing_reason() if can(cluster, ObjectStore) else None
        if shared_store:
            raise NemesisRefused(f"the partition fault cuts brokers apart, and {shared_store}, so a cut between "
                                 "them cuts nothing the system uses; use storage-partition (brokers from the store) "
                                 "or client-partition (the clients from one broker) instead")
        faults.prepare_network()

    def grudge(self, cluster) -> grudge.Grudge:
        nodes = cluster.nodes()
        shapes = [s for s in PARTITION_TARGETS if len(nodes) >= 3 or s not in SHAPES_OF_THREE]
        self.shape = self.rng.choice(shapes) if self.target == "mixed" else self.target
        return self._shape(cluster, nodes, self.shape)

    def _shape(self, cluster, nodes: list[str], shape: str) -> grudge.Grudge:
        if shape == "halves":
            return grudge.halves(nodes, self.rng)
        if shape == "majorities-ring":
            return grudge.majorities_ring(nodes, self.rng)
        if shape == "bridge":
            return grudge.bridge(nodes, self.rng)
        if shape == "one-way":
            return grudge.one_way(nodes, self.rng.choice(cluster.broker_nodes()))
        if shape == "leader":
            leaders = self._leader_nodes(cluster)
            return grudge.isolate(nodes, self.rng.choice(leaders) if leaders else self.rng.choice(nodes))
        if shape == "controller":
            return grudge.isolate(nodes, cluster.active_controller() or cluster.controller_nodes()[0])
        return grudge.isolate(nodes, self.rng.choice(cluster.broker_nodes()))

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            self.faults.heal_cuts(by=self.name)  # one partition of ours at a time
            g = self.grudge(cluster)
            self.faults.cut(g, by=self.name, detail={"shape": self.shape})
            return Op(INFO, op.f, op.process, {"partition": {n: sorted(d) for n, d in g.items() if d},
                                               "shape": self.shape, "description": grudge.describe(g)})
        if op.f == self.stop_f:
            healed = self.faults.heal_cuts(by=self.name)
            return Op(INFO, op.f, op.process, {"healed": sorted({n for r in healed for n in r.nodes})})
        raise ValueError(f"partition nemesis cannot do {op.f!r}")


class LossyCrashNemesis(_Fault):
    """kill -9 plus the loss of every byte not yet fsynced: a power cut of one broker (001 5)."""

    name, start_f, stop_f = "lossy-crash", "start-lossy-crash", "stop-lossy-crash"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.min_isr = int(options.get("min_isr", 2))
        self.exceed_budget = bool(options.get("exceed_fault_budget", False))
        self.recovering: set[str] = set()  # restarted after our power cut, not yet seen back in every ISR

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        if not self.exceed_budget and self.min_isr - 1 < 1:
            raise NemesisRefused(f"the lossy-crash fault may power-cut at most min ISR - 1 brokers at once (001's "
                                 f"fault budget), which is 0 with --min-isr {self.min_isr}: it would never act; raise "
                                 "--min-isr to 2 or more, or drop lossy-crash from --nemesis")

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            budget = len(cluster.broker_nodes()) if self.exceed_budget else max(self.min_isr - 1, 0)
            crashed = {n for r in self.faults.ledger.active(("lossy-crash",)) for n in r.nodes}
            self.recovering = {n for n in self.recovering - crashed if not self._back_in_sync(cluster, n)}
            unclean = crashed | self.recovering  # each one a lossy unclean shutdown not yet recovered from
            up = running_brokers(cluster)  # not one another fault has down: its restart would undo ours
            candidates = [n for n in cluster.broker_nodes() if n not in unclean and n in up]
            target = self.options.get("target")
            if target == "leader" or (target == "mixed" and self.rng.random() < 0.5):
                leaders = [n for n in self._leader_nodes(cluster) if n in candidates]
                candidates = leaders or candidates
            if len(unclean) >= budget or not candidates:
                why = (f"fault budget {budget} reached" if len(unclean) >= budget else "no running broker to power-cut")
                value = {"lossy-crash": [], "skipped": why}
                if self.recovering:
                    value["recovering"] = sorted(self.recovering)
                return Op(INFO, op.f, op.process, value)
            node = self.rng.choice(candidates)
            rec = self.faults.lossy_crash(node, by=self.name)
            value = {"lossy-crash": [node], "dropped": rec.evidence.get("lossyfs")}
            if self.recovering:
                value["recovering"] = sorted(self.recovering)
            if beyond_fault_budget(len(unclean) + 1, self.min_isr):  # only with exceed_fault_budget
                value[BEYOND_BUDGET] = True
            return Op(INFO, op.f, op.process, value)
        if op.f == self.stop_f:
            restarted = self._mine(("lossy-crash",))
            for node in restarted:
                self.faults.start(node)
            self.recovering |= set(restarted)
            return Op(INFO, op.f, op.process, {"restarted": restarted})
        raise ValueError(f"lossy-crash nemesis cannot do {op.f!r}")


    def _back_in_sync(self, cluster, node: str) -> bool:
        """Is the restarted broker in the ISR of every partition it holds (the test topic's and Kafka's
        internal topics')? 001 5.1.2: after an unclean shutdown a replica is out of sync until it has caught
        up and been taken back, so until then another power cut is a second concurrent one (broker 1 power-cut
        and restarted empty, then brokers 2 and 3 in turn, lost every record: 001 5.3). Unknown is no."""
        try:
            bid = cluster.node_id(node)
            views = cluster.partitions(self.topic)
            if not views:
                return False  # the cluster did not say
            for topic in INTERNAL_TOPICS:
                views += cluster.partitions(topic)
        except Exception:  # noqa: BLE001 - the cluster did not answer: not known to be back
            return False
        return all(bid in v.isr for v in views if bid in v.replicas)


class _ClockFault(_Fault):
    """What the clock faults share: the node's clock control file (clusters/clock_preload.py), written
    through the shared actions, and a stop that resets every node ever touched to the real clock (offset 0);
    each fault says only how its start changes the clocks (_skew)."""

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.target = options.get("target", "random-node")

    def set_offset(self, cluster, node: str, offset_s: float) -> None:
        from kafkaesque_harness.clusters.clock_preload import offset_file_text

        self.faults.set_clock(node, self.name, offset_file_text(int(offset_s * 1e9)), (offset_s,), by=self.name,
                              detail={"offset_s": offset_s})

    def targets(self, cluster) -> list[str]:
        """The nodes `--nemesis-target` names (a partition-only shape means one random node)."""
        from kafkaesque_harness.nemesis.targets import TARGETS, choose

        target = self.target if self.target in TARGETS else "random-node"
        leaders = self._leader_nodes(cluster) if target in ("leader", "mixed") else []
        isrs = ([[cluster.node_name(r) for r in p.isr] for p in cluster.partitions(self.topic)]
                if target in ("isr-member", "last-isr-member") else [])
        return choose(target, cluster.broker_nodes(), self.rng, leaders=leaders,
                      controllers=cluster.controller_nodes(), isrs=isrs)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            return Op(INFO, op.f, op.process, self._skew(cluster))
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"reset": self._reset(cluster)})
        raise ValueError(f"{self.name} nemesis cannot do {op.f!r}")

    def _skew(self, cluster) -> dict[str, Any]:
        """The start: each fault's own change to the clocks; what the op's value says of it."""
        raise NotImplementedError

    def _reset(self, cluster) -> list[str]:
        reset = self._mine(CLOCK_FAULTS)
        for n in reset:
            self.faults.reset_clock(n)
        return reset


class ClockNemesis(_ClockFault):
    """Skew the wall clock of random nodes by up to `clock_max_skew_s` either way."""

    name, start_f, stop_f = "clock", "start-clock", "stop-clock"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.max_skew_s = float(options.get("clock_max_skew_s", 300))

    def _skew(self, cluster) -> dict[str, Any]:
        nodes = self.rng.sample(cluster.nodes(), self.rng.randint(1, len(cluster.nodes())))
        offsets = {}
        for n in nodes:
            off = round(self.rng.uniform(-self.max_skew_s, self.max_skew_s), 3)
            self.set_offset(cluster, n, off)
            offsets[n] = off
        return {"clock-offset-s": offsets}


class ClockJumpNemesis(_ClockFault):
    """Step the wall clock of the target nodes by `clock_jump_s` (1 h by default), forward or back at
    random, in one go; the stop steps it back to the real time."""

    name, start_f, stop_f = "clock-jump", "start-clock-jump", "stop-clock-jump"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.jump_s = float(options.get("clock_jump_s", 3600))

    def _skew(self, cluster) -> dict[str, Any]:
        jumps = {}
        for n in self.targets(cluster):
            jumps[n] = self.rng.choice((-1, 1)) * self.jump_s
            self.set_offset(cluster, n, jumps[n])
        return {"clock-jump-s": jumps}


class ClockStrobeNemesis(_ClockFault):
    """Make the wall clock of the target nodes flip between the real time and real + `clock_strobe_delta_s`
    every `clock_strobe_period_ms`, from the start to the stop (the preload computes the flips, so they
    are exact to the period)."""

    name, start_f, stop_f = "clock-strobe", "start-clock-strobe", "stop-clock-strobe"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.delta_s = float(options.get("clock_strobe_delta_s", 60))
        self.period_ms = float(options.get("clock_strobe_period_ms", 50))

    def _skew(self, cluster) -> dict[str, Any]:
        from kafkaesque_harness.clusters.clock_preload import strobe_file_text

        nodes = self.targets(cluster)
        text = strobe_file_text(int(self.delta_s * 1e9), int(self.period_ms * 1e6))
        detail = {"delta_s": self.delta_s, "period_ms": self.period_ms}
        for n in nodes:
            self.faults.set_clock(n, self.name, text, (0.0, self.delta_s), by=self.name, detail=detail)
        return {"clock-strobe": {"nodes": nodes, "delta-s": self.delta_s, "period-ms": self.period_ms}}


class NetNemesis(_Fault):
    """Degrade the network of random brokers: bandwidth limit (tbf) and random loss (iptables
    statistic match). netem (delay, duplication, reordering) is used only where the kernel has
    it; this kernel has not, so it is refused by name at setup and listed as not run."""

    name, start_f, stop_f = "net", "start-net", "stop-net"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.rate = options.get("net_rate", "1mbit")
        self.loss = float(options.get("net_loss", 0.2))
        self.want_netem = bool(options.get("net_netem", False))
        self.not_run: list[str] = []

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        node = cluster.broker_nodes()[0]
        probe = cluster.remote(node).run(netrules.netem_probe(cluster.net_device(node)))
        if not probe.ok:
            reason = (probe.out + probe.err).strip().splitlines()[-1:] or ["netem unavailable"]
            self.not_run.append(f"netem (delay/duplicate/reorder): the kernel has no netem qdisc ({reason[0]})")
            if self.want_netem:
                raise NemesisRefused(f"the net fault cannot delay, duplicate or reorder packets here: {self.not_run[0]}")
        faults.prepare_network()

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            node = self.rng.choice(cluster.broker_nodes())
            if node not in self._mine(("net",)):
                self.faults.degrade(node, self.rate, self.loss, by=self.name)
            return Op(INFO, op.f, op.process, {"net": {node: {"rate": self.rate, "loss": self.loss}},
                                               "not-run": self.not_run})
        if op.f == self.stop_f:
            healed = self.faults.restore_net(by=self.name)
            return Op(INFO, op.f, op.process, {"healed": sorted({n for r in healed for n in r.nodes})})
        raise ValueError(f"net nemesis cannot do {op.f!r}")


class DropCachesNemesis(_Fault):
    """Evict the kernel's page cache, dentries and inodes (`echo 3 > /proc/sys/vm/drop_caches`) on the
    node of a random broker, so its next reads go to the disk.

    The file is per kernel: containers share the host's, and mount /proc/sys read-only; local
    nodes reach the host's only as root. Setup asks the cluster (PageCacheDrop: it asks a node)
    and, where the file is not writable, refuses the fault by name (it could never act).
    Observed by the page cache shrinking (/proc/meminfo's Cached before and after); the cache
    refills by itself, so each drop is healed as soon as it is seen."""

    name, start_f, stop_f = "drop-caches", "start-drop-caches", "stop-drop-caches"

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            node = self.rng.choice(cluster.broker_nodes())
            ledger = self.faults.ledger
            with ledger.applying("drop-caches", [node], self.name) as rec:
                before = cached_kib(cluster, node)
                # No `sync` first: it would make the broker's unsynced writes durable and so hide the
                # very loss its flush policy risks. Dirty pages stay; every clean one is dropped.
                cluster.remote(node).run(["sh", "-c", f"echo 3 > {DROP_CACHES}"], check=True)
            after = cached_kib(cluster, node)
            shrank = before is not None and after is not None and after < before
            ledger.observed(rec, shrank, {"cached_kib": [before, after]},
                            f"the page cache did not shrink ({before} -> {after} KiB)")
            ledger.healed(rec, True, {"note": "nothing to undo: the page cache refills by itself"})
            return Op(INFO, op.f, op.process, {"drop-caches": [node]})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": []})  # nothing to undo: the cache refills
        raise ValueError(f"drop-caches nemesis cannot do {op.f!r}")


# Run inside the node: corrupt the largest segment of a stopped broker, in one of two ways, and read
# the damage back (the evidence that it is on disk).
_CORRUPT = r"""
import glob, os, random, sys, json
rng = random.Random(int(sys.argv[2]))
segs = sorted(glob.glob(os.path.join(sys.argv[1], "logs", "*", "*.log")), key=os.path.getsize)
segs = [s for s in segs if os.path.getsize(s) > 64]
if not segs:
    print(json.dumps({"skipped": "no segment to corrupt"})); sys.exit(0)
path = segs[-1]
size = os.path.getsize(path)
if sys.argv[3] == "truncate":
    cut = max(1, min(size // 4, 4096))
    with open(path, "r+b") as f:
        f.truncate(size - cut)
        os.fsync(f.fileno())
    print(json.dumps({"file": path, "truncated_bytes": cut, "size": size,
                      "verified": os.path.getsize(path) == size - cut}))
else:
    pos = rng.randrange(size // 2, size)
    with open(path, "r+b") as f:
        f.seek(pos); b = f.read(1); f.seek(pos); new = bytes([b[0] ^ (1 << rng.randrange(8))]); f.write(new)
        f.flush(); os.fsync(f.fileno())
    with open(path, "rb") as f:
        f.seek(pos); back = f.read(1)
    print(json.dumps({"file": path, "flipped_byte_at": pos, "size": size, "verified": back == new}))
"""


class DiskNemesis(_Fault):
    """Corrupt a stopped broker's segment on disk (a flipped bit, or a cut tail), then restart it:
    the broker must detect it at start-up (CRC and length checks) and recover from the leader.
    One broker at a time, within the same min ISR - 1 budget as lossy crashes."""

    name, start_f, stop_f = "disk", "start-disk", "stop-disk"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.mode = options.get("disk_mode", "random")  # flip | truncate | random

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            node = self.rng.choice(cluster.broker_nodes())
            mode = self.mode if self.mode != "random" else self.rng.choice(["flip", "truncate"])
            ledger = self.faults.ledger
            try:
                with ledger.applying("disk", [node], self.name, {"mode": mode}) as rec:
                    cluster.kill(node)
                    r = cluster.remote(node).run([cluster.python, "-c", _CORRUPT, cluster.data_dir(node),
                                                  str(self.rng.randrange(10**9)), mode], check=True)
                    report = json.loads(r.out.strip().splitlines()[-1])
                    if "skipped" in report:
                        raise RuntimeError(report["skipped"])
                ledger.observed(rec, bool(report.get("verified")), report, "the damage did not read back")
            finally:
                self.faults.start(node)  # it must find the damage itself at start-up (heals the record)
            return Op(INFO, op.f, op.process, {"disk": {node: report}, "mode": mode})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": []})  # each corruption was healed by its restart
        raise ValueError(f"disk nemesis cannot do {op.f!r}")
