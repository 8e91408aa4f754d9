"""Any Kafka-protocol cluster, run from its cluster file (clusters/cluster_file.py says what the file holds):
ExternalCluster sets the nodes up, starts and stops the system, answers role lookups through the Kafka
protocol alone, and acts on its nodes through the same Remotes as our own brokers; the markers that let
`kafkaesque cleanup` heal a dead run's nodes live here too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.base import (
    ADMIN_BOOTSTRAP_MS,
    DEFAULT_NET_DEVICE,
    ClusterError,
    ClusterSpec,
    PartitionView,
    proc_sys_refusal,
)
from kafkaesque_harness.clusters.claimed_nodes import ClaimedNodes, heal_marked, heal_runs
from kafkaesque_harness.clusters.cluster_file import (
    KIND_EXTERNAL,
    ClusterFile,
    ExternalNode,
    cluster_file_kind,
    load_cluster_file,
    render_all,
)
from kafkaesque_harness.clusters.ownership import (
    Leftover,
    forget_pause_script,
    read_node_marker,
    record_pause_script,
    register_run,
    release_node_dir,
    release_run,
    remove_added_qdisc,
    resume_paused_script,
    state_dir,
)
from kafkaesque_harness.clusters.remote import RemoteError
from kafkaesque_harness.clusters.replica_dumps import no_dumps, write_replicas
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until

STOP_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 120.0
STARTED_WITHIN_S = 10.0  # after `start` returns, its process must be found live by then
READY_WITHIN_S = 60.0    # after that, its `ready` command (when the file gives one) must exit 0 by then
COMMANDS_LOG = "commands.jsonl"  # in the run dir: every command run on the nodes (_sh)


class ExternalCluster(ClaimedNodes):
    """A Kafka-protocol cluster we did not build, driven by the commands of its cluster file."""

    name = "external"

    def __init__(self, cf: ClusterFile, run_dir: str, owner: str | None = None):
        self.cf = cf
        self.run_dir = Path(run_dir)
        # The run's id on every node's marker (clusters/ownership.py), as clusters/reference.py makes it.
        self.owner = owner or f"{self.run_dir.name}-{os.getpid()}"
        self._claimed: set[str] = set()  # nodes whose dir this run holds: the only ones it stops or marks
        self.spec = ClusterSpec(brokers=sum(1 for n in cf.nodes if "broker" in n.roles))
        self.by_name = {n.name: n for n in cf.nodes}
        self.remotes: dict[str, Any] = {}
        self.capabilities: dict[str, Any] | None = None  # probed in up() (clusters/capabilities.py)
        self._rendered: dict[str, dict[str, Any]] = {}
        self._docker_client = None  # transport docker: the engine's client, made on first use
        self._network = None  # docker: the network of the containers this run created
        self._listed: list[tuple[int, str, int]] = []  # (id, host, port) of each broker Metadata last listed

    @classmethod
    def from_file(cls, path: str, spec: ClusterSpec | None, run_dir: str, owner: str | None = None) -> ExternalCluster:
        return cls(load_cluster_file(path), run_dir, owner)

    # --- naming ---------------------------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes]

    def broker_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if "broker" in n.roles]

    def controller_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if "controller" in n.roles]

    # --- the object store (nodes of role storage; clusters/examples/tansu-s3.toml) -------------------------
    def storage_nodes(self) -> list[str]:
        """ObjectStore (clusters/base.py): the nodes that hold the brokers' data, started before them."""
        return [n.name for n in self.cf.nodes if n.is_storage]

    def store_kill_unavailable(self) -> str | None:
        """Why killing and restarting the store would not be a fault the system could survive, or None: a
        store that keeps its objects only in memory (durable = false, moto's server) comes back empty, so a
        kill is the loss of every record by construction, not a finding."""
        lost = [n.name for n in self.cf.nodes if n.is_storage and not n.durable]
        if lost:
            return (f"{', '.join(lost)} keeps its objects only in memory (durable = false in the cluster file "
                    f"{self.cf.path}), so a restart would come back empty and lose every record by construction")
        return None

    def brokers_share_nothing_reason(self) -> str | None:
        """SharedStore (clusters/base.py): why the brokers coordinate only through the store, or None."""
        stores = self.storage_nodes()
        if not stores:
            return None
        return (f"the brokers of the cluster file {self.cf.path} share nothing but the object store "
                f"({', '.join(stores)}): they never talk to each other")

    def worker_bootstrap(self, worker: int) -> str:
        """SpreadClients (clusters/base.py): the bootstrap of the workload's `worker`. Where the brokers share
        ids (tansu: 111 on every broker, each advertising itself alone), a client stays on the broker it
        bootstraps to, so worker w is given broker w mod n: producers write one partition through different
        brokers and consumers read through others, by design rather than by the client library's draw."""
        brokers = self.broker_nodes()
        if not self.shared_ids or len(brokers) < 2:
            return self.bootstrap()
        host, port = self.address(brokers[worker % len(brokers)])
        return f"{host}:{port}"

    def client_address(self, node: str) -> str | None:
        """ClientCuts (clusters/base.py): the address the node sees the harness's clients come from (docker:
        its network's gateway, through which the host reaches it); None where it is not known (ssh)."""
        if self.cf.transport != "docker":
            return None
        remote = self.remote(node)
        nets = remote.container.attrs.get("NetworkSettings", {}).get("Networks", {})
        return next((v.get("Gateway") for v in nets.values() if v.get("Gateway")), None)

    def client_cut_unavailable(self) -> str | None:
        if self.cf.transport != "docker":
            return (f"the cluster file {self.cf.path} reaches its nodes over SSH, where the address the harness's "
                    "clients come from is not known")
        return None

    def node_id(self, node: str) -> int:
        """The file's id, else the id Metadata lists at the node's address (-1 while it lists none)."""
        n = self.by_name[node]
        if n.id is not None:
            return n.id
        at = self.address(node)
        return next((b_id for b_id, host, port in self._listed if (host, port) == at), -1)

    def node_name(self, node_id: int) -> str:
        """The node with this Kafka node id. Where several nodes share it (or none fixes it), the one whose
        address Metadata advertises for that id; a node the file does not give is named, never guessed."""
        fixed = [n.name for n in self.cf.nodes if n.id == node_id]
        if len(fixed) == 1:
            return fixed[0]
        if not any(b_id == node_id for b_id, _, _ in self._listed):
            try:
                self.broker_listing()
            except Exception:  # noqa: BLE001 - no broker answers: the id stays unnamed
                pass
        for b_id, host, port in self._listed:
            if b_id == node_id:
                at = next((n.name for n in self.cf.nodes if self.address(n.name) == (host, port)
                           and n.id in (None, node_id)), None)
                if at:
                    return at
        return f"id-{node_id}"

    def shared_ids_reason(self) -> str | None:
        """SharedIds (clusters/base.py): why an id the cluster reports may name several of its nodes."""
        if not self.shared_ids:
            return None
        ids = ", ".join(f"{n.name}: {'none' if n.id is None else n.id}" for n in self.cf.nodes)
        return f"the cluster file {self.cf.path} gives no node an id of its own ({ids})"

    @property
    def shared_ids(self) -> bool:
        """Whether the file leaves a node's id open or gives one id to several nodes: then an id names no
        single replica, and ISR-based targets do not apply."""
        ids = [n.id for n in self.cf.nodes]
        return None in ids or len(set(ids)) < len(ids)

    def remote(self, node: str):
        if node not in self.remotes:
            self.remotes[node] = self._make_remote(self.by_name[node])
        return self.remotes[node]

    def _make_remote(self, n: ExternalNode):
        if self.cf.transport == "ssh":
            from kafkaesque_harness.clusters.ssh_remote import SshRemote, SshTarget

            return SshRemote(SshTarget(host=n.host, **n.ssh), n.name)
        from kafkaesque_harness.clusters.remote import DockerRemote

        name = self.container_name(n.name)
        try:
            container = self._docker().containers.get(name)
        except Exception as e:  # noqa: BLE001 - docker.errors.NotFound and API errors
            if n.managed:
                raise ClusterError(f"{n.name}: the container {name} this run creates is not on the Docker engine "
                                   f"({type(e).__name__}); was it removed while the run was on?") from None
            raise ClusterError(f"{n.name}: container {n.container!r} is not on the Docker engine ({type(e).__name__}); "
                               "start it, or fix `container` in the cluster file.") from None
        if not n.host:  # the address other nodes see it at: its first network's
            nets = container.attrs.get("NetworkSettings", {}).get("Networks", {})
            n.host = next((v.get("IPAddress") for v in nets.values() if v.get("IPAddress")), "")
            if not n.host:
                raise ClusterError(f"{n.name}: container {n.container!r} has no IP address; attach it to a network "
                                   "or give the node a host.")
        return DockerRemote(container, n.name)

    def _docker(self):
        if self._docker_client is None:
            if self.cf.docker.get("base_url"):
                import docker

                self._docker_client = docker.DockerClient(base_url=self.cf.docker["base_url"], timeout=60)
            else:
                from kafkaesque_harness.clusters.docker import docker_client

                self._docker_client = docker_client("start dockerd, or fix [docker] base_url in the cluster file")
        return self._docker_client

    # --- containers the harness creates (transport docker, a node without `container`) ----------------------
    def container_name(self, node: str) -> str:
        n = self.by_name[node]
        return f"kq-{self.owner}-{node}" if n.managed else n.container

    def managed_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if n.managed]

    def _create_containers(self) -> None:
        """One container per managed node, from [docker] image (default: the node image, clusters/image.py),
        on a network of this run's, labelled as clusters/docker.py labels its own so that `kafkaesque
        cleanup` removes them once the run is dead. NET_ADMIN for iptables and tc; nothing broader."""
        from kafkaesque_harness.clusters.docker import LABEL, RUN_LABEL

        image = self.cf.docker.get("image") or ""
        if not image:
            from kafkaesque_harness.clusters.image import ImageError, ensure_image

            try:
                image = ensure_image(log=lambda m: None)
            except ImageError as e:
                raise ClusterError(str(e)) from None
        client, labels = self._docker(), {LABEL: self.owner, RUN_LABEL: self.owner}
        self._network = client.networks.create(f"kafkaesque-{self.owner}", driver="bridge", labels=labels)
        for node in self.managed_nodes():
            try:
                client.containers.run(image, name=self.container_name(node), hostname=node,
                                      network=self._network.name, detach=True, init=True,
                                      labels={**labels, f"{LABEL}.node": node}, cap_add=["NET_ADMIN"],
                                      command=["sleep", "infinity"])
            except Exception as e:  # noqa: BLE001 - docker.errors.ImageNotFound, APIError
                raise ClusterError(f"{node}: the Docker engine did not start a container of image {image!r} "
                                   f"({type(e).__name__}: {str(e)[-200:]}); fix [docker] image in the cluster file "
                                   f"{self.cf.path} (empty: the node image), or build it (`kafkaesque image`).") from None

    def _remove_containers(self) -> None:
        if not self.managed_nodes():
            return
        client = self._docker()
        for node in self.managed_nodes():
            try:
                client.containers.get(self.container_name(node)).remove(force=True)
            except Exception:  # noqa: BLE001 - never created, or already gone
                pass
            self.remotes.pop(node, None)
        if self._network is not None:
            try:
                self._network.remove()
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._network = None

    def rendered(self, node: str) -> dict[str, Any]:
        if node not in self._rendered:
            for n in self.nodes():  # docker: every container's IP is a placeholder value (controller, voters)
                self.remote(n)
            self._rendered[node] = render_all(self.cf, self.by_name[node])
        return self._rendered[node]

    def address(self, node: str) -> tuple[str, int]:
        """Where the node serves: a broker's Kafka listener, a storage node's object store (what a cut's
        probe connects to)."""
        self.remote(node)
        n = self.by_name[node]
        return n.host, n.storage_port if n.is_storage else n.kafka_port

    def bootstrap(self) -> str:
        return self.rendered(self.nodes()[0])["vars"]["bootstrap"]

    def node_data_dir(self, node: str) -> str:
        # Not `data_dir`: the disk fault corrupts the reference broker's segment layout, which this is not.
        # "" when the file gives none (a broker with memory storage).
        return self.rendered(node)["vars"].get("data_dir", "")

    def log_paths(self, node: str) -> list[str]:
        return self.rendered(node)["logs"]

    # --- what the nodes allow: abilities (clusters/base.py) -----------------------------------------------
    # Pausable, HasRemotes, NetDevice, IsolatedNodes (when the probe says so), StateDumps, PageCacheDrop and
    # ClockControl (each saying why not where it cannot: ClockControl never, with the probed reason). Not
    # LossyDisk, SegmentFiles nor ControllerAdmin: those need hooks into the broker's storage and controller
    # that a system we did not build does not give.
    def clock_file(self, node: str) -> str:
        return f"{self.rendered(node)['vars']['dir']}/clock-offset"  # never written: clock_unavailable says why

    def clock_unavailable(self) -> str | None:
        """Always a reason: the file's start commands do not run the broker under the clock preload. Where the
        probe found a static binary, that too: no LD_PRELOAD can reach it, and a time namespace (unshare
        --time) offsets only CLOCK_MONOTONIC and CLOCK_BOOTTIME, never the wall clock the faults skew."""
        caps = self.capabilities or {}
        static = [f"{n} ({caps[n]['preload'].detail})" for n in self.nodes()
                  if caps.get(n, {}).get("preload") and not caps[n]["preload"].ok and "static" in caps[n]["preload"].detail]
        why = "the cluster file's start commands do not run the brokers under the clock preload"
        if static:
            why += (f"; and on {', '.join(static)} no preload could act; a time namespace (unshare --time) would "
                    "offset only CLOCK_MONOTONIC and CLOCK_BOOTTIME, not the wall clock these faults skew")
        return why

    def isolation_unavailable(self) -> str | None:
        hosts = [self.address(n)[0] for n in self.nodes()]
        shared = sorted({h for h in hosts if hosts.count(h) > 1})
        if shared:
            return f"in the cluster file {self.cf.path}, several nodes share {', '.join(shared)}"
        caps = self.capabilities or {}
        denied = [n for n in self.nodes() if not (caps.get(n, {}).get("iptables") and caps[n]["iptables"].ok)]
        if denied:
            return f"iptables does not run for the node's user on {', '.join(denied)} (see the capability table)"
        return None

    @property
    def isolated_nodes(self) -> bool:
        """IsolatedNodes as a yes or no, for people and tests (faults ask nemesis/requirements.py)."""
        return self.isolation_unavailable() is None

    def net_device(self, node: str) -> str:
        return DEFAULT_NET_DEVICE

    def netem_probe_unavailable(self) -> str | None:
        return None

    def state_dumps_unavailable(self) -> str | None:
        return "a system we did not build gives no admin dump of its partitions and logs"

    def page_cache_unavailable(self) -> str | None:
        return proc_sys_refusal(self, "the nodes' user may not write it (run as root)")

    # --- commands ---------------------------------------------------------------------------------------
    def pid_command(self, node: str) -> str:
        return self.rendered(node)["commands"]["pid"]

    def _pid_script(self, node: str) -> str:
        """Shell that leaves in $p the first pid the pid command prints that is a live process other than
        the shell asking (and its parent, sudo's or ssh's): `pgrep -f NAME` also matches the `sh -c` running
        it, whose command line holds NAME, and the subshell of `$(...)`, gone once it has answered."""
        return (f"p=''; for c in $({self.pid_command(node)}); do case \"$c\" in ''|*[!0-9]*) continue;; esac; "
                "[ \"$c\" != \"$$\" ] && [ \"$c\" != \"$PPID\" ] && kill -0 \"$c\" 2>/dev/null && { p=$c; break; }; done")

    def _sh(self, node: str, script: str, timeout: float = 30.0, check: bool = False, *, what: str,
            yours: str | None = None):
        """Run `script` on the node through `sh -c`; each command, its exit status and the end of its output
        go to the run dir's commands.jsonl, so a cluster file's author sees what the harness ran: `what` says
        why it ran (start, stop, pid for a signal, ...) and `yours` is the cluster file's own command as
        rendered, where the harness wrapped it in a script of its own (the pid command inside the loop that
        skips the asking shell), so the author finds the line they wrote."""
        t0 = time.monotonic()
        r = self.remote(node).run(["sh", "-c", script], timeout=timeout, check=False)
        try:
            with open(self.run_dir / COMMANDS_LOG, "a") as f:
                f.write(json.dumps({"node": node, "what": what, **({"yours": yours} if yours is not None else {}),
                                    "command": script, "exit": r.exit, "seconds": round(time.monotonic() - t0, 3),
                                    "out": r.out[-500:], "err": r.err[-500:]}) + "\n")
        except OSError:
            pass  # the log is for the reader; a run dir that cannot take it changes nothing the run does
        if check and not r.ok:
            raise RemoteError(f"{node}: `{script}` exited {r.exit}: {(r.err.strip() or r.out.strip())[-300:]}")
        return r

    def _signal(self, node: str, sig: str) -> bool:
        """Send a signal to the pid the pid command prints (one round trip). A SIGSTOP is listed beside the
        node's marker (pid and start time) until its SIGCONT, so cleanup can resume it if the harness dies."""
        script = f"{self._pid_script(node)}; test -n \"$p\" && kill -{sig} \"$p\""
        if node in self._claimed and sig in ("STOP", "CONT"):
            d = self.node_dir(node)
            script += f" && {record_pause_script(d) if sig == 'STOP' else forget_pause_script(d)}"
        return self._sh(node, script, timeout=15, what=f"signal {sig} to the pid command's process",
                        yours=self.pid_command(node)).ok

    def process_state(self, node: str) -> str:
        """"running", "paused" or "down", asked of the node."""
        script = (f"{self._pid_script(node)}; "
                  "test -n \"$p\" && kill -0 \"$p\" 2>/dev/null && grep '^State:' /proc/$p/status")
        r = self._sh(node, script, timeout=15, what="process state of the pid command's process",
                     yours=self.pid_command(node))
        state = r.out.split()[1:2] if r.ok else []
        return {"T": "paused", "t": "paused", "Z": "down", "X": "down"}.get(state[0], "running") if state else "down"

    def is_running(self, node: str) -> bool:
        return self.process_state(node) != "down"

    def _wait_down(self, node: str, timeout_s: float) -> bool:
        try:
            return wait_until(lambda: not self.is_running(node), timeout_s, 0.2, f"{node}'s exit")
        except WaitTimeout:
            return False

    def start(self, node: str) -> None:
        """Run the start command (it must return: start the system in the background) and see its process
        live within STARTED_WITHIN_S, or fail at once with what its log says."""
        if self.is_running(node):
            return
        r = self._sh(node, self.rendered(node)["commands"]["start"], timeout=COMMAND_TIMEOUT_S, what="start")
        if not r.ok:
            raise ClusterError(f"the start command of {node} exited {r.exit} "
                               f"({(r.err.strip() or r.out.strip() or 'no output').splitlines()[-1]}); "
                               "run it by hand on the node and fix it in the cluster file.")
        try:
            wait_until(lambda: self.is_running(node), STARTED_WITHIN_S, 0.2, f"{node}'s process")
        except WaitTimeout:
            raise ClusterError(f"{node}'s start command returned but the pid command finds no live process "
                               f"{STARTED_WITHIN_S:g} s later; {self.log_tail(node)}") from None

    def wait_node_ready(self, node: str, timeout_s: float = READY_WITHIN_S) -> None:
        """Until the node's `ready` command exits 0 (a store: its bucket exists), when the file gives one;
        else a ClusterError with what the command said last and the end of the node's log."""
        ready = self.rendered(node)["commands"].get("ready")
        if not ready:
            return
        last = None

        def answered() -> bool:
            nonlocal last
            last = self._sh(node, ready, timeout=30, what="ready")
            return last.ok

        try:
            wait_until(answered, timeout_s, 0.5, f"{node}'s ready command")
        except WaitTimeout:
            said = (last.err.strip() or last.out.strip() or "no output").splitlines()[-1] if last else "never ran"
            raise ClusterError(f"{node}'s ready command did not exit 0 within {timeout_s:g} s (last: {said[-200:]}); "
                               f"{self.log_tail(node)}") from None

    def log_tail(self, node: str, lines: int = 5) -> str:
        """The last lines of the node's first log file, as one clause (what a failed start says)."""
        for path in self.log_paths(node):
            try:
                text = self.remote(node).get(path).decode(errors="replace").strip()
            except Exception:  # noqa: BLE001 - not there (yet): the next one, or say so
                continue
            tail = " | ".join(text.splitlines()[-lines:]) if text else "(empty)"
            return f"the end of {path}: {tail[-600:]}"
        return ("no log file the cluster file names ([paths] logs) exists on the node; make the start command "
                "write its output there")

    def kill(self, node: str) -> None:
        self._signal(node, "KILL")  # SIGKILL works on a paused process too
        self._wait_down(node, 10)

    def stop(self, node: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
        self._signal(node, "CONT")  # a paused process cannot shut down cleanly
        self._sh(node, self.rendered(node)["commands"]["stop"], timeout=COMMAND_TIMEOUT_S, what="stop")
        if not self._wait_down(node, timeout_s):
            self.kill(node)

    def pause(self, node: str) -> None:
        self._signal(node, "STOP")

    def resume(self, node: str) -> None:
        self._signal(node, "CONT")

    # --- lifecycle ---------------------------------------------------------------------------------------
    def up(self) -> str:
        try:
            register_run(self.owner, self.name, str(self.run_dir))  # live to `kafkaesque cleanup` until down()
            if self.managed_nodes():
                self._create_containers()
            self._each(self._connect)
            self._mark_leftover()
            self._each(self._claim)  # every node's dir checked before anything is stopped or written
            self._each(self._install)
            # The store first (the brokers keep their data in it), then controllers, then brokers.
            first = self.storage_nodes() + self.controller_nodes()
            for node in first + [n for n in self.nodes() if n not in first]:
                self.start(node)
                self.wait_node_ready(node)
            self.wait_ready(self.broker_nodes(), timeout_s=120)
            from kafkaesque_harness.clusters.capabilities import probe_cluster

            self.capabilities = probe_cluster(self)
            return self.bootstrap()
        except KeyboardInterrupt:
            self._collect_quietly()
            self.down(quick=True)  # Ctrl-C: no graceful stops, the user is waiting
            raise
        except (RemoteError, ClusterError) as e:
            kept = self._collect_quietly()
            self.down()
            raise ClusterError(str(e).rstrip(".") + (f"; the nodes' logs are in {kept}" if kept else "") + ".") from None
        except BaseException:
            self._collect_quietly()
            self.down()
            raise

    def _collect_quietly(self) -> Path | None:
        """A set-up that failed keeps the nodes' logs in the run dir (nodes/<node>/); where, when any was there."""
        dest = self.run_dir / "nodes"
        try:
            self.collect(str(dest))
        except Exception:  # noqa: BLE001 - the set-up's own error is what the user must see
            return None
        return dest if any(f.is_file() and f.suffix != ".json" for f in dest.rglob("*")) else None


    def _connect(self, node: str) -> None:
        r = self.remote(node)  # a container's: found on the engine now, or a ClusterError naming it
        if self.cf.transport == "ssh":  # a container's Remote needs no connection
            r.connect()
            if r.target.sudo and not r.run(["true"], timeout=20).ok:
                raise ClusterError(f"{node}: `sudo -n` does not work for {r.where()}; allow that user passwordless "
                                   "sudo there, or set sudo = false.")

    def node_dir(self, node: str) -> str:
        return self.rendered(node)["vars"]["dir"]

    @property
    def dirs_named_in(self) -> str:
        return f"[paths] of the cluster file {self.cf.path}"

    def _install(self, node: str) -> None:
        """Stop what runs there, then the file's install steps: upload and unpack, config, commands."""
        if self.is_running(node):
            self.stop(node)
        rd, r, inst = self.rendered(node), self.remote(node), self.cf.install
        d = rd["vars"]["dir"]
        r.run(["mkdir", "-p", d], check=True)
        if "tarball" in inst:
            remote_tar = f"{d}/{Path(inst['tarball']).name}"
            r.put(remote_tar, Path(inst["tarball"]).read_bytes())
            r.run(["mkdir", "-p", rd["unpack_to"]], check=True)
            r.run(["tar", "-xzf", remote_tar, "-C", rd["unpack_to"]], timeout=COMMAND_TIMEOUT_S, check=True)
        for local, dest in rd["copies"]:  # a binary keeps its mode: the put writes 0644
            r.put(dest, Path(local).read_bytes())
            r.run(["chmod", f"{Path(local).stat().st_mode & 0o777:o}", dest], check=True)
        if "config" in rd:
            r.put(rd["config_path"], rd["config"].encode())
        for cmd in rd["install_commands"]:
            res = self._sh(node, cmd, timeout=COMMAND_TIMEOUT_S, what="install")
            if not res.ok:
                last = (res.err.strip() or res.out.strip() or "no output").splitlines()[-1]
                raise ClusterError(f"the install command `{cmd}` failed on {node} (exit {res.exit}: {last}); fix it "
                                   "in [install] commands of the cluster file.")

    def down(self, quick: bool = False) -> None:
        """Stop every node this run claimed (`quick`: SIGKILL, not the stop command and its wait) and remove
        what the run created."""
        try:
            self._release_claimed(self.kill if quick else self.stop)
        finally:
            self._close_remotes()
            self._remove_containers()
        self._unmark_leftover()
        release_run(self.owner)

    # --- leftovers: what `kafkaesque cleanup` undoes on the nodes of a harness that died -------------------
    def _local_marker(self) -> Path:
        return external_state_dir() / f"{self.owner}.json"

    def _mark_leftover(self) -> None:
        marker = self._local_marker()
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"cluster_file": str(Path(self.cf.path).expanduser().resolve()),
                                      "owner": self.owner, "run_dir": str(self.run_dir)}))

    def _unmark_leftover(self) -> None:
        self._local_marker().unlink(missing_ok=True)

    def heal_leftovers(self) -> list[str]:
        """On every node whose marker still names this run: SIGCONT what it paused (the same processes:
        pid and start time), remove our iptables chain, and a tbf qdisc it added; returns the nodes healed.
        A node another run holds now, or without our marker, is not touched."""
        from kafkaesque_harness.clusters import netrules

        def heal(node: str) -> str | None:
            try:
                self._connect(node)
                d = self.node_dir(node)
                marker = read_node_marker(self.remote(node), d)
                if marker is None or marker.get("run") != self.owner:
                    return None
                self._sh(node, resume_paused_script(d), timeout=30, what="resume what the run left paused")
                for argv in netrules.remove_chain():
                    self.remote(node).run(argv, timeout=20)
                remove_added_qdisc(self.remote(node), marker)
                release_node_dir(self.remote(node), d, self.owner)
                return node
            except Exception:  # noqa: BLE001 - an unreachable node is reported by its absence
                return None

        try:
            return [n for n in self._each(heal) if n]
        finally:
            self._close_remotes()

    def _close_remotes(self) -> None:
        if self.cf.transport == "ssh":  # SSH connections; a container's Remote holds none
            for r in self.remotes.values():
                r.close()

    # --- roles, through the Kafka protocol only ----------------------------------------------------------
    def _admin(self, bootstrap: list[str] | None = None):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=bootstrap or self.bootstrap().split(","), request_timeout_ms=5000,
                                bootstrap_timeout_ms=ADMIN_BOOTSTRAP_MS, client_id="kafkaesque-roles")

    def partitions(self, topic: str) -> list[PartitionView]:
        from kafkaesque_harness.clusters.reference import metadata_partitions

        return metadata_partitions(self.bootstrap(), topic)

    def active_controller(self) -> str | None:
        """DescribeQuorum's leader (KRaft), else DescribeCluster's (or Metadata's) controller id when it
        names a controller; else the only controller the file lists; else None."""
        controllers = self.controller_nodes()
        try:
            admin = self._admin()
        except Exception:  # noqa: BLE001 - no broker answers: nothing known
            return controllers[0] if len(controllers) == 1 else None
        try:
            for ask in (self._quorum_leader, self._described_controller):
                try:
                    leader = ask(admin)
                except Exception:  # noqa: BLE001 - not supported by this cluster, or no answer
                    continue
                if leader is not None and self.node_name(leader) in controllers:
                    return self.node_name(leader)
        finally:
            admin.close()
        return controllers[0] if len(controllers) == 1 else None

    @staticmethod
    def _quorum_leader(admin) -> int | None:
        q = admin.describe_metadata_quorum()
        return q["topics"][0]["partitions"][0]["leader_id"]

    @staticmethod
    def _described_controller(admin) -> int | None:
        return admin.describe_cluster().get("controller_id")

    def fenced_brokers(self) -> set[int]:
        """The file's brokers that Metadata does not list: a KRaft cluster lists only unfenced brokers."""
        return {self.node_id(n) for n in self.broker_nodes()} - self.broker_ids()

    def broker_ids(self) -> set[int]:
        """The broker ids Metadata lists (the brokers that serve)."""
        return {b_id for b_id, _, _ in self.broker_listing()}

    def broker_listing(self) -> list[tuple[int, str, int]]:
        """(id, host, port) of every broker Metadata lists now; kept for node_name. Where the brokers share ids
        (tansu), each advertises itself alone, so each is asked at its own address and the answers joined:
        a broker that does not answer is then missing from the listing, as a fenced one would be."""
        if not self.shared_ids or len(self.broker_nodes()) < 2:
            listed = self._described_brokers()
        else:
            listed = set()
            for node in self.broker_nodes():
                try:
                    host, port = self.address(node)
                    listed |= self._described_brokers([f"{host}:{port}"])
                except Exception:  # noqa: BLE001 - down, paused or cut off: not listed
                    continue
            if not listed:
                raise ClusterError("no broker of the cluster file answered Metadata")
        self._listed = sorted(listed)
        return self._listed

    def _described_brokers(self, bootstrap: list[str] | None = None) -> set[tuple[int, str, int]]:
        """What DescribeCluster lists, asked through `bootstrap` (default: every broker)."""
        admin = self._admin(bootstrap) if bootstrap else self._admin()
        try:
            return {(b["broker_id"], b["host"], b["port"]) for b in admin.describe_cluster()["brokers"]}
        finally:
            admin.close()

    def listed_as(self, node: str, listing: list[tuple[int, str, int]]) -> bool:
        """Whether Metadata's listing has this node: its id when the file gives it one of its own, else an
        entry at its address (with its id, when it has one)."""
        n = self.by_name[node]
        if n.id is not None and not self.shared_ids:
            return any(b_id == n.id for b_id, _, _ in listing)
        at = self.address(node)
        return any((host, port) == at and n.id in (None, b_id) for b_id, host, port in listing)

    def listing_mismatch(self, listing: list[tuple[int, str, int]]) -> str | None:
        """Why Metadata's listing cannot be this file's brokers (an id, or id and address, that no node of
        the file has), or None. A listing that only lacks brokers is not a mismatch: they may still start."""
        unknown = []
        for b_id, host, port in listing:
            ours = [n for n in self.cf.nodes if n.id in (None, b_id)]
            if self.shared_ids:
                ours = [n for n in ours if self.address(n.name) == (host, port)]
            if not ours:
                unknown.append(f"{b_id} at {host}:{port}")
        if not unknown:
            return None
        given = ", ".join(f"{n.name}: id {'any' if n.id is None else n.id} at {':'.join(map(str, self.address(n.name)))}"
                          for n in self.cf.nodes if "broker" in n.roles)
        return (f"Metadata lists broker(s) {', '.join(unknown)} (all it lists: "
                f"{', '.join(f'{i} at {h}:{p}' for i, h, p in listing)}), which the cluster file {self.cf.path} "
                f"does not have ({given}); fix the nodes' id (or drop it: ids are then taken from Metadata) or host "
                "and kafka_port in the file, or the broker's advertised listener")

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        """Until Metadata lists every one of `brokers`; at once a ClusterError when what it lists cannot be
        the file's brokers (listing_mismatch), with the ids and addresses it gave."""
        listing: list[tuple[int, str, int]] = []
        mismatch: str | None = None

        def listed() -> bool:
            nonlocal listing, mismatch
            try:
                listing = self.broker_listing()
            except Exception:  # noqa: BLE001 - not up yet
                return False
            mismatch = self.listing_mismatch(listing)
            return mismatch is not None or all(self.listed_as(b, listing) for b in brokers)

        try:
            wait_until(listed, timeout_s, 0.5, "the brokers' listing in Metadata")
        except WaitTimeout:
            missing = sorted(b for b in brokers if not self.listed_as(b, listing))
            said = (f"it listed {', '.join(f'{i} at {h}:{p}' for i, h, p in listing)}" if listing
                    else "no broker answered Metadata")
            raise ClusterError(f"Metadata did not list {', '.join(missing)} within {timeout_s:.0f} s ({said}); check "
                               "those nodes' start commands and logs") from None
        if mismatch:
            raise ClusterError(mismatch + ".")

    def node_versions(self) -> dict[str, dict[str, Any]]:
        """What each node says of its version: the first line its version command prints (if the file gives
        one), and the Kafka version kafka-python reads off its ApiVersions answer (the protocol carries no
        software name; only the API ranges). Kept in test.json, so a stored run says what it ran against."""
        from kafka import KafkaAdminClient

        def one(node: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            version = self.rendered(node)["commands"].get("version")
            if version:
                r = self._sh(node, version, timeout=30, what="version")
                out["command"] = (r.out.strip() or r.err.strip()).splitlines()[0] if r.ok and (r.out + r.err).strip() \
                    else f"exit {r.exit}"
            if "broker" in self.by_name[node].roles:
                host, port = self.address(node)
                try:
                    admin = KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=5000,
                                             bootstrap_timeout_ms=ADMIN_BOOTSTRAP_MS,
                                             client_id="kafkaesque-versions")
                    try:
                        out["api_versions"] = ".".join(map(str, admin._client.check_version()))
                    finally:
                        admin.close()
                except Exception as e:  # noqa: BLE001 - a version is evidence, not a step of the run
                    out["api_versions"] = f"unknown ({type(e).__name__})"
            return out

        return dict(zip(self.nodes(), self._each(one), strict=True))

    def dump_state(self, node: str, include_log: bool = True) -> dict[str, Any] | None:
        return None  # a system we did not build has no state dump: the replica checks are skipped

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
        from kafkaesque_harness.clusters.reference import create_topic_or_fail

        create_topic_or_fail(self.bootstrap(), topic, partitions, replication_factor, min_isr)

    def collect(self, dest_dir: str) -> None:
        """The log files the cluster file names into dest_dir/<node>/ (what is not there is skipped), and
        beside dest_dir a replicas.json saying the cluster gives no state dumps (clusters/replica_dumps.py)."""
        for node in self.nodes():
            out = Path(dest_dir) / node
            out.mkdir(parents=True, exist_ok=True)
            for path in self.log_paths(node):
                try:
                    (out / Path(path).name).write_bytes(self.remote(node).get(path))
                except Exception:  # noqa: BLE001 - a file that is not there (yet) is simply absent
                    pass
        write_replicas(Path(dest_dir).parent, no_dumps())


