"""`kafkaesque doctor`: what this machine offers the harness, and the fix for each missing part.

Each check asks the machine itself, touching nothing the harness did not create: the Docker
engine answers a ping; the node image for this code exists; root; network namespaces (one is
made and removed under a name of our own); iptables and tc on PATH; netem (tried on the
loopback of that namespace, never on the host's devices); FUSE (/dev/fuse and fusermount3)
and the lossy extra; Java 17+ for the Spark pipeline and the spark extra; free ports on
loopback. The default cluster (`--cluster auto`) can run when the Docker engine answers
(containers; the image is built on the first run) or, failing that, always on local processes:
`doctor` exits 0 then, 3 only when not even local processes can listen on loopback.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.docker import docker_client
from kafkaesque_harness.clusters.image import plan
from kafkaesque_harness.history.extras import extra_missing, install_hint
from kafkaesque_harness.results.pipeline import PipelineError
from kafkaesque_harness.results.pipeline.session import find_java


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""        # what to do when not ok
    needed_for: str = ""  # what cannot run without it


def _run(cmd: list[str], timeout: float = 10) -> tuple[bool, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{type(e).__name__}: {e}"
    out = (r.stderr or r.stdout).strip().splitlines()
    return r.returncode == 0, out[-1] if out else ""


def _docker() -> list[Finding]:
    try:
        client = docker_client()
    except ClusterError as e:
        return [Finding("docker engine", False, str(e), "start dockerd (or set DOCKER_HOST)",
                        "--cluster docker, the default when it answers")]
    version = client.version().get("Version", "?")
    out = [Finding("docker engine", True, f"answers (Docker {version})")]
    try:
        tag = plan().node_tag
        try:
            client.images.get(tag)
            out.append(Finding("node image", True, tag))
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound; any failure: not there
            out.append(Finding("node image", False, f"{tag} is not built for this code",
                               "make image (or let the first --cluster docker run build it, a few minutes)",
                               "--cluster docker (built on demand)"))
    except Exception as e:  # noqa: BLE001 - no apt sources on this host, say
        out.append(Finding("node image", False, f"cannot tell which tag this code needs ({e})",
                           "run on a Debian-based host with apt sources (the image is built from them)",
                           "--cluster docker"))
    return out


def _netns() -> list[Finding]:
    root = os.geteuid() == 0
    out = [Finding("root", root, "running as root" if root else f"uid {os.geteuid()}",
                   "run as root (sudo)", "network namespaces, iptables, tc, FUSE mounts: --cluster local's faults")]
    if not root or not shutil.which("ip"):
        out.append(Finding("network namespaces", False, "needs root and iproute2",
                           "run as root and apt-get install iproute2",
                           "--cluster local with a namespace per node (partition, net, lossy-crash)"))
        return out
    name = f"kqdoctor{secrets.token_hex(3)}"  # ours, removed below
    ok, detail = _run(["ip", "netns", "add", name])
    try:
        out.append(Finding("network namespaces", ok, "a namespace was made and removed" if ok else detail,
                           "load the kernel's namespace support; check `ip netns add` as root",
                           "--cluster local with a namespace per node"))
        if ok and shutil.which("tc"):
            _run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])
            netem, why = _run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                               "delay", "1ms"])
            out.append(Finding("netem", netem, "tc netem works" if netem else f"tc netem fails: {why}",
                               "load the sch_netem kernel module (modprobe sch_netem)",
                               "the net fault's delay, duplicate and reorder; its tbf bandwidth and loss still run"))
    finally:
        if ok:
            _run(["ip", "netns", "delete", name])
    return out


def _tools() -> list[Finding]:
    out = []
    for tool, package, needed in (("iptables", "iptables", "partitions (partition, scenarios, protocol moves)"),
                                  ("tc", "iproute2", "the net fault (bandwidth, loss)")):
        path = shutil.which(tool)
        out.append(Finding(tool, path is not None, path or "not on PATH", f"apt-get install {package}", needed))
    fuse = os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None
    out.append(Finding("fuse", fuse, "/dev/fuse and fusermount3" if fuse else
                       "no /dev/fuse" if not os.path.exists("/dev/fuse") else "no fusermount3 on PATH",
                       "apt-get install fuse3 (and give containers /dev/fuse)", "lossy-crash on --cluster local"))
    missing = extra_missing("lossy", "the lossy file system")
    out.append(Finding("lossy extra", missing is None, missing or "pyfuse3 and trio installed", install_hint("lossy"),
                       "lossy-crash on --cluster local (the docker nodes bring their own)"))
    return out


def _spark() -> list[Finding]:
    out = []
    try:
        java, major = find_java()
        out.append(Finding("java 17+", True, f"{java} (Java {major})"))
    except PipelineError as e:
        out.append(Finding("java 17+", False, str(e), "apt-get install openjdk-17-jre-headless",
                           "kafkaesque pipeline (Spark)"))
    missing = extra_missing("spark", "the Spark pipeline")
    out.append(Finding("spark extra", missing is None, missing or "pyspark and pyarrow installed",
                       install_hint("spark"), "kafkaesque pipeline"))
    return out


def _ports() -> Finding:
    socks: list[socket.socket] = []
    try:
        for _ in range(8):  # a broker, a controller, their peers: a few at once
            socks.append(socket.socket())
            socks[-1].bind(("127.0.0.1", 0))
        return Finding("free ports", True, "8 ports on 127.0.0.1 bound and released")
    except OSError as e:
        return Finding("free ports", False, f"cannot bind on 127.0.0.1: {e}", "free some ports or raise the limit "
                       "of open files (ulimit -n)", "every local cluster")
    finally:
        for s in socks:
            s.close()


def diagnose() -> dict[str, Any]:
    """Every finding, and whether the default cluster can run here (and on what)."""
    findings = [*_docker(), *_netns(), *_tools(), *_spark(), _ports()]
    ok = {f.name: f.ok for f in findings}
    if ok["docker engine"]:
        default = "docker"
    elif ok["free ports"]:
        default = "local" + (" (a namespace per node)" if ok.get("network namespaces") else " (processes only)")
    else:
        default = ""
    return {"default_cluster": default, "can_run": bool(default), "findings": [asdict(f) for f in findings]}
