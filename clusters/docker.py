"""The Docker cluster backend: one container per node on a network of its own (issue 6).

Every node is a container of the node image (clusters/image.py) with its own hostname,
address, clock view, disk and firewall: a partition is an iptables rule in one container,
a lossy crash drops one container's unsynced bytes, clock skew shows in one container
only. The broker runs inside as a daemon (pid file, under the container's init), so kill
-9 and SIGSTOP hit the broker process, not the container.

Containers get NET_ADMIN (iptables, tc) and, for the lossy file system, /dev/fuse with
SYS_ADMIN (a FUSE mount needs it); nothing broader. Containers and networks carry the
label `kafkaesque=<run id>` (what `attach` finds a cluster by) and `kafkaesque.run=<run id>`,
set only here at creation: `kafkaesque cleanup` finds what a run left by that one, never by
`kafkaesque=...`, which every container started from the node image inherits from it
(`kafkaesque=node`), so a user's own containers of the image are never removed. The run
registers while its cluster is up (clusters/ownership.py): cleanup skips it while it lives.
"""

from __future__ import annotations

import json
from typing import Any

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.broker import NAMESPACE
from kafkaesque_harness.clusters.ownership import Leftover, pick, register_run, release_run, remove_all
from kafkaesque_harness.clusters.reference import OWNER_ENV, ReferenceCluster
from kafkaesque_harness.clusters.remote import DockerRemote
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until

LABEL = "kafkaesque"
SPEC_LABEL = f"{LABEL}.spec"  # the cluster's spec as JSON, on every container
RUN_LABEL = f"{LABEL}.run"  # the run that created it: what cleanup goes by (the image has no such label)
PORT = 9092
NODE_ROOT = "/var/lib/kafkaesque"
CODE_DIR = "/opt/kafkaesque"  # where the node image holds the code (clusters/image.py's Dockerfile)
CLOCK_FILE = "/run/kafkaesque/clock-offset"
CLOCK_LIB = "/opt/kafkaesque/lib/libclockoffset.so"


