"""A Spark standalone cluster on this machine: a master and workers from pyspark's own distribution, on
loopback, for the pipeline's scale-out path (`kafkaesque pipeline standalone up|down`, README).

`up` starts the master and the workers, each in a session of its own, waits until every worker has
registered, and writes <dir>/standalone.json: the spark:// URL and each process's pid with its start
time. `down` stops the processes that file names and only those, and only while each pid still is the
process `up` started (same start time, a Spark daemon's command line): a pid reused by anything else is
left alone. Logs go to <dir>/<name>.log; the workers' scratch space to <dir>/work-<i>.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kafkaesque_harness.clusters.ownership import process_start_time
from kafkaesque_harness.clusters.ports import free_ports
from kafkaesque_harness.results.pipeline import PipelineError
from kafkaesque_harness.results.pipeline.session import find_java

STATE_FILE = "standalone.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
REGISTER_TIMEOUT_S = 90.0


@dataclass
class Standalone:
    url: str
    dir: str
    # name -> {"pid": ..., "start": clock ticks after boot}
    processes: dict[str, dict[str, int]] = field(default_factory=dict)


def start(directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
          timeout_s: float = REGISTER_TIMEOUT_S) -> Standalone:
    """Start a master and `workers` workers of `cores` cores and `memory` each; return once all registered.
    On failure everything started is stopped and PipelineError says why."""
    import pyspark

    if workers < 1 or cores < 1:
        raise PipelineError(f"--workers and --cores must be at least 1 (got {workers} and {cores}).")
    directory = directory.resolve()
    if (directory / STATE_FILE).exists() and _alive(_read(directory)):
        raise PipelineError(f"a standalone cluster started here is still running ({_read(directory).url}); "
                            f"stop it first: kafkaesque pipeline standalone down --dir {directory}")
    directory.mkdir(parents=True, exist_ok=True)
    find_java()  # spark-class needs JAVA_HOME
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
           "SPARK_WORKER_DIR": str(directory / "work"), "SPARK_LOG_DIR": str(directory / "logs")}
    port, master_ui, *worker_ui = free_ports(2 + workers)
    cluster = Standalone(url=f"spark://127.0.0.1:{port}", dir=str(directory))
    procs: list[subprocess.Popen] = []

    def spawn(name: str, *args: str) -> None:
        with open(directory / f"{name}.log", "wb") as log:
            p = subprocess.Popen([str(spark_class), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        procs.append(p)
        cluster.processes[name] = {"pid": p.pid, "start": process_start_time(p.pid) or 0}
        _write(directory, cluster)  # at once: a crash from here on still leaves what to stop

    try:
        spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui))
        for i in range(1, workers + 1):
            spawn(f"worker-{i}", WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                  "--webui-port", str(worker_ui[i - 1]), "--work-dir", str(directory / f"work-{i}"), cluster.url)
        master_log = directory / "master.log"
        deadline = time.monotonic() + timeout_s
        while master_log.read_text(errors="replace").count("Registering worker") < workers:
            dead = [name for name, p in zip(cluster.processes, procs, strict=True) if p.poll() is not None]
            if dead:
                raise PipelineError(f"the Spark {dead[0]} exited at start-up; its log: {directory / (dead[0] + '.log')}")
            if time.monotonic() > deadline:
                raise PipelineError(f"the Spark workers did not register with the master within {timeout_s:.0f} s; "
                                    f"see {master_log}")
            time.sleep(0.5)
    except BaseException:
        stop(directory)
        raise
    return cluster


def stop(directory: Path, wait_s: float = 20.0) -> list[str]:
    """Stop the processes <dir>/standalone.json names that are still the ones `start` started; the names of
    those stopped. The file is removed once none is left."""
    directory = directory.resolve()
    if not (directory / STATE_FILE).exists():
        return []
    cluster = _read(directory)
    ours = {name: p["pid"] for name, p in cluster.processes.items() if _is_ours(p)}
    for pid in ours.values():
        try:
            os.killpg(pid, signal.SIGTERM)  # its own session: the JVM spark-class execs and nothing else
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_is_ours(cluster.processes[n]) for n in ours):
        _reap(ours.values())
        time.sleep(0.2)
    for name in ours:
        if _is_ours(cluster.processes[name]):
            try:
                os.killpg(cluster.processes[name]["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    _reap(ours.values())
    (directory / STATE_FILE).unlink(missing_ok=True)
    return sorted(ours)


def _is_ours(p: dict[str, int]) -> bool:
    """Whether the pid still is the Spark daemon `start` started (a reused pid is someone else's)."""
    if process_start_time(p["pid"]) != p["start"]:
        return False
    try:
        cmdline = Path(f"/proc/{p['pid']}/cmdline").read_bytes()
    except OSError:
        return False
    return b"org.apache.spark.deploy." in cmdline


def _alive(cluster: Standalone) -> bool:
    return any(_is_ours(p) for p in cluster.processes.values())


def _reap(pids) -> None:
    for pid in pids:  # our children when this process started them; otherwise nothing to reap
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _write(directory: Path, cluster: Standalone) -> None:
    tmp = directory / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(cluster), indent=2) + "\n")
    tmp.replace(directory / STATE_FILE)


def _read(directory: Path) -> Standalone:
    try:
        doc = json.loads((directory / STATE_FILE).read_text())
        return Standalone(url=doc["url"], dir=doc["dir"], processes=doc["processes"])
    except (OSError, ValueError, KeyError) as e:
        raise PipelineError(f"{directory / STATE_FILE} cannot be read ({e}); remove it if no Spark daemon "
                            "started here is running.") from None
