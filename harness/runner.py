"""The run lifecycle (DESIGN.md "Run lifecycle"): prepare, topics, main phase, heal, recover, final reads,
collect, teardown, check, store.

Teardown is always in a `finally`; Ctrl-C (KeyboardInterrupt) stops the main phase, heals,
tears down, and writes results with valid "unknown"; the history is written as it
happens, so nothing is lost on any exit. Exit status: 0 valid, 1 invalid, 2 unknown,
3 the harness itself failed.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.core import UNKNOWN, run_checkers
from clusters.base import ClusterError, ClusterSpec
from harness.generator import ClientSchedule, NemesisSchedule, ProcessTable, final_assignments
from harness.history import INFO, INVOKE, NEMESIS, OK, HistoryWriter, Op, read_history
from harness.spec import TestSpec
from nemesis.base import NemesisRefused
from results.store import create_run_dir, write_json

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_HARNESS = 0, 1, 2, 3
CLUSTER_NAMES = ("auto", "docker", "local", "FILE.toml", "ssh:FILE.toml")
SSH_PREFIX = "ssh:"


def cluster_problem(name: str) -> str | None:
    """Why `name` is not a --cluster value (one sentence without the full stop), or None."""
    if name in CLUSTER_NAMES[:3]:
        return None
    from clusters.external import cluster_file_brokers, is_cluster_file

    if is_cluster_file(name):  # a cluster file of either kind (clusters/external.py)
        try:
            cluster_file_brokers(name)
        except ClusterError as e:
            return str(e).rstrip(".")
        return None
    if name.startswith(SSH_PREFIX):
        from clusters.ssh import NodeFileError, load_node_file

        try:
            load_node_file(name[len(SSH_PREFIX):])
        except NodeFileError as e:
            return str(e).rstrip(".")
        return None
    return f"unknown cluster {name!r}; valid: {', '.join(CLUSTER_NAMES)}"


FINAL_READ_CONNECT_S = 60.0  # how long the final reads keep trying to reach a healed cluster
FINAL_READ_RETRY_S = 60.0  # how long one final read that timed out is tried again


class HarnessError(RuntimeError):
    """A failure of the harness or its set-up; the message is one sentence naming the fix."""


class FinalReadsImpossible(RuntimeError):
    """The healed cluster never answered a client: the run's verdict is unknown, its history kept."""


def exit_code(valid: Any) -> int:
    return EXIT_VALID if valid is True else EXIT_INVALID if valid is False else EXIT_UNKNOWN


def make_cluster(spec: TestSpec, run_dir: Path):
    cspec = ClusterSpec(brokers=spec.brokers, controllers=spec.controllers, flush_policy=spec.flush_policy,
                        broker_variant=spec.broker_variant,
                        broker_config={"unclean_recovery_strategy": spec.unclean_recovery_strategy})
    if spec.cluster == "docker":
        from clusters.docker import DockerCluster

        return DockerCluster(cspec, str(run_dir))
    if spec.cluster == "local":
        from clusters.local import LocalCluster
        from clusters.netns import NetnsCluster, netns_available

        # As root, a network namespace per node, so partitions, tc and lossy crashes work here too.
        return (NetnsCluster if netns_available() else LocalCluster)(cspec, str(run_dir))
    from clusters.external import cluster_from_file, is_cluster_file

    if is_cluster_file(spec.cluster):
        try:
            return cluster_from_file(spec.cluster, cspec, str(run_dir))
        except ClusterError as e:
            raise HarnessError(str(e)) from None
    if spec.cluster.startswith(SSH_PREFIX):
        from clusters.ssh import NodeFileError, SshCluster

        try:
            return SshCluster.from_file(spec.cluster[len(SSH_PREFIX):], cspec, str(run_dir))
        except NodeFileError as e:
            raise HarnessError(str(e)) from None
    raise HarnessError(f"unknown cluster {spec.cluster!r}; valid: {', '.join(CLUSTER_NAMES)}")


@dataclass
class LiveStats:
    """What the live panel shows; updated by workers and the nemesis thread."""

    start: float = field(default_factory=time.monotonic)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "fail": 0, "info": 0})
    recent: list[float] = field(default_factory=list)
    fault: str = "none"
    leaders: str = "?"
    phase: str = "starting"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def completed(self, type_: str) -> None:
        now = time.monotonic()
        with self.lock:
            self.counts[type_] = self.counts.get(type_, 0) + 1
            self.recent.append(now)
            if len(self.recent) > 20000:
                del self.recent[:10000]

    def rate(self, window: float = 5.0) -> float:
        now = time.monotonic()
        with self.lock:
            n = sum(1 for t in self.recent[-20000:] if t >= now - window)
        return n / window


