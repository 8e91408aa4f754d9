"""`python -m kafkaesque_harness.clusters.broker cluster`: a controller and N brokers as processes on this machine.

For people trying the broker by hand and for the harness's local backend: prints exactly
one line `bootstrap=HOST:PORT,...` once every broker is registered and unfenced, and on
SIGTERM or SIGINT shuts everything down cleanly (brokers first, by controlled shutdown,
then the controller). `--controllers 3` runs a Raft controller quorum instead of the single
controller (controller_quorum.py): controller j (0-based) has id 1000+j and port P-j.

The cluster's secret (rpc.py): processes started on this machine with `broker_argv` and
`controller_argv` share the starting process's, the environment variable rpc.SECRET_ENV (made
on first use, inherited by the children); the `cluster` command also writes it to
<data-dir>/cluster.secret (mode 0600) for `admin dump --secret-file ...` and the like.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.admin import dump_state

CONTROLLER_ID = 1000


def broker_argv(node_id: int, host: str, port: int, controller: str, data_dir: str, flush_policy: str,
                variants: list[str], extra: list[str] | None = None) -> list[str]:
    """A broker's command line; the child started with it inherits this process's cluster secret."""
    rpc.process_secret()
    argv = [sys.executable, "-m", "kafkaesque_harness.clusters.broker", "broker", "--node-id", str(node_id),
            "--listen", f"{host}:{port}", "--controller", controller, "--data-dir", data_dir,
            "--log-file", os.path.join(data_dir, "broker.log"), "--flush-policy", flush_policy]
    for v in variants:
        argv += ["--variant", v]
    return argv + (extra or [])


def controller_argv(host: str, port: int, data_dir: str, extra: list[str] | None = None,
                    node_id: int = CONTROLLER_ID) -> list[str]:
    """A controller's command line; the child started with it inherits this process's cluster secret."""
    rpc.process_secret()
    return [sys.executable, "-m", "kafkaesque_harness.clusters.broker", "controller", "--node-id", str(node_id),
            "--listen", f"{host}:{port}", "--data-dir", data_dir,
            "--log-file", os.path.join(data_dir, "controller.log")] + (extra or [])


def quorum_spec(host: str, ports: list[int]) -> str:
    """The --quorum value for controllers 1000, 1001, ... on `ports`."""
    return ",".join(f"{CONTROLLER_ID + j}@{host}:{p}" for j, p in enumerate(ports))


def active_controller_state(host: str, ports: list[int]) -> dict[str, Any] | None:
    """The state dump of the active controller among `ports` (the single one: always active), or None."""
    for port in ports:
        try:
            state = dump_state(host, port, include_log=False, timeout=1.0)
        except rpc.RpcError:
            continue
        if state.get("active", True):
            return state
    return None


def wait_until_unfenced(host: str, port: int | list[int], broker_ids: list[int], timeout_s: float) -> bool:
    ports = port if isinstance(port, list) else [port]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = active_controller_state(host, ports)
        if state is not None:
            live = {b["broker_id"] for b in state["brokers"] if not b["fenced"]}
            if set(broker_ids) <= live:
                return True
        time.sleep(0.1)
    return False


def run_local_cluster(args: Any) -> int:
    host, base = args.host, args.base_port
    os.makedirs(args.data_dir, exist_ok=True)
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        secret_file = os.path.join(args.data_dir, "cluster.secret")
        rpc.write_secret_file(secret_file, rpc.process_secret())
        cflags = ["--unclean-recovery-strategy", args.unclean_recovery_strategy, "--secret-file", secret_file]
        for v in args.variant:
            cflags += ["--variant", v]
        controllers = getattr(args, "controllers", 1)
        if controllers == 1:
            cports = [base]
            cdir = os.path.join(args.data_dir, "controller")
            os.makedirs(cdir, exist_ok=True)
            procs.append(subprocess.Popen(controller_argv(host, base, cdir, cflags)))
        else:
            cports = [base - j for j in range(controllers)]
            quorum = ["--quorum", quorum_spec(host, cports)]
            for j, port in enumerate(cports):
                cdir = os.path.join(args.data_dir, f"controller-{j}")
                os.makedirs(cdir, exist_ok=True)
                procs.append(subprocess.Popen(controller_argv(host, port, cdir, cflags + quorum, CONTROLLER_ID + j)))
        controller_list = ",".join(f"{host}:{p}" for p in cports)
        ids = list(range(1, args.brokers + 1))
        for i in ids:
            bdir = os.path.join(args.data_dir, f"broker-{i}")
            os.makedirs(bdir, exist_ok=True)
            procs.append(subprocess.Popen(broker_argv(i, host, base + i, controller_list, bdir,
                                                      args.flush_policy, args.variant,
                                                      ["--secret-file", secret_file])))
        if not wait_until_unfenced(host, cports, ids, 60):
            print("error: the brokers did not register and unfence within 60 s; see the logs under "
                  f"{args.data_dir}.", file=sys.stderr)
            return 1
        print("bootstrap=" + ",".join(f"{host}:{base + i}" for i in ids), flush=True)
        while not stop.is_set():
            if any(p.poll() is not None for p in procs):
                print("error: a node exited unexpectedly; see the logs under " f"{args.data_dir}.", file=sys.stderr)
                return 1
            stop.wait(0.5)
        return 0
    finally:
        n = getattr(args, "controllers", 1)
        for p in reversed(procs[n:]):  # brokers first: controlled shutdown needs the controller
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs[n:]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        for p in procs[:n]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs[:n]:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