# --- what a run keeps of its cluster file -----------------------------------------------------------------
def external_state_dir() -> Path:
    """Where a running external cluster leaves its marker (cluster file, owner) until its `down`."""
    return state_dir() / "external-clusters"


def find_external() -> list[Leftover]:
    """The external clusters whose harness has not reached `down` (their markers), as leftovers of their
    runs: removing one resumes what the run paused and removes its rules, on the nodes still marked its."""
    return [Leftover(marker.stem, f"external cluster of run {marker.stem} (paused processes and rules on its nodes)",
                     lambda marker=marker: heal_marked(marker, "external", _marked_cluster, ClusterError), rank=8)
            for marker in sorted(external_state_dir().glob("*.json"))]


def _marked_cluster(info: dict[str, Any]) -> ExternalCluster:
    """The cluster of a leftover marker, made again from its cluster file."""
    return ExternalCluster.from_file(info["cluster_file"], None, info.get("run_dir", "."), info["owner"])


def cleanup_external(owner: str = "") -> list[str]:
    """Heal the nodes of one run's external cluster (`owner`), or, without an owner, of every external
    cluster whose harness is gone; returns "external:<node>" for each node healed."""
    return heal_runs(find_external(), owner)


def cluster_from_file(path: str, spec: ClusterSpec, run_dir: str):
    """The cluster a file describes: ExternalCluster, or the reference broker over SSH (clusters/ssh.py)."""
    if cluster_file_kind(path) == KIND_EXTERNAL:
        return ExternalCluster.from_file(path, spec, run_dir)
    from kafkaesque_harness.clusters.ssh import SshCluster

    return SshCluster.from_file(path, spec, run_dir)
