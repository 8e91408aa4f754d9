"""SimCluster: the reference cluster's real node programs, every node in this process, under one seed.

Each node is the broker's own server object (server.Broker, controller_server.ControllerServer or
controller_quorum.QuorumControllerServer), built from the command line a real run gives it (the flags of
clusters/reference.py's node_argv, parsed by the broker's own parser) and run by its own `run()`
coroutine as the root task of a simulated process (loop.py). Underneath, the broker's host seam
(clusters/broker/hostenv.py) answers from the simulator: virtual time plus the node's clock offset, a
random source drawn from the seed, fsync into the page-cache model (disk.py) and the in-memory network
(network.py). Nothing else is replaced: the shells, the listeners, the RPC and the sans-IO protocol
modules are the code a real run executes.

Nodes are named as in real runs (controller-0.., broker-1..) and write their state-change log and
protocol trace where a local run's do: <run_dir>/data/<node>/{broker,controller}.log and trace.jsonl
(clusters/trace_files.py reads them from there), their data under <run_dir>/data/<node>/data.

Faults: kill (SIGKILL), power_cut (SIGKILL, then unsynced file data lost, or torn), stop (SIGTERM: a
controlled shutdown), restart, pause/resume (SIGSTOP/SIGCONT), block/partition/heal/slow/reset on the
network, clock skew and jumps per node. Controllers take the same faults as brokers.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.broker import (
    CONTROLLER_ID,
    LOSSYFS_STATUS_ENV,
    NODE_HOST,
    Broker,
    ControllerServer,
    QuorumControllerServer,
    build_parser,
)
from kafkaesque_harness.clusters.replica_dumps import collect_replicas
from kafkaesque_harness.clusters.sim.disk import PageCache, PowerCutReport, discard_process_buffers, run_root
from kafkaesque_harness.clusters.sim.loop import Process, SimLoop
from kafkaesque_harness.clusters.sim.network import NetConfig, SimNetwork
from kafkaesque_harness.clusters.sim.probe import create_topic

EPOCH_S = 1_767_225_600.0  # the wall clock of virtual time 0 (2026-01-01T00:00:00Z): the same in every run
SECRET = "5" * 64  # the cluster's secret (rpc.py): internal requests carry its tag, here as in real runs
BASE_PORT = 19092  # as `python -m ...broker cluster`: controller j on P-j, broker i on P+i
HOST = "127.0.0.1"


class SimHost:
    """What one incarnation of a node gets from its host (the broker's hostenv.Host), all from the sim."""

    def __init__(self, sim: SimCluster, name: str, incarnation: int):
        self.sim, self.name = sim, name
        self.loop = sim.loop
        self._rng = random.Random(f"{sim.seed}/{name}/{incarnation}")
        self._buggify_rng: random.Random | None = None
        # a process id of its own per incarnation (the trace's trace_started says it), the same in every run
        self._pid = 1000 * (sim.names.index(name) + 1) + incarnation if name in sim.names else 99
        self.open_connection = sim.net.open_connection
        self.start_server = sim.net.start_server

    def wall_s(self) -> float:
        return EPOCH_S + self.loop.time() + self.sim.clock_offset_s.get(self.name, 0.0)

    def monotonic_s(self) -> float:
        return self.loop.time()

    def new_uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def rng(self) -> random.Random:
        return random.Random(self._rng.getrandbits(64))

    def pid(self) -> int:
        return self._pid

    def fsync(self, fd: int) -> None:
        self.sim.disk.fsync(fd)

    def buggify(self, point: str) -> bool:
        """The BUGGIFY point fires with the probability the run switched it on with (none: never), drawn from a
        generator of the node's own, made on the first ask, so a run without points draws as it did before."""
        chance = self.sim.buggify.get(point)
        if not chance:
            return False
        if self._buggify_rng is None:
            self._buggify_rng = random.Random(f"{self.sim.seed}/{self.name}/{self._pid}/buggify")
        fires = self._buggify_rng.random() < chance
        if fires:
            self.sim.buggify_fired[point] = self.sim.buggify_fired.get(point, 0) + 1
        return fires

    def getenv(self, name: str) -> str | None:
        # what a backend with the lossy file system sets for a node: where its power cuts are reported
        return self.sim.lossy_status_file(self.name) if name == LOSSYFS_STATUS_ENV else None


@dataclass
class SimNode:
    name: str
    argv: list[str]
    proc: Process | None = None
    server: Any = None
    incarnations: int = 0
    exits: list[Any] = field(default_factory=list)  # each incarnation's end: its return code or exception


class SimCluster:
    """A cluster of the reference broker's nodes in this process, and the faults on them (module docstring)."""

    def __init__(self, seed: int, n_brokers: int = 3, n_controllers: int = 1, flush_policy: str = "never",
                 variants: Iterable[str] = (), broker_config: dict[str, Any] | None = None,
                 run_dir: str | None = None, net: NetConfig | None = None, buggify: dict[str, float] | None = None):
        self.seed = seed
        self.buggify = dict(buggify or {})  # BUGGIFY point (hostenv.BUGGIFY_POINTS) -> the chance it fires per pass
        self.buggify_fired: dict[str, int] = {}  # point -> how often it fired
        self.rng = random.Random(f"{seed}/cluster")
        self.loop = SimLoop()
        self.net = SimNetwork(self.loop, random.Random(f"{seed}/network"), net)
        self.disk = PageCache()
        self.run_dir = run_dir or run_root()
        self.owns_run_dir = run_dir is None  # made here (on /dev/shm): removed by close(), nothing of it is kept
        self.variants = sorted(variants)
        self.flush_policy = flush_policy
        self.config = broker_config or {}
        self.controllers = [f"controller-{j}" for j in range(n_controllers)]
        self.brokers = [f"broker-{i}" for i in range(1, n_brokers + 1)]
        self.names = self.controllers + self.brokers
        self.clock_offset_s: dict[str, float] = {}
        self.power_cuts: dict[str, int] = {}
        self.nodes = {name: SimNode(name, self.node_argv(name)) for name in self.names}
        self.clients: dict[str, Process] = {}
        asyncio.set_event_loop(self.loop)

    # --- naming and command lines (as clusters/reference.py's) -------------------------------------------
    def node_id(self, name: str) -> int:
        role, _, n = name.partition("-")
        return CONTROLLER_ID + int(n) if role == "controller" else int(n)

    def address(self, name: str) -> str:
        role, _, n = name.partition("-")
        return f"{HOST}:{BASE_PORT - int(n) if role == 'controller' else BASE_PORT + int(n)}"

    def bootstrap(self) -> list[tuple[str, int]]:
        return [(h, int(p)) for h, _, p in (self.address(b).rpartition(":") for b in self.brokers)]

    def node_dir(self, name: str) -> str:
        return os.path.join(self.run_dir, "data", name)

    def node_argv(self, name: str) -> list[str]:
        cfg, node_dir = self.config, self.node_dir(name)
        role = "controller" if name in self.controllers else "broker"
        argv = [role, "--node-id", str(self.node_id(name)), "--listen", self.address(name),
                "--data-dir", os.path.join(node_dir, "data"), "--log-file", os.path.join(node_dir, f"{role}.log"),
                "--trace-file", os.path.join(node_dir, "trace.jsonl")]
        if role == "controller":
            argv += ["--session-timeout-ms", str(cfg.get("session_timeout_ms", 3000)),
                     "--unclean-recovery-strategy", str(cfg.get("unclean_recovery_strategy", "balanced"))]
            if len(self.controllers) > 1:
                argv += ["--quorum", ",".join(f"{self.node_id(c)}@{self.address(c)}" for c in self.controllers)]
        else:
            argv += ["--controller", ",".join(self.address(c) for c in self.controllers),
                     "--flush-policy", self.flush_policy,
                     "--replica-lag-time-max-ms", str(cfg.get("replica_lag_time_max_ms", 5000)),
                     "--heartbeat-interval-ms", str(cfg.get("heartbeat_interval_ms", 300))]
            for key in ("replica_fetch_max_bytes", "hwm_checkpoint_interval_ms"):
                if cfg.get(key):
                    argv += ["--" + key.replace("_", "-"), str(cfg[key])]
        for v in self.variants:
            argv += ["--variant", v]
        return argv

    # --- processes ----------------------------------------------------------------------------------------
    def _new_process(self, name: str, incarnation: int) -> Process:
        proc = Process(name, incarnation, SimHost(self, name, incarnation))
        proc.context.run(NODE_HOST.set, proc.host)
        self.net.addresses[name] = HOST
        return proc

    def start(self, name: str) -> None:
        """Start a node's next incarnation: its server object built and its `run()` started as it."""
        node = self.nodes[name]
        if node.proc is not None and not node.proc.dead:
            raise RuntimeError(f"{name} is already running")
        node.incarnations += 1
        os.makedirs(self.node_dir(name), exist_ok=True)
        open(self.lossy_status_file(name), "a").close()  # as a mounted lossy file system's: no drop yet
        proc = node.proc = self._new_process(name, node.incarnations)
        args = build_parser().parse_args(node.argv)
        if name in self.controllers:
            server_class = QuorumControllerServer if len(self.controllers) > 1 else ControllerServer
        else:
            server_class = Broker
        node.server = proc.context.run(server_class, args, SECRET)
        self.loop.start_process(proc, self._node_main(node, node.server))

    async def _node_main(self, node: SimNode, server: Any) -> None:
        """The node's process: its server's run() until it returns (a stop) or raises (kept as a finding).
        Then the process is over, as a real one exits: nothing of it runs again, the OS closes its sockets."""
        proc = node.proc
        try:
            node.exits.append(await server.run())
        except Exception as e:  # noqa: BLE001 - a node that dies of an exception is a finding, kept
            node.exits.append(e)
        self.loop.call_soon(self._exited, proc)  # after this task's own end, which the loop must still run

    def _exited(self, proc: Process) -> None:
        if not proc.dead:
            self.loop.kill(proc)
            self.net.close_process(proc)

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def add_client(self, name: str) -> Process:
        """A client process (clients are nodes too: partitions and pauses reach them)."""
        proc = self.clients[name] = self._new_process(name, 1)
        return proc

    def create_topic(self, topic: str, partitions: int = 1, rf: int = 3, min_isr: int = 2) -> str:
        """Create a topic through a broker's Kafka listener (CreateTopics, as an admin client does) and wait for
        its partition 0's leader; that leader's node name."""
        admin = self.clients.get("admin") or self.add_client("admin")
        return f"broker-{self.run_as(admin, create_topic(self, topic, partitions, rf, min_isr))}"

    def spawn(self, proc: Process, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        return self.loop.start_process(proc, coro)

    def run_as(self, proc: Process, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run the simulation until `coro`, run as `proc`, ends; its result."""
        return self.loop.run_until_complete(self.spawn(proc, coro))

    def run_for(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def run_until(self, condition: Callable[[], bool], timeout_s: float, step_s: float = 0.05) -> bool:
        """Run until `condition()` holds (checked every step_s of virtual time) or timeout_s passed."""
        deadline = self.loop.time() + timeout_s
        while not condition():
            if self.loop.time() >= deadline:
                return False
            self.run_for(step_s)
        return True

    def now(self) -> float:
        return self.loop.time()

    # --- state, as the admin dump reads it --------------------------------------------------------------
    def running(self, name: str) -> bool:
        proc = self.nodes[name].proc
        return proc is not None and not proc.dead

    def dump(self, name: str, include_log: bool = False) -> dict[str, Any]:
        node = self.nodes[name]
        server, ctx = node.server, node.proc.context  # type: ignore[union-attr]
        if isinstance(server, (Broker, QuorumControllerServer)):
            return ctx.run(server.dump, include_log)
        return ctx.run(server.controller.dump)  # the single controller's dump_state answer

    def registered_unfenced(self) -> set[int]:
        """Broker ids the active controller holds unfenced."""
        for c in self.controllers:
            if not self.running(c):
                continue
            state = self.dump(c)
            if not state.get("active", True):
                continue
            return {int(b["broker_id"]) for b in state.get("brokers", []) if not b.get("fenced", True)}
        return set()

    def partition_state(self, topic: str, partition: int = 0) -> dict[str, Any] | None:
        """The active controller's record of a partition (leader, epochs, ISR, ELR), or None."""
        active = self.active_controller()
        if active is None:
            return None
        return next((p for p in self.dump(active).get("partitions", [])
                     if p["topic"] == topic and p["partition"] == partition), None)

    def leader(self, topic: str, partition: int = 0) -> str | None:
        """The node the active controller names leader of the partition, or None."""
        state = self.partition_state(topic, partition)
        return f"broker-{state['leader']}" if state and state["leader"] >= 0 else None

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Every running broker registered and unfenced at the active controller."""
        want = {self.node_id(b) for b in self.brokers if self.running(b)}
        return self.run_until(lambda: want <= self.registered_unfenced(), timeout_s)

    # --- faults -----------------------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        """SIGKILL: the process stops where it is; what it buffered in user space is lost; its sockets close."""
        node = self.nodes[name]
        proc = node.proc
        if proc is None or proc.dead:
            return
        self.loop.kill(proc)
        self.net.close_process(proc)
        discard_process_buffers(self.node_dir(name), spare=self.disk.keepers())

    def power_cut(self, name: str, torn: bool = False) -> PowerCutReport:
        """SIGKILL, then every byte the node wrote and did not fsync is lost (or torn), as the lossy file
        system's drop does in real runs; reported as it reports its drops (the broker counts them at start)."""
        self.kill(name)
        # Only the data dir: the lossy file system of real runs is mounted there, not under the node's log
        # and trace, which the harness collects after the run (clusters/docker.py).
        data_dir = os.path.join(self.node_dir(name), "data")
        report = self.disk.power_cut(data_dir, random.Random(self.rng.getrandbits(64)), torn=torn)
        self.power_cuts[name] = self.power_cuts.get(name, 0) + 1
        with open(self.lossy_status_file(name), "a") as fh:  # clusters/lossyfs.py's status line
            fh.write(json.dumps({"event": "dropped", "files": report.files, "bytes": report.bytes_lost,
                                 "seq": self.power_cuts[name]}) + "\n")
        return report

    def lossy_status_file(self, name: str) -> str:
        """Where the node's power cuts are reported, beside its data dir (clusters/docker.py's status file)."""
        return os.path.join(self.node_dir(name), "lossyfs.status")

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def stop(self, name: str) -> bool:
        """SIGTERM: the node's own handler (a broker's controlled shutdown). False if it has none yet."""
        proc = self.nodes[name].proc
        return proc is not None and self.loop.send_signal(proc, signal.SIGTERM)

    def pause(self, name: str) -> None:
        proc = self.nodes[name].proc if name in self.nodes else self.clients[name]
        if proc is not None:
            self.loop.pause(proc)

    def resume(self, name: str) -> None:
        proc = self.nodes[name].proc if name in self.nodes else self.clients[name]
        if proc is not None:
            self.loop.resume(proc)

    def partition(self, grudge: dict[str, Iterable[str]]) -> None:
        self.net.partition(grudge)

    def isolate(self, name: str) -> None:
        """A node cut off from every other node and client, both ways."""
        others = [n for n in list(self.names) + list(self.clients) if n != name]
        self.net.partition({name: others, **{o: [name] for o in others}})

    def block(self, src: str, dst: str) -> None:
        self.net.block(src, dst)

    def heal(self) -> None:
        self.net.heal()

    def set_cuts(self, pairs: Iterable[tuple[str, str]]) -> None:
        """The network blocks exactly these (src, dst) pairs from now on: the cuts of every fault that holds now
        (overlapping cuts end one by one, so the pairs an ending cut shares with another that holds stay)."""
        self.net.blocked.clear()
        for src, dst in sorted(pairs):
            self.net.block(src, dst)

    def skew_clock(self, name: str, offset_s: float) -> None:
        """The node's wall clock runs offset_s ahead (negative: behind) of true time from now on."""
        self.clock_offset_s[name] = offset_s

    def jump_clock(self, name: str, delta_s: float) -> None:
        """The node's wall clock jumps by delta_s (and stays moved)."""
        self.clock_offset_s[name] = self.clock_offset_s.get(name, 0.0) + delta_s

    def active_controller(self) -> str | None:
        for c in self.controllers:
            if self.running(c) and self.dump(c).get("active", True):
                return c
        return None

    # --- what a run keeps (as clusters/reference.py's collect) -----------------------------------------------
    async def _dump_state(self, node: SimNode) -> dict[str, Any]:
        """The node's answer to the admin dump request, through its own RPC handler."""
        server = node.server
        handler = server.dispatch_rpc if isinstance(server, Broker) else server.dispatch
        return (await handler("dump_state", {"include_log": True}))["state"]

    def dump_state(self, name: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
        """As the harness's dump request: None when the node is down or does not answer within timeout_s."""
        node = self.nodes[name]
        if node.proc is None or node.proc.dead:
            return None
        task = self.spawn(node.proc, self._dump_state(node))
        self.loop.run_until_complete(asyncio.wait([task], timeout=timeout_s))
        if not task.done() or task.exception() is not None:
            task.cancel()
            return None
        return task.result()

    def collect(self, dest_dir: str) -> None:
        """Each node's log, trace, metadata log and state dump into dest_dir/<node>/, then replicas.json beside
        it (clusters/replica_dumps.py). Brokers first, controllers last, as a real cluster's collect does."""
        for name in self.brokers + self.controllers:
            out = os.path.join(dest_dir, name)
            os.makedirs(out, exist_ok=True)
            node = self.nodes[name]
            if node.proc is not None and not node.proc.dead:
                node.proc.context.run(node.server.events.flush)  # the trace lines its housekeeping would flush
            role = "controller" if name in self.controllers else "broker"
            for path in (os.path.join(self.node_dir(name), f"{role}.log"),
                         os.path.join(self.node_dir(name), "trace.jsonl"),
                         os.path.join(self.node_dir(name), "data", "metadata.log")):
                if os.path.exists(path):
                    shutil.copyfile(path, os.path.join(out, os.path.basename(path)))
            state = self.dump_state(name)
            with open(os.path.join(out, "state.json"), "w") as fh:
                json.dump(state if state is not None else {"unreachable": True}, fh, indent=1)
        collect_replicas(Path(dest_dir), self.names)

    # --- the end ------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop simulating. Each running node's trace is flushed first (what a real run's teardown collects
        after stopping the nodes), then every process is killed where it stands. A run dir the cluster made
        itself (none was given) is removed: what a caller keeps it copies out first (`collect`)."""
        if self.loop.is_closed():
            return
        for name in self.names:
            node = self.nodes[name]
            if node.proc is not None and not node.proc.dead:
                node.proc.context.run(node.server.events.flush)
                self.kill(name)
        for proc in self.clients.values():
            self.loop.kill(proc)
        self.loop.discard_processes()
        self.disk.close()
        asyncio.set_event_loop(None)
        self.loop.close()
        if self.owns_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
