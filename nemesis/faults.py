"""Faults that act on a node through its Remote: network partitions, lossy crashes, clock skew.

Each works on any backend whose nodes have a Remote and an address of their own (the
docker backend; SSH nodes later); a backend that cannot do a fault makes `setup` refuse it
by name with the reason, before the test starts, never in the middle.

- partition: iptables DROP rules from nemesis/netrules.py in each node's own chain, in the
  shapes of nemesis/grudge.py (isolate a random node, halves, majorities ring, bridge,
  isolate the leader of a partition, isolate the controller, one-way).
- lossy-crash: SIGKILL the broker, then make its lossy file system drop every unsynced
  byte (clusters/lossyfs.py), as a power cut would; the broker stays down until the stop.
  By default it respects the protocol's fault budget (001: at most min ISR - 1 lossy
  crashes until the crashed brokers are back), so a correct broker must lose nothing.
- clock, clock-jump, clock-strobe: skew a node's wall clock by a random offset, step it an hour
  forward or back, or make it flip between two values every few ms (the preload reads its
  control file live); never the host's or the kernel's clock.
- drop-caches: evict the kernel's page cache on a node, where /proc/sys lets us.
"""

from __future__ import annotations

import random
import time
import zlib
from typing import Any

from checkers.queue import BEYOND_BUDGET
from harness.history import INFO, Op
from harness.remote import shell_join
from nemesis import grudge, netrules
from nemesis.base import NemesisRefused
from nemesis.targets import running_brokers