NEMESIS_STEP_GRACE_S = 90.0  # the longest single fault step (a broker start waits for its registration)


class Run:
    def __init__(self, spec: TestSpec, log=print):
        self.spec = spec
        self.log = log
        self.stop = threading.Event()
        self.stats = LiveStats()
        self.errors: list[str] = []

    # --- the main phase ---------------------------------------------------------------------------
    def _worker(self, worker: int, workload, test: dict, bootstrap: str, schedule: ClientSchedule,
                processes: ProcessTable, writer: HistoryWriter) -> None:
        client = None
        try:
            while not self.stop.is_set():
                process = processes.process_of(worker)
                now = writer.now() / 1e9
                inv = schedule.next(process, now)
                if inv is None:
                    return
                if inv.at > now and self.stop.wait(inv.at - now):
                    return
                if client is None:
                    client = workload.new_client(test)
                    try:
                        client.open(bootstrap)
                    except Exception as e:  # noqa: BLE001 - a client that cannot open is retried later
                        self.errors.append(f"worker {worker}: client open failed: {e}")
                        client = None
                        self.stop.wait(0.5)
                        continue
                op = writer.append(Op(INVOKE, inv.f, process, inv.value))
                comp = self._invoke(client, op)
                writer.append(comp)
                self.stats.completed(comp.type)
                if comp.type == INFO:
                    # Jepsen's info rule: this process may have an op in flight forever.
                    processes.retire(worker)
                    _close_quietly(client)
                    client = None
        finally:
            if client is not None:
                _close_quietly(client)

    @staticmethod
    def _invoke(client, op: Op) -> Op:
        try:
            comp = client.invoke(op)
        except Exception as e:  # noqa: BLE001 - a client bug must not lose the op: it is indeterminate
            comp = Op(INFO, op.f, op.process, None, error=f"{type(e).__name__}: {e}"[:300])
        comp.process, comp.f = op.process, op.f
        return comp

    def _nemesis_loop(self, nemesis, cluster, writer: HistoryWriter, schedule: NemesisSchedule) -> None:
        drivers = nemesis.drivers() if hasattr(nemesis, "drivers") else []
        if drivers:
            # A scenario or the protocol nemesis times its own steps against the cluster's state; it
            # stops at the time limit, with the clients, so no fault lands on an idle cluster.
            time_limit_ns = self.spec.time_limit * 1e9

            def stopped() -> bool:
                return self.stop.is_set() or writer.now() >= time_limit_ns

            for d in drivers:
                d.drive(cluster, lambda f, value, thunk: self._record_nemesis_op(writer, f, value, thunk), stopped)
            return
        for ev in schedule.events():
            delay = ev.at - writer.now() / 1e9
            if delay > 0 and self.stop.wait(delay):
                return
            if self.stop.is_set():
                return
            inv = writer.append(Op(INVOKE, ev.f, NEMESIS, None))
            try:
                comp = nemesis.invoke(cluster, inv)
            except Exception as e:  # noqa: BLE001 - recorded, and healed at the end regardless
                comp = Op(INFO, ev.f, NEMESIS, None, error=f"{type(e).__name__}: {e}"[:300])
            comp.process = NEMESIS
            writer.append(comp)
            self.stats.fault = "none" if ev.f.startswith("stop-") else f"{ev.f[6:]} {json.dumps(comp.value)}"

    def _record_nemesis_op(self, writer: HistoryWriter, f: str, value: Any, thunk) -> Any:
        """One scenario step as an invoke/info pair; its exception is recorded, then raised on."""
        writer.append(Op(INVOKE, f, NEMESIS, value))
        self.stats.fault = f"{f[len('scenario-'):]} {json.dumps(value)}"
        try:
            result = thunk()
        except Exception as e:
            writer.append(Op(INFO, f, NEMESIS, value, error=f"{type(e).__name__}: {e}"[:300]))
            raise
        writer.append(Op(INFO, f, NEMESIS, result))
        return result

    def _leader_poller(self, cluster, topic: str) -> None:
        while not self.stop.wait(2.0):
            try:
                parts = cluster.partitions(topic)
                self.stats.leaders = " ".join(f"p{p.partition}:{p.leader}" for p in parts) or "?"
            except Exception:  # noqa: BLE001 - the panel is best effort
                self.stats.leaders = "?"

    # --- the whole run -------------------------------------------------------------------------------
    def execute(self, panel: bool = False) -> tuple[int, Path]:
        spec = self.spec
        from nemesis.registry import make_nemesis
        from workloads.registry import make_workload

        workload = make_workload(spec.workload, spec.workload_opts())
        nemesis = make_nemesis(spec.nemesis, {"target": spec.nemesis_target, "seed": spec.seed,
                                              "topic": spec.workload_opts()["topic"], "min_isr": spec.min_isr,
                                              "scenario_delay": spec.nemesis_interval,
                                              "interval": spec.nemesis_interval})
        if spec.cluster == "auto":
            from clusters.docker import docker_available

            # DESIGN: containers are the default whenever a Docker engine answers.
            spec.cluster = "docker" if docker_available() else "local"
        run_dir = create_run_dir(spec.store, spec.name)
        test = spec.to_dict()
        test["run_dir"] = str(run_dir)
        write_json(run_dir / "test.json", test)
        writer = HistoryWriter(run_dir / "history.jsonl")
        cluster = make_cluster(spec, run_dir)
        self.log(f"run {run_dir} · cluster {cluster.name} · workload {spec.workload} · nemesis "
                 f"{','.join(spec.nemesis) or 'none'} · {spec.time_limit:.0f} s")
        outcome: dict[str, Any] = {}
        live = None
        try:
            try:
                self.stats.phase = "cluster up"
                bootstrap = cluster.up()
                # What each node allows, printed and kept in test.json; faults needing what a node
                # lacks are refused by nemesis.setup below, before the main phase.
                from clusters.capabilities import report_capabilities

                test["capabilities"] = report_capabilities(cluster, self.log)
                write_json(run_dir / "test.json", test)
                for topic, parts in workload.topics(test):
                    cluster.create_topic(topic, parts, spec.replication_factor, spec.min_isr)
                nemesis.setup(cluster)
                if panel:
                    from harness.panel import start_panel

                    live = start_panel(self.stats, spec)
                self._main_phase(workload, nemesis, cluster, test, bootstrap, writer)
            except KeyboardInterrupt:
                outcome["interrupted"] = "interrupted by the user (Ctrl-C)"
            except (ClusterError, NemesisRefused, HarnessError) as e:
                outcome["error"] = str(e)
            except Exception as e:  # noqa: BLE001 - a harness bug: kept in results, exit 3
                outcome["error"] = f"{type(e).__name__}: {e}"
                outcome["traceback"] = traceback.format_exc()
            finally:
                self.stop.set()
                self.stats.phase = "healing"
                heal_errors = nemesis.teardown(cluster)
                writer.append(Op(INVOKE, "heal", NEMESIS, None))
                writer.append(Op(INFO, "heal", NEMESIS, {"errors": heal_errors}))
                self.stats.fault = "none"
            if not outcome:
                try:
                    self._recover_and_read(workload, cluster, test, writer)
                except KeyboardInterrupt:
                    outcome["interrupted"] = "interrupted by the user (Ctrl-C) during the final reads"
                except FinalReadsImpossible as e:
                    # The cluster did not come back: a finding about the system, not a harness
                    # failure; without final reads the verdict can only be unknown.
                    outcome["final_reads"] = str(e)
        finally:
            if live is not None:
                live.stop()
            self.stats.phase = "collecting"
            try:
                cluster.collect(str(run_dir / "nodes"))
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"collecting node logs failed: {e}")
            if not spec.leave_running:
                cluster.down()
            writer.close()
        not_run = [x for part in getattr(nemesis, "parts", []) for x in getattr(part, "not_run", [])]
        if not_run:
            outcome_notes = {"faults_not_run": not_run}
        else:
            outcome_notes = {}
        return self._check_and_store(run_dir, test, workload, outcome, outcome_notes)

    def _main_phase(self, workload, nemesis, cluster, test: dict, bootstrap: str, writer: HistoryWriter) -> None:
        spec = self.spec
        self.stats.phase = "main"
        self.stats.start = time.monotonic()
        writer.start_ns = time.monotonic_ns()
        schedule = ClientSchedule(workload.op_mix(test), spec.rate, spec.time_limit, spec.seed)
        processes = ProcessTable(spec.concurrency)
        threads = [threading.Thread(target=self._worker, name=f"worker-{w}", daemon=True,
                                    args=(w, workload, test, bootstrap, schedule, processes, writer))
                   for w in range(spec.concurrency)]
        nem_sched = NemesisSchedule(nemesis.schedule(), spec.nemesis_interval, spec.time_limit, spec.seed,
                                    spec.nemesis_schedule)
        threads.append(threading.Thread(target=self._nemesis_loop, name="nemesis", daemon=True,
                                        args=(nemesis, cluster, writer, nem_sched)))
        threads.append(threading.Thread(target=self._leader_poller, name="leaders", daemon=True,
                                        args=(cluster, spec.workload_opts()["topic"])))
        for t in threads:
            t.start()
        self._processes = processes
        # Join with a timeout so Ctrl-C reaches this thread.
        deadline = time.monotonic() + spec.time_limit + 30
        for t in threads[:-1]:
            while t.is_alive() and time.monotonic() < deadline:
                t.join(0.2)
        self.stop.set()
        # The heal must not race a fault step still under way (a restart, a pause): let the nemesis
        # thread finish the step it is in; every step is bounded (waits and sleeps end on stop).
        nemesis_thread = threads[-2]
        deadline = time.monotonic() + NEMESIS_STEP_GRACE_S
        while nemesis_thread.is_alive() and time.monotonic() < deadline:
            nemesis_thread.join(0.2)
        if nemesis_thread.is_alive():
            self.errors.append(f"the nemesis was still inside a fault step {NEMESIS_STEP_GRACE_S:.0f} s after the "
                               "main phase; healing anyway")

    def _recover_and_read(self, workload, cluster, test: dict, writer: HistoryWriter) -> None:
        self.stats.phase = "recovering"
        if self.spec.recovery_wait > 0:
            time.sleep(self.spec.recovery_wait)
        try:
            cluster.wait_ready(cluster.broker_nodes(), timeout_s=60)
        except ClusterError as e:
            self.errors.append(f"not every broker recovered: {e}")
        self.stats.phase = "final reads"
        first = self._processes.max_process() + 1
        bootstrap = cluster.bootstrap()
        assignments = final_assignments(workload.final_ops(test), first)
        spare_process = first + len(assignments)
        for process, f, value in assignments:
            # A final read that times out (a partition still electing or catching up just after the heal)
            # is tried again on a fresh process until FINAL_READ_RETRY_S has passed: a read changes nothing,
            # and one missing final read makes the whole verdict unknown.
            deadline = time.monotonic() + FINAL_READ_RETRY_S
            while True:
                client = workload.new_client(test)
                try:
                    self._open_for_final_read(client, bootstrap)
                    op = writer.append(Op(INVOKE, f, process, value))
                    done = writer.append(self._invoke(client, op))
                finally:
                    _close_quietly(client)
                if done.type == OK or time.monotonic() >= deadline:
                    break
                process, spare_process = spare_process, spare_process + 1  # an info op ends its process
                time.sleep(1.0)

    def _open_for_final_read(self, client, bootstrap: str) -> None:
        """A client for the final reads, retried while the healed cluster may still be recovering."""
        timeout_s = FINAL_READ_CONNECT_S
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.open(bootstrap)
                return
            except Exception as e:  # noqa: BLE001 - any client error: the cluster is not answering yet
                if time.monotonic() >= deadline:
                    raise FinalReadsImpossible(
                        f"no final reads: the cluster did not answer a client within {timeout_s:.0f} s after the "
                        f"heal ({type(e).__name__}: {e}); see the node logs under nodes/") from None
                _close_quietly(client)
                time.sleep(1.0)

    def _check_and_store(self, run_dir: Path, test: dict, workload, outcome: dict[str, Any],
                         notes: dict[str, Any] | None = None) -> tuple[int, Path]:
        self.stats.phase = "checking"
        results = analyze_history(test, read_history(run_dir / "history.jsonl"), workload)
        if outcome:
            results["valid"] = UNKNOWN if results["valid"] is not False else False
            results.update({k: v for k, v in outcome.items() if k != "traceback"})
            if "traceback" in outcome:
                (run_dir / "harness-error.txt").write_text(outcome["traceback"])
        if self.errors:
            results["harness_warnings"] = self.errors[:50]
        results.update(notes or {})  # e.g. faults the kernel cannot do, refused by name
        write_json(run_dir / "results.json", results)
        try:
            from results.report import render_report

            render_report(run_dir)
        except Exception as e:  # noqa: BLE001 - a report failure never hides the verdict
            self.errors.append(f"report failed: {e}")
        code = EXIT_HARNESS if "error" in outcome else exit_code(results["valid"])
        return code, run_dir


def analyze_history(test: dict, history: list[Op], workload=None) -> dict[str, Any]:
    """Check a history with the workload's checkers: what run and `kafkaesque analyze` both call."""
    if workload is None:
        from workloads.registry import make_workload

        spec = TestSpec.from_dict(test)
        workload = make_workload(spec.workload, spec.workload_opts())
    from checkers.replicas import ReplicaStateChecker

    # Every workload's client-side checks, plus the broker-side invariants from the nodes' dumps.
    return run_checkers([*workload.checkers(test), ReplicaStateChecker()], test, history)


def _close_quietly(client) -> None:
    t = threading.Thread(target=_close, args=(client,), daemon=True)
    t.start()
    t.join(3.0)  # a client stuck on a paused broker must not hold up the run


def _close(client) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001
        pass


def run_test(spec: TestSpec, log=print, panel: bool = False) -> tuple[int, Path]:
    random.seed(spec.seed)
    return Run(spec, log).execute(panel=panel)
