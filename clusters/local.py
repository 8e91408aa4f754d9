"""The local cluster backend: the reference broker's controller and brokers as processes on this machine.

Each node has its own data dir and port under the run directory, its process carries
KAFKAESQUE_OWNER=<run id> in its environment and its dir a marker naming the run (so
`kafkaesque cleanup` finds the leftovers of a crashed run: clusters/ownership.py, and only
those of runs whose harness is gone), and the clock-offset preload (clusters/clock_preload.py) so a clock
fault can skew one node's wall clock without touching the host's (ClockControl). Network
partitions need a node per network namespace or container (the docker backend); here they
are refused by name (IsolatedNodes says why).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.ownership import (
    Leftover,
    RunRecord,
    mark_local_dir,
    pick,
    process_start_time,
    register_run,
    remove_all,
    unregister_run,
)
from kafkaesque_harness.clusters.ports import free_ports
from kafkaesque_harness.clusters.reference import CONTROLLER, OWNER_ENV, ReferenceCluster
from kafkaesque_harness.clusters.remote import LocalRemote

__all__ = ["CONTROLLER", "LocalCluster", "cleanup_leftovers", "find_processes"]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class LocalCluster(ReferenceCluster):
    name = "local"
    python = sys.executable

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None):
        super().__init__(spec, run_dir, owner)
        self.data_root = Path(spec.data_dir) if spec.data_dir else self.run_dir / "data"
        self._remote = LocalRemote("local")
        self.ports: dict[str, int] = {}
        self._clock_lib: str | None = None
        self._clock_problem: str | None = "the clock preload is built when the cluster starts, which it has not"
        self._registration: RunRecord | None = None

    def remote(self, node: str) -> LocalRemote:
        return self._remote

    def address(self, node: str) -> tuple[str, int]:
        return "127.0.0.1", self.ports[node]

    def listen(self, node: str) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def node_dir(self, node: str) -> str:
        return str(self.data_root / node)

    def clock_file(self, node: str) -> str:
        return f"{self.node_dir(node)}/clock-offset"

    def clock_unavailable(self) -> str | None:
        return self._clock_problem

    def isolation_unavailable(self) -> str | None:
        return f"the {self.name} cluster runs every node as a process on this host's loopback"

    def netem_probe_unavailable(self) -> str | None:
        return "not probed: the nodes share this host's network devices"

    def node_env(self, node: str) -> dict[str, str]:
        env = super().node_env(node)
        if self.spec.node_code:
            # A copy of the node code (a mutant's, clusters/code_copy.py) before everything else.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self.spec.node_code, os.environ.get("PYTHONPATH")) if p)
        if self._clock_lib:
            from kafkaesque_harness.clusters.clock_preload import preload_env

            env.update(preload_env(self._clock_lib, self.clock_file(node)))
        return env

    def up(self) -> str:
        try:
            # Before anything is made: from here until down() the run is live to `kafkaesque cleanup`.
            self._registration = register_run(self.owner, self.name, str(self.run_dir))
            self._build_clock_preload()
            self._prepare_nodes()
            return self._start_every_node(timeout_s=60)
        except BaseException:
            self.down()
            raise

    def _build_clock_preload(self) -> None:
        """The clock preload for every node's process; where it cannot be built the nodes run without it and
        the clock faults refuse, naming the reason (ClockControl)."""
        from kafkaesque_harness.clusters.clock_preload import PreloadBuildError, build_preload

        try:
            self._clock_lib, self._clock_problem = str(build_preload()), None
        except PreloadBuildError:
            self._clock_lib = None
            self._clock_problem = "the clock preload library could not be built here (install gcc)"

    def _prepare_nodes(self) -> None:
        """Ports and data dirs; a subclass adds what its nodes need (namespaces, mounts)."""
        base = self.spec.base_port
        chosen = free_ports(len(self.nodes()))
        for i, node in enumerate(self.nodes()):
            self.ports[node] = base + i if base else chosen[i]
            if base and not _port_free(self.ports[node]):
                raise ClusterError(f"Port {self.ports[node]} for {node} is already in use; pick another "
                                   "--base-port or stop what listens there.")
            os.makedirs(self.node_dir(node), exist_ok=True)
            mark_local_dir(self.node_dir(node), self.owner)

    def down(self) -> None:
        for node in reversed(self.nodes()):
            if node in self.ports:
                self._remote.signal_daemon(self.pidfile(node), signal.SIGCONT)
                self.kill(node)
        self._unregister()

    def _unregister(self) -> None:
        """The run's cluster is gone: its registration goes too (clusters/ownership.py)."""
        if self._registration is not None:
            unregister_run(self._registration)
            self._registration = None


def find_processes() -> list[Leftover]:
    """Every process on this machine that carries KAFKAESQUE_OWNER (a node or lossy file system a run
    started), this process aside, as a leftover of the run it names."""
    found = []
    me = os.getpid()
    marker = f"{OWNER_ENV}=".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker not in environ:
            continue
        run = next((kv[len(marker):].decode(errors="replace") for kv in environ.split(b"\0")
                    if kv.startswith(marker)), "")
        pid, start = int(entry.name), process_start_time(int(entry.name))
        if start is None:
            continue  # gone, or a zombie its parent will reap
        found.append(Leftover(run, f"process {pid} ({_describe(entry)}run {run})", _killer(pid, start, environ),
                              rank=0))
    return found


def _describe(proc: Path) -> str:
    """"python3, paused, " for a stopped python3: what the process is, for the user reading the list."""
    try:
        comm = (proc / "comm").read_text().strip()
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
    return f"{comm}, {'paused, ' if state in ('T', 't') else ''}"


def _killer(pid: int, start: int, environ: bytes):
    def kill() -> None:
        if process_start_time(pid) != start:
            return  # it ended since it was found, and the pid may be another program's now
        _reset_clock_file(environ)
        try:
            os.kill(pid, signal.SIGCONT)  # a paused process would otherwise hold its sockets until reaped
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return kill


def cleanup_leftovers(owner: str = "") -> list[str]:
    """Kill the processes one run left behind (`owner`: a test cleaning up after itself), or, without an
    owner, those of every run whose harness is gone (never a live run's, nor one nothing here names)."""
    return remove_all(pick(find_processes(), owner))


def _reset_clock_file(environ: bytes) -> None:
    """Put a leftover node's clock control file back to the real time (offset 0): a clock fault a
    crashed run never healed must not greet whatever starts next on that data dir."""
    from kafkaesque_harness.clusters.clock_preload import CLOCK_FILE_ENV, offset_file_text

    marker = f"{CLOCK_FILE_ENV}=".encode()
    for kv in environ.split(b"\0"):
        path = kv[len(marker):].decode(errors="replace")
        if kv.startswith(marker) and os.path.exists(path):  # a removed run dir took its skew with it
            try:
                LocalRemote().put(path, offset_file_text(0).encode())
            except OSError:
                pass