def _on_nodes(cluster, commands: dict[str, list[str]], check: bool = False) -> None:
    """Run one command per node, on all nodes in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    if not commands:
        return
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        for f in [pool.submit(cluster.remote(n).run, argv, 30.0, check) for n, argv in commands.items()]:
            f.result()


def beyond_fault_budget(power_cut: int, min_isr: int) -> bool:
    """More brokers power-cut at once than the durability contract covers (001: min ISR - 1)."""
    return power_cut > max(min_isr - 1, 0)


def net_device(cluster, node: str) -> str:
    """The network device tc shapes on a node: the cluster's own answer (a namespace's veth end), else eth0."""
    return cluster.net_device(node) if hasattr(cluster, "net_device") else "eth0"


PARTITION_TARGETS = ("random-node", "halves", "majorities-ring", "bridge", "leader", "controller", "one-way")


class _Fault:
    name = ""
    start_f = stop_f = ""

    def __init__(self, options: dict[str, Any]):
        self.options = options
        # crc32, not hash(): str hashes change from process to process, and --seed must replay a run
        self.rng = random.Random(options.get("seed", 0) + zlib.crc32(self.name.encode()) % 1000)
        self.topic = options.get("topic", "queue")

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.start_f, self.stop_f)]

    def fs(self) -> set[str]:
        return {self.start_f, self.stop_f}

    def _needs_remotes(self, cluster) -> None:
        if not getattr(cluster, "isolated_nodes", False):
            raise NemesisRefused(f"the {self.name} fault needs nodes with their own network, disk and clock "
                                 "(--cluster docker, or --cluster local as root for a namespace per node); " +
                                 getattr(cluster, "not_isolated_reason", f"the {cluster.name} cluster runs every "
                                         "node as a process on this host's loopback"))

    def _leader_nodes(self, cluster) -> list[str]:
        return sorted({cluster.node_name(p.leader) for p in cluster.partitions(self.topic) if p.leader >= 0})


class PartitionNemesis(_Fault):
    name, start_f, stop_f = "partition", "start-partition", "stop-partition"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        target = options.get("partition_target") or options.get("target", "random-node")
        self.target = target if target in PARTITION_TARGETS or target == "mixed" else "random-node"
        self.cut: dict[str, set[str]] = {}
        self.shape = self.target

    def setup(self, cluster) -> None:
        self._needs_remotes(cluster)
        for node in cluster.nodes():
            for argv in netrules.chain_setup():
                cluster.remote(node).run(argv, check=True)

    def grudge(self, cluster) -> grudge.Grudge:
        nodes = cluster.nodes()
        self.shape = self.rng.choice(PARTITION_TARGETS) if self.target == "mixed" else self.target
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
            if self.cut:
                self._heal(cluster)
            g = self.grudge(cluster)
            self.apply(cluster, g)
            return Op(INFO, op.f, op.process, {"partition": {n: sorted(d) for n, d in g.items() if d},
                                               "shape": self.shape, "description": grudge.describe(g)})
        if op.f == self.stop_f:
            healed = self._heal(cluster)
            return Op(INFO, op.f, op.process, {"healed": healed})
        raise ValueError(f"partition nemesis cannot do {op.f!r}")

    def apply(self, cluster, g: grudge.Grudge) -> None:
        """Cut the network along a grudge (other faults, e.g. isolating the active controller, use it too)."""
        # One exec per node with all its rules, all nodes at once: injection latency is
        # one round trip, not one per rule and node.
        self.cut = g  # before the rules: a half-applied cut is still healed
        _on_nodes(cluster, {node: ["sh", "-c", " && ".join(
            shell_join(argv) for argv in netrules.drop_from(cluster.address(n)[0] for n in drops))]
            for node, drops in g.items() if drops}, check=True)

    def _heal(self, cluster) -> list[str]:
        healed = sorted(n for n, d in self.cut.items() if d)
        (heal,) = netrules.heal()
        _on_nodes(cluster, {node: heal for node in cluster.nodes()})
        self.cut = {}
        return healed

    def teardown(self, cluster) -> None:
        if not getattr(cluster, "isolated_nodes", False):
            return  # setup refused it: nothing was ever cut
        for node in cluster.nodes():
            for argv in netrules.remove_chain():
                cluster.remote(node).run(argv)
        self.cut = {}


class LossyCrashNemesis(_Fault):
    """kill -9 plus the loss of every byte not yet fsynced: a power cut of one broker (001 5)."""

    name, start_f, stop_f = "lossy-crash", "start-lossy-crash", "stop-lossy-crash"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.min_isr = int(options.get("min_isr", 2))
        self.exceed_budget = bool(options.get("exceed_fault_budget", False))
        self.crashed: list[str] = []

    def setup(self, cluster) -> None:
        self._needs_remotes(cluster)
        if not getattr(cluster, "lossy", False):
            raise NemesisRefused("the lossy-crash fault needs brokers writing through the lossy file system; "
                                 "this cluster was started without it")

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            budget = len(cluster.broker_nodes()) if self.exceed_budget else max(self.min_isr - 1, 0)
            up = running_brokers(cluster)  # not one another fault has down: its restart would undo ours
            candidates = [n for n in cluster.broker_nodes() if n not in self.crashed and n in up]
            target = self.options.get("target")
            if target == "leader" or (target == "mixed" and self.rng.random() < 0.5):
                leaders = [n for n in self._leader_nodes(cluster) if n in candidates]
                candidates = leaders or candidates
            if len(self.crashed) >= budget or not candidates:
                return Op(INFO, op.f, op.process, {"lossy-crash": [], "skipped": f"fault budget {budget} reached"})
            node = self.rng.choice(candidates)
            dropped = self.crash(cluster, node)
            self.crashed.append(node)
            value = {"lossy-crash": [node], "dropped": dropped}
            if beyond_fault_budget(len(self.crashed), self.min_isr):  # only with exceed_fault_budget
                value[BEYOND_BUDGET] = True
            return Op(INFO, op.f, op.process, value)
        if op.f == self.stop_f:
            restarted = self._restart_all(cluster)
            return Op(INFO, op.f, op.process, {"restarted": restarted})
        raise ValueError(f"lossy-crash nemesis cannot do {op.f!r}")

    @staticmethod
    def crash(cluster, node: str) -> dict[str, Any]:
        """SIGKILL the broker, then drop its unsynced bytes; returns what lossyfs reported."""
        import signal

        r = cluster.remote(node)
        pidfile, status = cluster.lossyfs_files(node)
        before = len(r.run(["cat", status]).out.strip().splitlines())
        cluster.kill(node)
        r.signal_daemon(pidfile, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = r.run(["cat", status]).out.strip().splitlines()
            if len(lines) > before:
                import json

                return json.loads(lines[-1])
            time.sleep(0.05)
        return {"event": "no report from lossyfs"}

    def _restart_all(self, cluster) -> list[str]:
        restarted = []
        for node in self.crashed:
            cluster.start(node)
            restarted.append(node)
        self.crashed = []
        return restarted

    def teardown(self, cluster) -> None:
        self._restart_all(cluster)


class _ClockFault(_Fault):
    """What the clock faults share: the node's clock control file (nemesis/clock_preload.py), written
    through its Remote, and a reset of every node ever touched to the real clock (offset 0)."""

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.target = options.get("target", "random-node")
        self.skewed: set[str] = set()

    def setup(self, cluster) -> None:
        if not hasattr(cluster, "clock_file"):
            raise NemesisRefused(f"the {self.name} fault needs nodes started with the clock preload; "
                                 f"{cluster.name} nodes are not")
        if hasattr(cluster, "_clock_lib") and cluster._clock_lib is None:  # a local backend without gcc
            raise NemesisRefused(f"the {self.name} fault needs the clock preload library, which " +
                                 getattr(cluster, "clock_unavailable_reason", "could not be built here (install gcc)"))

    def write_control(self, cluster, node: str, text: str) -> None:
        self.skewed.add(node)  # before the write: a write that fails half-way is still reset at teardown
        cluster.remote(node).put(cluster.clock_file(node), text.encode())

    def set_offset(self, cluster, node: str, offset_s: float) -> None:
        from nemesis.clock_preload import offset_file_text

        self.write_control(cluster, node, offset_file_text(int(offset_s * 1e9)))
        if not offset_s:
            self.skewed.discard(node)

    def targets(self, cluster) -> list[str]:
        """The nodes `--nemesis-target` names (a partition-only shape means one random node)."""
        from nemesis.targets import TARGETS, choose

        target = self.target if self.target in TARGETS else "random-node"
        leaders = self._leader_nodes(cluster) if target in ("leader", "mixed") else []
        isrs = ([[cluster.node_name(r) for r in p.isr] for p in cluster.partitions(self.topic)]
                if target in ("isr-member", "last-isr-member") else [])
        return choose(target, cluster.broker_nodes(), self.rng, leaders=leaders,
                      controllers=cluster.controller_nodes(), isrs=isrs)

    def _reset(self, cluster) -> list[str]:
        reset = sorted(self.skewed)
        for n in reset:
            self.set_offset(cluster, n, 0)
        return reset

    def teardown(self, cluster) -> None:
        self._reset(cluster)


class ClockNemesis(_ClockFault):
    """Skew the wall clock of random nodes by up to `clock_max_skew_s` either way."""

    name, start_f, stop_f = "clock", "start-clock", "stop-clock"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.max_skew_s = float(options.get("clock_max_skew_s", 300))

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            nodes = self.rng.sample(cluster.nodes(), self.rng.randint(1, len(cluster.nodes())))
            offsets = {}
            for n in nodes:
                off = round(self.rng.uniform(-self.max_skew_s, self.max_skew_s), 3)
                self.set_offset(cluster, n, off)
                offsets[n] = off
            return Op(INFO, op.f, op.process, {"clock-offset-s": offsets})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"reset": self._reset(cluster)})
        raise ValueError(f"clock nemesis cannot do {op.f!r}")


class ClockJumpNemesis(_ClockFault):
    """Step the wall clock of the target nodes by `clock_jump_s` (1 h by default), forward or back at
    random, in one go; the stop steps it back to the real time."""

    name, start_f, stop_f = "clock-jump", "start-clock-jump", "stop-clock-jump"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.jump_s = float(options.get("clock_jump_s", 3600))

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            jumps = {}
            for n in self.targets(cluster):
                jumps[n] = self.rng.choice((-1, 1)) * self.jump_s
                self.set_offset(cluster, n, jumps[n])
            return Op(INFO, op.f, op.process, {"clock-jump-s": jumps})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"reset": self._reset(cluster)})
        raise ValueError(f"clock-jump nemesis cannot do {op.f!r}")


class ClockStrobeNemesis(_ClockFault):
    """Make the wall clock of the target nodes flip between the real time and real + `clock_strobe_delta_s`
    every `clock_strobe_period_ms`, from the start to the stop (the preload computes the flips, so they
    are exact to the period)."""

    name, start_f, stop_f = "clock-strobe", "start-clock-strobe", "stop-clock-strobe"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.delta_s = float(options.get("clock_strobe_delta_s", 60))
        self.period_ms = float(options.get("clock_strobe_period_ms", 50))

    def invoke(self, cluster, op: Op) -> Op:
        from nemesis.clock_preload import strobe_file_text

        if op.f == self.start_f:
            nodes = self.targets(cluster)
            text = strobe_file_text(int(self.delta_s * 1e9), int(self.period_ms * 1e6))
            for n in nodes:
                self.write_control(cluster, n, text)
            return Op(INFO, op.f, op.process, {"clock-strobe": {"nodes": nodes, "delta-s": self.delta_s,
                                                                "period-ms": self.period_ms}})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"reset": self._reset(cluster)})
        raise ValueError(f"clock-strobe nemesis cannot do {op.f!r}")


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
        self.degraded: set[str] = set()
        self.not_run: list[str] = []

    def setup(self, cluster) -> None:
        self._needs_remotes(cluster)
        node = cluster.broker_nodes()[0]
        probe = cluster.remote(node).run(netrules.netem_probe(net_device(cluster, node)))
        if not probe.ok:
            reason = (probe.out + probe.err).strip().splitlines()[-1:] or ["netem unavailable"]
            self.not_run.append(f"netem (delay/duplicate/reorder): the kernel has no netem qdisc ({reason[0]})")
            if self.want_netem:
                raise NemesisRefused(f"the net fault cannot delay, duplicate or reorder packets here: {self.not_run[0]}")
        for n in cluster.nodes():
            for argv in netrules.chain_setup():
                cluster.remote(n).run(argv, check=True)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            node = self.rng.choice(cluster.broker_nodes())
            peers = [cluster.address(n)[0] for n in cluster.nodes() if n != node]
            script = " && ".join([shell_join(netrules.bandwidth_limit(net_device(cluster, node), self.rate))] +
                                 [shell_join(a) for a in netrules.random_loss_from(peers, self.loss)])
            cluster.remote(node).run(["sh", "-c", script], check=True)
            self.degraded.add(node)
            return Op(INFO, op.f, op.process, {"net": {node: {"rate": self.rate, "loss": self.loss}},
                                               "not-run": self.not_run})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": self._heal(cluster)})
        raise ValueError(f"net nemesis cannot do {op.f!r}")

    def _heal(self, cluster) -> list[str]:
        healed = sorted(self.degraded)
        for n in healed:
            cluster.remote(n).run(netrules.clear_qdisc(net_device(cluster, n)))
            for argv in netrules.heal():
                cluster.remote(n).run(argv)
        self.degraded.clear()
        return healed

    def teardown(self, cluster) -> None:
        if getattr(cluster, "isolated_nodes", False):
            self._heal(cluster)


DROP_CACHES = "/proc/sys/vm/drop_caches"


class DropCachesNemesis(_Fault):
    """Evict the kernel's page cache, dentries and inodes (`echo 3 > /proc/sys/vm/drop_caches`) on the
    node of a random broker, so its next reads go to the disk.

    The file is per kernel: containers share the host's, and mount /proc/sys read-only; local
    nodes reach the host's only as root. Setup probes a node and, where it is not writable, lists
    the fault as not run (results.json "faults_not_run") and the run goes on without it, as the net
    fault does for netem. The cache refills by itself: the stop has nothing to heal."""

    name, start_f, stop_f = "drop-caches", "start-drop-caches", "stop-drop-caches"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.not_run: list[str] = []

    def setup(self, cluster) -> None:
        node = cluster.broker_nodes()[0]
        # `test -w` asks access(2), which answers EROFS for a read-only /proc/sys and EACCES for a
        # non-root user, without dropping anything.
        if not cluster.remote(node).run(["test", "-w", DROP_CACHES]).ok:
            why = ("/proc/sys is read-only in the containers" if cluster.name == "docker"
                   else "the nodes' user may not write it (run as root)")
            self.not_run.append(f"drop-caches: {DROP_CACHES} is not writable on {node} ({why})")

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            if self.not_run:
                return Op(INFO, op.f, op.process, {"drop-caches": [], "not-run": self.not_run})
            node = self.rng.choice(cluster.broker_nodes())
            # No `sync` first: it would make the broker's unsynced writes durable and so hide the
            # very loss its flush policy risks. Dirty pages stay; every clean one is dropped.
            cluster.remote(node).run(["sh", "-c", f"echo 3 > {DROP_CACHES}"], check=True)
            return Op(INFO, op.f, op.process, {"drop-caches": [node]})
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, {"healed": []})  # nothing to undo: the cache refills
        raise ValueError(f"drop-caches nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        pass


# Run inside the node: corrupt the largest segment of a stopped broker, in one of two ways.
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
    print(json.dumps({"file": path, "truncated_bytes": cut, "size": size}))
else:
    pos = rng.randrange(size // 2, size)
    with open(path, "r+b") as f:
        f.seek(pos); b = f.read(1); f.seek(pos); f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
        f.flush(); os.fsync(f.fileno())
    print(json.dumps({"file": path, "flipped_byte_at": pos, "size": size}))
"""