def docker_client(fix: str = "start dockerd, or run with --cluster local"):
    """The Docker Engine client, or a ClusterError whose sentence ends with `fix`."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except Exception as e:  # noqa: BLE001 - any failure means: no engine here
        raise ClusterError(f"The Docker engine does not answer ({type(e).__name__}); {fix}.") from None


def docker_available() -> bool:
    try:
        docker_client()
        return True
    except ClusterError:
        return False


class DockerCluster(ReferenceCluster):
    name = "docker"
    python = "python3"
    proc_sys_denied = "/proc/sys is read-only in the containers"  # Docker mounts it so for every container

    def __init__(self, spec: ClusterSpec, run_dir: str, owner: str | None = None, lossy: bool = True):
        super().__init__(spec, run_dir, owner)
        self.lossy = lossy
        self.client = None
        self.network = None
        self.containers: dict[str, Any] = {}
        self.ips: dict[str, str] = {}
        self.gateway = ""  # the network's gateway: the address the harness's clients reach the containers from
        self.remotes: dict[str, DockerRemote] = {}
        self.image = ""

    # --- where nodes live ------------------------------------------------------------------------
    def remote(self, node: str) -> DockerRemote:
        return self.remotes[node]

    def address(self, node: str) -> tuple[str, int]:
        return self.ips[node], PORT

    def listen(self, node: str) -> str:
        return f"0.0.0.0:{PORT}"

    def node_dir(self, node: str) -> str:
        return NODE_ROOT

    def data_dir(self, node: str) -> str:
        # With the lossy file system the broker writes through the FUSE mount (clusters/lossyfs.py).
        return f"{NODE_ROOT}/data"

    def node_env(self, node: str) -> dict[str, str]:
        return {**super().node_env(node), "LD_PRELOAD": CLOCK_LIB, "KAFKAESQUE_CLOCK_FILE": CLOCK_FILE}

    def clock_file(self, node: str) -> str:
        return CLOCK_FILE

    # --- abilities (clusters/base.py) ----------------------------------------------------------------
    def isolation_unavailable(self) -> str | None:
        return None  # own network stack, disk and clock view per node

    def clock_unavailable(self) -> str | None:
        return None  # the node image has the preload, and every node's processes start under it

    def client_address(self, node: str) -> str | None:
        """ClientCuts: every node sees the harness's clients come from its network's gateway."""
        return self.gateway or None

    def client_cut_unavailable(self) -> str | None:
        return None if self.gateway else "its network's gateway is not known (the cluster is not up)"

    def lossy_unavailable(self) -> str | None:
        return None if self.lossy else "this cluster was started without it"

    def lossy_status_file(self, node: str) -> str | None:
        return self.lossyfs_files(node)[1] if self.lossy_unavailable() is None else None

    def lossyfs_files(self, node: str) -> tuple[str, str]:
        """(pid file, status file) of the node's lossy file system daemon."""
        return "/run/kafkaesque/lossyfs.pid", "/run/kafkaesque/lossyfs.status"

    def container_name(self, node: str) -> str:
        return f"kq-{self.owner}-{node}"

    def _spec_label(self) -> str:
        # What `attach` needs to rebuild this object from a fresh process (kafkaesque cluster status).
        return json.dumps({"brokers": self.spec.brokers, "flush_policy": self.spec.flush_policy,
                           "node_code": self.spec.node_code,
                           "broker_variant": self.spec.broker_variant, "broker_config": self.spec.broker_config,
                           "lossy": self.lossy, "image": self.image})

    @classmethod
    def attach(cls, client, owner: str) -> DockerCluster | None:
        """The cluster whose containers or network carry `kafkaesque=<owner>`, as started by another
        process; None when there is none. Its broker processes need not run; a network left without
        containers (a half-finished `down`) counts too, so that `down` can remove it."""
        found = client.containers.list(all=True, filters={"label": f"{LABEL}={owner}"})
        network = next(iter(client.networks.list(filters={"label": f"{LABEL}={owner}"})), None)
        if not found and network is None:
            return None
        saved = json.loads(found[0].labels.get(SPEC_LABEL) or "{}") if found else {}
        spec = ClusterSpec(brokers=int(saved.get("brokers", max(len(found) - 1, 0))),
                           flush_policy=saved.get("flush_policy", "never"),
                           broker_variant=saved.get("broker_variant", "default"),
                           broker_config=saved.get("broker_config", {}),
                           node_code=saved.get("node_code", ""))
        c = cls(spec, owner, owner=owner, lossy=bool(saved.get("lossy", True)))
        c.client, c.image = client, saved.get("image", "")
        c.network = network
        for container in found:
            node = container.labels.get(f"{LABEL}.node", container.name)
            c.containers[node] = container
            c.remotes[node] = DockerRemote(container, node)
            networks = container.attrs["NetworkSettings"]["Networks"]
            c.ips[node] = next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), "")
            c.gateway = c.gateway or next((n["Gateway"] for n in networks.values() if n.get("Gateway")), "")
        c.adopt_secret()  # the running cluster's, for its state dumps (clusters/reference.py)
        return c

    def container_status(self, node: str) -> str:
        """Docker's word for the container: running, paused, exited, ... ("missing" when gone)."""
        c = self.containers.get(node)
        if c is None:
            return "missing"
        try:
            c.reload()
        except Exception:  # noqa: BLE001 - removed behind our back
            return "missing"
        return c.status

    # --- lifecycle -----------------------------------------------------------------------------------
    def up(self) -> str:
        from kafkaesque_harness.clusters.image import ImageError, ensure_image

        self.client = docker_client()
        try:
            self.image = ensure_image(log=lambda m: None)
        except ImageError as e:
            raise ClusterError(str(e)) from None
        register_run(self.owner, self.name, str(self.run_dir))  # live to `kafkaesque cleanup` until down()
        try:
            self.network = self.client.networks.create(f"kafkaesque-{self.owner}", driver="bridge",
                                                       labels={LABEL: self.owner, RUN_LABEL: self.owner})
            for node in self.nodes():
                self._create_container(node)
            for node in self.nodes():
                c = self.containers[node]
                c.reload()
                self.ips[node] = c.attrs["NetworkSettings"]["Networks"][self.network.name]["IPAddress"]
                self.gateway = self.gateway or c.attrs["NetworkSettings"]["Networks"][self.network.name].get("Gateway", "")
                self.remotes[node] = DockerRemote(c, node)
                self._prepare_node(node)
            return self._start_every_node(timeout_s=90)
        except BaseException:
            self.down()
            raise

    def _create_container(self, node: str) -> None:
        kwargs: dict[str, Any] = {
            "name": self.container_name(node), "hostname": node, "network": self.network.name,
            "detach": True, "init": True,
            "labels": {LABEL: self.owner, RUN_LABEL: self.owner, f"{LABEL}.node": node,
                       SPEC_LABEL: self._spec_label()},
            "cap_add": ["NET_ADMIN"], "command": ["sleep", "infinity"],
            "environment": {OWNER_ENV: self.owner},
        }
        if self.spec.node_code:
            # A copy of the node code (a mutant's, clusters/code_copy.py) over the image's, read-only: the
            # image stays the one built from this tree, and no image or tag is made per copy.
            kwargs["volumes"] = {f"{self.spec.node_code}/{NAMESPACE}/clusters":
                                 {"bind": f"{CODE_DIR}/{NAMESPACE}/clusters", "mode": "ro"}}
        if self.lossy and node != "controller-0":
            kwargs["cap_add"] = ["NET_ADMIN", "SYS_ADMIN"]
            kwargs["devices"] = ["/dev/fuse:/dev/fuse:rwm"]
            kwargs["security_opt"] = ["apparmor:unconfined"]
        self.containers[node] = self.client.containers.run(self.image, **kwargs)

    def _prepare_node(self, node: str) -> None:
        r = self.remotes[node]
        r.run(["mkdir", "-p", f"{NODE_ROOT}/data", f"{NODE_ROOT}/backing", "/run/kafkaesque"], check=True)
        r.put(CLOCK_FILE, b"0\n")
        if self.lossy and node != "controller-0":
            # The broker's data dir is a FUSE mount that keeps unsynced bytes in memory.
            r.start_daemon(["python3", "-m", "kafkaesque_harness.clusters.lossyfs", f"{NODE_ROOT}/backing", f"{NODE_ROOT}/data",
                            "--status-file", "/run/kafkaesque/lossyfs.status"],
                           "/run/kafkaesque/lossyfs.pid", "/run/kafkaesque/lossyfs.log",
                           env={"PYTHONPATH": "/opt/kafkaesque"})
            try:
                wait_until(lambda: r.run(["grep", "-q", "mounted", "/run/kafkaesque/lossyfs.status"]).ok, 15, 0.1,
                           f"the lossy file system's mount in {node}")
            except WaitTimeout:
                raise ClusterError(f"The lossy file system did not mount in {node}; see /run/kafkaesque/lossyfs.log "
                                   "there (does the host allow FUSE in containers?).") from None

    def down(self) -> None:
        for c in self.containers.values():
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.containers.clear()
        if self.network is not None:
            try:
                self.network.remove()
            except Exception:  # noqa: BLE001
                pass
            self.network = None
        release_run(self.owner)  # also from `kafkaesque cluster down`, another process than the one that made it


def find_docker() -> list[Leftover]:
    """Every container and network a run created on this engine (label `kafkaesque.run`), as leftovers
    of that run; nothing when no engine answers."""
    try:
        client = docker_client()
    except ClusterError:
        return []
    found = []
    for c in client.containers.list(all=True, filters={"label": RUN_LABEL}):
        owner = c.labels.get(RUN_LABEL, "")
        found.append(Leftover(owner, f"container {c.name}", lambda c=c: c.remove(force=True), rank=5))
    for n in client.networks.list(filters={"label": RUN_LABEL}):
        owner = (n.attrs.get("Labels") or {}).get(RUN_LABEL, "")
        found.append(Leftover(owner, f"network {n.name}", n.remove, rank=6))
    return found


def cleanup_docker(owner: str = "") -> list[str]:
    """Remove one run's containers and network (`owner`: a test cleaning up after itself), or, without an
    owner, those of every run whose harness is gone; never a container the harness did not create."""
    return remove_all(pick(find_docker(), owner))