class DiskNemesis(_Fault):
    """Corrupt a stopped broker's segment on disk (a flipped bit, or a cut tail), then restart it:
    the broker must detect it at start-up (CRC and length checks) and recover from the leader.
    One broker at a time, within the same min ISR - 1 budget as lossy crashes."""

    name, start_f, stop_f = "disk", "start-disk", "stop-disk"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.mode = options.get("disk_mode", "random")  # flip | truncate | random
        self.hit: list[str] = []

    def setup(self, cluster) -> None:
        if not hasattr(cluster, "data_dir"):
            raise NemesisRefused(f"the disk fault needs the broker's data dir; {cluster.name} does not say where")

    def invoke(self, cluster, op: Op) -> Op:
        import json

        if op.f == self.start_f:
            node = self.rng.choice(cluster.broker_nodes())
            mode = self.mode if self.mode != "random" else self.rng.choice(["flip", "truncate"])
            cluster.kill(node)
            r = cluster.remote(node).run([cluster.python, "-c", _CORRUPT, cluster.data_dir(node),
                                          str(self.rng.randrange(10**9)), mode], check=True)
            cluster.start(node)  # it must find the damage itself at start-up
            self.hit.append(node)
            return Op(INFO, op.f, op.process, {"disk": {node: json.loads(r.out.strip().splitlines()[-1])},
                                               "mode": mode})
        if op.f == self.stop_f:
            healed, self.hit = self.hit, []
            return Op(INFO, op.f, op.process, {"healed": healed})
        raise ValueError(f"disk nemesis cannot do {op.f!r}")

    def teardown(self, cluster) -> None:
        for node in self.hit:
            cluster.start(node)
        self.hit = []
