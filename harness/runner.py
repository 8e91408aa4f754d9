"""The run lifecycle (DESIGN.md "Run lifecycle"): prepare, topics, main phase, heal, recover, final reads,
collect, teardown, check, store.

Teardown is always in a `finally`; Ctrl-C, SIGTERM and SIGHUP (what a CI timeout or a closed
terminal sends) stop the main phase, heal, tear down, and write results with valid "unknown"
and the reason; a second signal during the heal ends the harness at once, after writing what
it can. The history is written as it happens, so nothing is lost on any exit.

Every fault goes through one FaultLedger (nemesis/ledger.py): each nemesis completion carries
the records it changed, and the final heal op what the heal did. The verdict is decided by
checkers/evidence.py from the checkers, the fault records and the facts this module keeps
about the run itself (results.json "run": which threads died, whether it was interrupted);
what the cluster's own metadata and logs show it went through is results.json "reached".
Exit status: 0 valid, 1 invalid, 2 unknown, 3 the harness itself failed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import random
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaesque_harness.checkers.availability import availability
from kafkaesque_harness.checkers.core import UNKNOWN, run_checkers
from kafkaesque_harness.checkers.coverage import (
    SAME_HOST_CLUSTERS,
    MetadataObservations,
    log_events,
    reached_states,
    read_jsonl,
)
from kafkaesque_harness.checkers.evidence import FaultEvidenceChecker, decide
from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec, ProtocolTrace
from kafkaesque_harness.clusters.replica_dumps import load_replicas
from kafkaesque_harness.clusters.trace_files import NODE_FOLDERS, load_traces
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.harness.console import (
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
)
from kafkaesque_harness.harness.generator import (
    ClientSchedule,
    ProcessTable,
    final_assignments,
)
from kafkaesque_harness.harness.spec import CLUSTER_NAMES, SSH_PREFIX, TestSpec
from kafkaesque_harness.harness.watchdog import RunWatchdog, watchdog_note
from kafkaesque_harness.history import INFO, INVOKE, NEMESIS, OK, HistoryWriter, Op, read_history
from kafkaesque_harness.history.extras import DIST, dist_version
from kafkaesque_harness.nemesis.actions import FaultActions
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.nemesis.plan import PlanStep, drive
from kafkaesque_harness.nemesis.requirements import SpreadClients, StateDumps, can
from kafkaesque_harness.nemesis.schedule import NemesisSchedule
from kafkaesque_harness.results.store import STORE_FORMAT, create_run_dir, write_json
from kafkaesque_harness.workloads.base import PreflightCheck, StallableProducers

FINAL_READ_CONNECT_S = 60.0  # how long the final reads keep trying to reach a healed cluster
FINAL_READ_RETRY_S = 60.0  # how long one final read that timed out is tried again
FINAL_READ_CALL_S = 120.0  # past it, a final read's client call that has not returned is abandoned


class HarnessError(RuntimeError):
    """A failure of the harness or its set-up; the message is one sentence naming the fix."""


class FinalReadsImpossible(RuntimeError):
    """The healed cluster never answered a client: the run's verdict is unknown, its history kept."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C: heal, tear down, keep the history, write the results."""

    def __init__(self, how: str):
        super().__init__(how)
        self.how = how


INTERRUPT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def exit_code(valid: Any) -> int:
    return EXIT_VALID if valid is True else EXIT_INVALID if valid is False else EXIT_UNKNOWN


def make_cluster(spec: TestSpec, run_dir: Path):
    cspec = ClusterSpec(brokers=spec.brokers, **spec.broker.cluster_spec_fields())
    if spec.cluster == "docker":
        from kafkaesque_harness.clusters.docker import DockerCluster

        return DockerCluster(cspec, str(run_dir))
    if spec.cluster == "local":
        from kafkaesque_harness.clusters.local import LocalCluster
        from kafkaesque_harness.clusters.netns import NetnsCluster, netns_available

        # As root, a network namespace per node, so partitions, tc and lossy crashes work here too.
        return (NetnsCluster if netns_available() else LocalCluster)(cspec, str(run_dir))
    from kafkaesque_harness.clusters.cluster_file import is_cluster_file
    from kafkaesque_harness.clusters.external import cluster_from_file

    if is_cluster_file(spec.cluster):
        try:
            return cluster_from_file(spec.cluster, cspec, str(run_dir))
        except ClusterError as e:
            raise HarnessError(str(e)) from None
    if spec.cluster.startswith(SSH_PREFIX):
        from kafkaesque_harness.clusters.ssh import NodeFileError, SshCluster

        try:
            return SshCluster.from_file(spec.cluster[len(SSH_PREFIX):], cspec, str(run_dir))
        except NodeFileError as e:
            raise HarnessError(str(e)) from None
    raise HarnessError(f"unknown cluster {spec.cluster!r}; valid: {', '.join(CLUSTER_NAMES)}")


def worker_bootstraps(cluster, workers: int, bootstrap: str) -> list[str]:
    """The bootstrap each worker opens its clients with: the cluster's choice where it makes one
    (SpreadClients: brokers that each advertise themselves alone, so a client stays on the one it
    bootstraps to), else `bootstrap` for every worker."""
    if not can(cluster, SpreadClients):
        return [bootstrap] * workers
    return [cluster.worker_bootstrap(w) for w in range(workers)]


def _cluster_file_facts(spec: TestSpec, cluster, run_dir: Path) -> dict[str, Any]:
    """For a run on a cluster file: the file itself, kept in the run dir with secrets masked, and the versions
    its nodes report, so that `kafkaesque run --from RUN_DIR` can repeat the run (clusters/external.py)."""
    from kafkaesque_harness.clusters.cluster_file import is_cluster_file, keep_cluster_file
    from kafkaesque_harness.clusters.external import ExternalCluster

    path = spec.cluster.removeprefix(SSH_PREFIX)
    if not (is_cluster_file(path) or spec.cluster.startswith(SSH_PREFIX)):
        return {}
    facts: dict[str, Any] = {"cluster_file": keep_cluster_file(path, run_dir)}
    if isinstance(cluster, ExternalCluster):
        facts["node_versions"] = cluster.node_versions()
    return facts


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
MAIN_PHASE_GRACE_S = 30.0  # past the time limit, how long the workers may take to finish the ops they are in
ABANDONED = ("no completion by the end of the main phase: the client call never returned, so its process "
             "was abandoned")


class StepRecorder:
    """Writes each nemesis step as an invoke and its info completion (the ledger's records changed by it
    beside its value; its error with it), and shows the current fault on the live panel."""

    def __init__(self, run: Run, writer: HistoryWriter):
        self.run = run
        self.writer = writer

    def began(self, step: PlanStep) -> None:
        self.writer.append(Op(INVOKE, step.f, NEMESIS, step.value))
        what = self._what(step)
        if not step.f.startswith("stop-"):
            self.run.stats.fault = what if step.value is None else f"{what} {json.dumps(step.value, default=str)}"

    def ended(self, step: PlanStep, value: Any, error: BaseException | None) -> None:
        if error is not None:
            self.writer.append(Op(INFO, step.f, NEMESIS, self.run._with_fault_records(step.value),
                                  error=f"{type(error).__name__}: {error}"[:300]))
            return
        self.writer.append(Op(INFO, step.f, NEMESIS, self.run._with_fault_records(value)))
        self.run.stats.fault = ("none" if step.f.startswith("stop-")
                                else f"{self._what(step)} {json.dumps(value, default=str)}")

    @staticmethod
    def _what(step: PlanStep) -> str:
        return step.f.removeprefix("scenario-").removeprefix("start-")


class Run:
    def __init__(self, spec: TestSpec, log=print, on_run_dir: Callable[[Path], None] | None = None):
        self.spec = spec
        self.log = log
        self.on_run_dir = on_run_dir  # told the run dir as soon as it exists (a campaign's child, harness/run_child.py)
        self.watchdog: RunWatchdog | None = None  # the process that heals the run if this one freezes or dies
        self.stop = threading.Event()
        self.stats = LiveStats()
        self.errors: list[str] = []
        self.ledger = FaultLedger()
        self.facts: dict[str, Any] = {"thread_failures": {}}  # results.json "run": what checkers/evidence.py reads
        self.run_dir: Path | None = None
        self.healing = False
        # worker -> the invocation its client is in; an op still here when the main phase ends is recorded
        # info by the runner and its worker abandoned (Jepsen's rule), whatever the client call does later
        self._in_flight: dict[int, Op] = {}
        self._flight_lock = threading.Lock()

    def _thread(self, name: str, target, *args) -> threading.Thread:
        """A daemon thread whose death by an exception is a fact of the run (the verdict cannot be valid),
        not a line on stderr nobody reads."""
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as e:  # noqa: BLE001 - recorded; the run goes on to heal and store
                self.facts["thread_failures"][name] = f"{type(e).__name__}: {e}"[:300]
                self.errors.append(f"thread {name} died: {traceback.format_exc()[-1500:]}")
        return threading.Thread(target=guarded, name=name, daemon=True)

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
                    client = workload.new_client(test, process)
                    try:
                        client.open(bootstrap)
                    except Exception as e:  # noqa: BLE001 - a client that cannot open is retried later
                        self.errors.append(f"worker {worker}: client open failed: {e}")
                        client = None
                        self.stop.wait(0.5)
                        continue
                with self._flight_lock:
                    if self.stop.is_set():
                        return
                    op = self._in_flight[worker] = writer.append(Op(INVOKE, inv.f, process, inv.value,
                                                                    extra=inv.extra))
                comp = self._invoke(client, op)
                with self._flight_lock:
                    if self._in_flight.pop(worker, None) is None:
                        return  # the main phase ended without it: the runner recorded it info (_abandon_stuck_ops)
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
            # (the invocation's own fields stay on it: a final read's "final" marks its completion too)
            comp = Op(INFO, op.f, op.process, None, error=f"{type(e).__name__}: {e}"[:300], extra=op.extra)
        comp.process, comp.f = op.process, op.f
        return comp

    @classmethod
    def _invoke_bounded(cls, client, op: Op, timeout_s: float) -> Op:
        """_invoke on a daemon thread of its own: a client call that has not returned after `timeout_s` ends
        info and is left behind (its late completion is dropped), so a hung client library cannot stop the
        run's final reads."""
        box: dict[str, Op] = {}
        t = threading.Thread(target=lambda: box.setdefault("comp", cls._invoke(client, op)), daemon=True,
                             name=f"client call of process {op.process}")
        t.start()
        t.join(timeout_s)
        if "comp" in box:
            return box["comp"]
        return Op(INFO, op.f, op.process, None, extra=op.extra,
                  error=f"the client call had not returned after {timeout_s:g} s, so its process was abandoned")

    def _nemesis_loop(self, nemesis, cluster, writer: HistoryWriter, schedule: NemesisSchedule) -> None:
        """The one scheduler (nemesis/plan.py) runs the nemesis's plans together: the schedule's random faults
        and the steps of a scenario or the protocol nemesis, which end at the time limit with the clients, so
        no fault lands on an idle cluster."""
        drive(nemesis.plans(cluster, schedule.events()), StepRecorder(self, writer), self.stop,
              lambda: writer.now() / 1e9, end=self.spec.time_limit)

    def _with_fault_records(self, value: Any) -> Any:
        """A nemesis completion's value with the ledger's records changed since the last one (the faults
        this op requested, applied, observed or healed), under "faults" (history/faults.py)."""
        changed = self.ledger.changes()
        if not changed:
            return value
        out = dict(value) if isinstance(value, dict) else ({"result": value} if value is not None else {})
        out["faults"] = changed
        return out

    def _leader_poller(self, cluster, topic: str, writer: HistoryWriter) -> None:
        """Every 2 s, the partitions' leaders and ISRs as the cluster reports them: for the live panel, and
        (whenever they change) a line in metadata.jsonl, what the reached states of any cluster come from."""
        observations = MetadataObservations(self.run_dir / "metadata.jsonl")
        while not self.stop.wait(2.0):
            try:
                parts = cluster.partitions(topic)
                self.stats.leaders = " ".join(f"p{p.partition}:{p.leader}" for p in parts) or "?"
            except Exception:  # noqa: BLE001 - the panel and the coverage are best effort
                self.stats.leaders = "?"
                continue
            observations.record(writer.now(), [{"partition": p.partition, "leader": p.leader, "isr": p.isr,
                                                 "leader_epoch": p.leader_epoch} for p in parts])

    # --- the whole run -------------------------------------------------------------------------------
    def execute(self, panel: bool = False) -> tuple[int, Path]:
        """The run, watched by a process of its own (harness/watchdog.py) from the moment its run dir exists.
        The watchdog is told "done" on every way out of here: by then the run healed and tore down whatever it
        made (a second signal's os._exit skips this, and the watchdog heals what the run left)."""
        try:
            return self._execute(panel)
        finally:
            if self.watchdog is not None:
                self.watchdog.done()
                if self.watchdog.lost:
                    self.log(f"warning: {self.watchdog.lost}")

    def _execute(self, panel: bool) -> tuple[int, Path]:
        spec = self.spec
        from kafkaesque_harness.nemesis.registry import make_nemesis
        from kafkaesque_harness.workloads.registry import make_workload

        workload = make_workload(spec.workload, spec.workload_opts())
        nemesis = make_nemesis(spec.nemesis, {"target": spec.nemesis_target, "seed": spec.seed,
                                              "topic": spec.workload_opts()["topic"], "min_isr": spec.min_isr,
                                              "scenario_delay": spec.nemesis_interval,
                                              "interval": spec.nemesis_interval,
                                              # the transactional ids and groups, for the coordinator roles
                                              **getattr(workload, "coordinated_keys", lambda c: {})(spec.concurrency),
                                              **spec.nemesis_options})
        if spec.cluster == "auto":
            from kafkaesque_harness.clusters.docker import docker_available

            # DESIGN: containers are the default whenever a Docker engine answers.
            spec.cluster = "docker" if docker_available() else "local"
        run_dir = self.run_dir = create_run_dir(spec.store, spec.name)
        self._start_watchdog(run_dir)
        test = spec.to_dict()
        test["run_dir"] = str(run_dir)
        write_json(run_dir / "test.json", test)
        writer = HistoryWriter(run_dir / "history.jsonl")
        self.ledger.clock = writer.now
        cluster = make_cluster(spec, run_dir)
        # What the checkers need to know of the cluster: which nodes, whether they give state dumps and
        # whether they write the protocol trace.
        test.update(nodes=cluster.nodes(), state_dumps=can(cluster, StateDumps),
                    protocol_trace=can(cluster, ProtocolTrace))
        # The workload's producer stalls (a client fault: nemesis/actions.py stall_producer), where it has them:
        # its clients and the fault actions share the one control.
        stalls = workload.producer_stalls() if can(workload, StallableProducers) else None
        faults = FaultActions(cluster, self.ledger, spec.workload_opts()["topic"], stalls)
        self.log(f"run {run_dir} · cluster {cluster.name} · workload {spec.workload} · nemesis "
                 f"{','.join(spec.nemesis) or 'none'} · {spec.time_limit:.0f} s")
        outcome: dict[str, Any] = {}
        live = None
        watchdog: _StackWatchdog | None = None
        with _signals_handled(self):
            try:
                try:
                    self.stats.phase = "cluster up"
                    bootstrap = cluster.up()
                    # What each node allows, printed and kept in test.json; faults needing what a node
                    # lacks are refused by nemesis.setup below, before the main phase.
                    from kafkaesque_harness.clusters.capabilities import report_capabilities

                    test["capabilities"] = report_capabilities(cluster, self.log)
                    test.update(_cluster_file_facts(spec, cluster, run_dir))
                    spread = worker_bootstraps(cluster, spec.concurrency, bootstrap)
                    if set(spread) != {bootstrap}:
                        test["client_bootstraps"] = spread  # worker w's clients bootstrap to spread[w]
                    write_json(run_dir / "test.json", test)
                    for topic, parts in workload.topics(test):
                        cluster.create_topic(topic, parts, spec.replication_factor, spec.min_isr)
                    refusal = workload.preflight(spread) if can(workload, PreflightCheck) else None
                    if refusal:
                        raise HarnessError(refusal)
                    nemesis.setup(cluster, faults)
                    schedule = self._nemesis_schedule(nemesis)
                    if panel:
                        from kafkaesque_harness.harness.panel import start_panel

                        live = start_panel(self.stats, spec)
                    watchdog = _StackWatchdog(run_dir / "stacks.txt", spec.time_limit + MAIN_PHASE_GRACE_S
                                              + NEMESIS_STEP_GRACE_S + STACK_DUMP_MARGIN_S)
                    self._main_phase(workload, nemesis, cluster, test, bootstrap, writer, schedule)
                except KeyboardInterrupt as e:
                    outcome["interrupted"] = _interruption(e)
                except (ClusterError, NemesisRefused, HarnessError) as e:
                    outcome["error"] = str(e)
                except Exception as e:  # noqa: BLE001 - a harness bug: kept in results, exit 3
                    outcome["error"] = f"{type(e).__name__}: {e}"
                    outcome["traceback"] = traceback.format_exc()
                finally:
                    self.stop.set()
                    self._heal(nemesis, cluster, writer)
                    if watchdog is not None:
                        watchdog.cancel()
                if not outcome:
                    try:
                        self._recover_and_read(workload, cluster, test, writer)
                    except KeyboardInterrupt as e:
                        outcome["interrupted"] = _interruption(e) + " during the final reads"
                    except FinalReadsImpossible as e:
                        # The cluster did not come back: a finding about the system, not a harness
                        # failure; without final reads the verdict can only be unknown.
                        outcome["final_reads"] = str(e)
            finally:
                if live is not None:
                    live.stop()
                self.stats.phase = "collecting"  # from here a first signal is only noted (_signals_handled)
                try:
                    cluster.collect(str(run_dir / "nodes"))
                except Exception as e:  # noqa: BLE001
                    self.errors.append(f"collecting node logs failed: {e}")
                if not spec.leave_running:
                    cluster.down()
                writer.close()
        not_run = list(nemesis.not_run)
        return self._check_and_store(run_dir, test, workload, outcome,
                                     {"faults_not_run": not_run} if not_run else {})

    def _start_watchdog(self, run_dir: Path) -> None:
        if self.on_run_dir is not None:
            self.on_run_dir(run_dir)
        try:
            self.watchdog = RunWatchdog.start(run_dir, ledger=self.ledger)
        except OSError as e:  # the run goes on, as every run did before the watchdog: said, not fatal
            self.errors.append(f"the run's watchdog could not be started ({e}): a frozen harness would not be healed")

    def _nemesis_schedule(self, nemesis) -> NemesisSchedule:
        """When the random faults start and stop; a plan whose schedule never starts one of its faults
        (the time limit too short for the interval) is refused here, before the main phase."""
        spec = self.spec
        schedule = NemesisSchedule(nemesis.schedule(), spec.nemesis_interval, spec.time_limit, spec.seed,
                                   spec.nemesis_schedule)
        problem = schedule.coverage_problem()
        if problem:
            raise NemesisRefused(f"{problem}; raise --time-limit or lower --nemesis-interval")
        return schedule

    def _heal(self, nemesis, cluster, writer: HistoryWriter) -> None:
        """The final heal: every nemesis part's teardown, then whatever the ledger still holds active,
        recorded as the history's "heal" op (its errors and the records it changed)."""
        self.stats.phase = "healing"
        self.healing = True
        writer.append(Op(INVOKE, "heal", NEMESIS, None))
        try:
            heal_errors = nemesis.teardown(cluster)
        except Exception as e:  # noqa: BLE001 - recorded in the heal op: the verdict cannot be valid
            heal_errors = [f"{type(e).__name__}: {e}"]
        still = [f"#{r.id} {r.label}" for r in self.ledger.active()]
        # Always a "faults" list, empty or not: it marks a history written with the ledger (checkers/evidence.py)
        value = {"faults": [], **self._with_fault_records({"errors": heal_errors})}
        if still:
            value["still_active"] = still
        writer.append(Op(INFO, "heal", NEMESIS, value))
        self.healing = False
        self.stats.fault = "none"

    def _main_phase(self, workload, nemesis, cluster, test: dict, bootstrap: str, writer: HistoryWriter,
                    nem_sched: NemesisSchedule) -> None:
        spec = self.spec
        self.stats.phase = "main"
        self.stats.start = time.monotonic()
        writer.start_ns = time.monotonic_ns()
        # Where the run's clock sits on the host's clocks: broker log lines carry both, so the reached
        # states they show go on the run's timeline (checkers/coverage.py).
        self.facts["clock"] = {"monotonic_start_ns": writer.start_ns, "wall_start_s": time.time()}
        schedule = ClientSchedule(workload.op_mix(test), spec.rate, spec.time_limit, spec.seed)
        processes = ProcessTable(spec.concurrency)
        spread = test.get("client_bootstraps") or [bootstrap] * spec.concurrency
        threads = [self._thread(f"worker-{w}", self._worker, w, workload, test, spread[w], schedule, processes,
                                writer) for w in range(spec.concurrency)]
        threads.append(self._thread("nemesis", self._nemesis_loop, nemesis, cluster, writer, nem_sched))
        threads.append(self._thread("leaders", self._leader_poller, cluster, spec.workload_opts()["topic"], writer))
        for t in threads:
            t.start()
        self._processes = processes
        # Join with a timeout so Ctrl-C reaches this thread.
        deadline = time.monotonic() + spec.time_limit + MAIN_PHASE_GRACE_S
        for t in threads[:-1]:
            while t.is_alive() and time.monotonic() < deadline:
                t.join(0.2)
        self.stop.set()
        self._abandon_stuck_ops(writer)
        # The heal must not race a fault step still under way (a restart, a pause): let the nemesis
        # thread finish the step it is in; every step is bounded (waits and sleeps end on stop).
        nemesis_thread = threads[-2]
        deadline = time.monotonic() + NEMESIS_STEP_GRACE_S
        while nemesis_thread.is_alive() and time.monotonic() < deadline:
            nemesis_thread.join(0.2)
        if nemesis_thread.is_alive():
            self.facts["nemesis_overran_s"] = NEMESIS_STEP_GRACE_S
            self.errors.append(f"the nemesis was still inside a fault step {NEMESIS_STEP_GRACE_S:.0f} s after the "
                               "main phase; healing anyway")

    def _abandon_stuck_ops(self, writer: HistoryWriter) -> None:
        """The ops whose client call has not returned by the end of the main phase (a client library that
        hangs: librdkafka in commit_transaction after its coordinator died) end info now, and their workers
        are left behind on their daemon threads: a completion they write later is dropped (_worker)."""
        with self._flight_lock:
            stuck, self._in_flight = self._in_flight, {}
            for _, op in sorted(stuck.items()):
                writer.append(Op(INFO, op.f, op.process, None, error=ABANDONED, extra=op.extra))
                self.stats.completed(INFO)
        if stuck:
            self.facts["abandoned_ops"] = len(stuck)
            self.errors.append(f"{len(stuck)} client call(s) had not returned {MAIN_PHASE_GRACE_S:.0f} s after the "
                               "time limit; recorded info and abandoned")

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
        for process, f, value, extra in assignments:
            # A final read that times out (a partition still electing or catching up just after the heal)
            # is tried again on a fresh process until FINAL_READ_RETRY_S has passed: a read changes nothing,
            # and one missing final read makes the whole verdict unknown.
            deadline = time.monotonic() + FINAL_READ_RETRY_S
            while True:
                client = workload.new_client(test, process)
                try:
                    self._open_for_final_read(client, bootstrap)
                    op = writer.append(Op(INVOKE, f, process, value, extra=extra))
                    done = writer.append(self._invoke_bounded(client, op, FINAL_READ_CALL_S))
                finally:
                    _close_quietly(client)
                if done.type == OK or time.monotonic() >= deadline:
                    break
                process, spare_process = spare_process, spare_process + 1  # an info op ends its process
                time.sleep(1.0)

    def _open_for_final_read(self, client, bootstrap: str) -> None:
        """A client for the final reads, retried while the healed cluster may still be recovering."""
        timeout_s = FINAL_READ_CONNECT_S
        error: Exception | None = None

        def opened() -> bool:
            nonlocal error
            try:
                client.open(bootstrap)
                return True
            except Exception as e:  # noqa: BLE001 - any client error: the cluster is not answering yet
                error = e
                _close_quietly(client)
                return False

        try:
            wait_until(opened, timeout_s, 1.0, "a client's connection to the healed cluster")
        except WaitTimeout:
            raise FinalReadsImpossible(
                f"no final reads: the cluster did not answer a client within {timeout_s:.0f} s after the "
                f"heal ({type(error).__name__}: {error}); see the node logs under nodes/") from None

    def _check_and_store(self, run_dir: Path, test: dict, workload, outcome: dict[str, Any],
                         notes: dict[str, Any] | None = None) -> tuple[int, Path]:
        self.stats.phase = "checking"
        facts = {**self.facts, **{k: v for k, v in outcome.items() if k != "traceback"}}
        facts["cluster"] = test.get("cluster")
        history, problems = read_run_history(run_dir)  # read once: the checks and the report share it
        results = check_history(run_dir, test, facts, history, problems, workload)
        results.update({k: v for k, v in outcome.items() if k != "traceback"})
        if "traceback" in outcome:
            (run_dir / "harness-error.txt").write_text(outcome["traceback"])
        if self.errors:
            results["harness_warnings"] = self.errors[:50]
        results["availability"] = availability(history, float(test.get("time_limit") or 0),
                                               [e for e in self.errors if ": client open failed: " in e])
        results.update(notes or {})  # e.g. faults the kernel cannot do, refused by name
        write_json(run_dir / "results.json", results)
        try:
            from kafkaesque_harness.results.report import render_report

            render_report(run_dir, history)
        except Exception as e:  # noqa: BLE001 - a report failure never hides the verdict
            self.errors.append(f"report failed: {e}")
        code = (EXIT_HARNESS if "error" in outcome else EXIT_INTERRUPTED if "interrupted" in outcome
                else exit_code(results["valid"]))
        return code, run_dir


def analyze_history(test: dict, history: list[Op], workload=None) -> dict[str, Any]:
    """Check a history with the workload's checkers (the broker-side invariants among them, handed the run's
    replicas.json) and the fault evidence: the composite of the checkers (checkers/core.py), before the
    harness's own facts."""
    if workload is None:
        from kafkaesque_harness.workloads.registry import make_workload

        spec = TestSpec.from_dict(test)
        workload = make_workload(spec.workload, spec.workload_opts())
    return run_checkers([*workload.checkers(test), FaultEvidenceChecker()], test, history, run_data(test))


def run_data(test: dict) -> dict[str, Any]:
    """The run's recorded inputs besides its history, for the checkers (checkers/core.py CheckContext.data):
    "replicas", the replicas' normalised state (clusters/replica_dumps.py); "trace", the nodes' protocol traces
    (clusters/trace_files.py); each None when the run dir is not known."""
    run_dir = test.get("run_dir")
    if not run_dir:
        return {"replicas": None, "trace": None}
    return {"replicas": load_replicas(Path(run_dir), test.get("nodes")),
            "trace": load_traces(Path(run_dir), test.get("nodes")) if test.get("protocol_trace") else None}


def read_run_history(run_dir: Path) -> tuple[list[Op], list[str]]:
    """A stored run's history, and what was wrong with it (a torn last line)."""
    problems: list[str] = []
    return read_history(run_dir / "history.jsonl", problems), problems


def check_run(run_dir: Path, test: dict, facts: dict[str, Any] | None, workload=None) -> dict[str, Any]:
    """The verdict of a stored run: its history checked, the evidence rules applied with the harness's
    facts (None: not known, e.g. a run whose harness died), and the states it reached. What `run` and
    `kafkaesque analyze` both call, so a stored run re-checks to the same verdict."""
    return check_history(run_dir, test, facts, *read_run_history(run_dir), workload)


def check_history(run_dir: Path, test: dict, facts: dict[str, Any] | None, history: list[Op], problems: list[str],
                  workload=None) -> dict[str, Any]:
    """check_run on a history already read (read_run_history: the ops and the problems reading found)."""
    if facts is not None and problems:
        facts = {**facts, "history_torn": "history.jsonl"}
    results = decide(analyze_history(test, history, workload), facts)
    results["run"] = facts
    results["store_format"] = STORE_FORMAT
    results["checked_by"] = f"{DIST} {dist_version()}"  # the version whose checkers gave this verdict
    results["reached"] = reached_in_run(run_dir, (facts or {}).get("clock") or {}, (facts or {}).get("cluster"))
    return results


def reached_in_run(run_dir: Path, clock: dict[str, Any], cluster: str | None) -> dict[str, Any]:
    """The protocol states the run went through (checkers/coverage.py), from its metadata observations and
    the JSON lines of its collected node logs."""
    logs = sorted({f for folder in NODE_FOLDERS for f in (run_dir / folder).glob("*/*.log")
                   if folder == "nodes" or not (run_dir / "nodes" / f.parent.name / f.name).exists()})
    events = [e for f in logs for e in log_events(read_jsonl(f))]
    return reached_states(read_jsonl(run_dir / "metadata.jsonl"), events,
                          {**clock, "same_host": cluster in SAME_HOST_CLUSTERS})


def analyze_run(run_dir: Path, test: dict, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """`kafkaesque analyze`: re-check a stored run with the harness's facts its previous results.json kept
    (`previous`, read by the caller; without them the verdict cannot be valid), so a stored run re-checks to
    the verdict the run itself gave."""
    previous = previous if isinstance(previous, dict) else {}
    facts = previous.get("run") if isinstance(previous.get("run"), dict) else None
    frozen_or_died = watchdog_note(run_dir) if not previous else None
    if frozen_or_died:  # the harness's only fact: how it ended, as its watchdog saw it (harness/watchdog.py)
        facts, previous = {"error": frozen_or_died}, {"error": frozen_or_died}
    results = check_run(run_dir, test, facts)
    for key in ("error", "interrupted", "final_reads", "harness_warnings", "faults_not_run", "availability"):
        if key in previous:  # the run's own facts, which its history alone cannot give again
            results[key] = previous[key]
    return results


def not_ignored(sigs: tuple[signal.Signals, ...]) -> list[signal.Signals]:
    """The signals of `sigs` this process does not ignore. One ignored when the harness began stays ignored
    (a shell does the same): `nohup kafkaesque campaign ...` ignores SIGHUP so that closing the terminal
    does not end the campaign, and a command started with `&` by a script ignores SIGINT."""
    return [s for s in sigs if signal.getsignal(s) is not signal.SIG_IGN]


def _interruption(e: KeyboardInterrupt) -> str:
    return e.how if isinstance(e, Interrupted) else "interrupted by the user (Ctrl-C)"


@contextlib.contextmanager
def _signals_handled(run: Run):
    """SIGTERM, SIGHUP and Ctrl-C end the main phase (or the final reads) like Ctrl-C always did: an
    Interrupted raised in the main thread, then heal, teardown and results (each unless ignored when the
    run began: not_ignored). Arriving while the run heals or tears down, the first is noted and the heal
    goes on; a second ends the harness at once (exit 3), after writing the results it can."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread; a runner in another thread keeps the defaults
        return
    seen: list[str] = []

    def on_signal(signum: int, frame) -> None:
        how = ("interrupted by the user (Ctrl-C)" if signum == signal.SIGINT
               else f"interrupted by {signal.Signals(signum).name}")
        seen.append(how)
        if len(seen) > 1:
            _write_after_second_signal(run, seen)
            os._exit(EXIT_INTERRUPTED)
        if run.healing or run.stats.phase in ("collecting", "checking"):
            run.facts["interrupted"] = f"{how} while it healed or tore down (that part ran to its end)"
            return
        raise Interrupted(how)

    old = {s: signal.signal(s, on_signal) for s in not_ignored((signal.SIGINT, *INTERRUPT_SIGNALS))}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _write_after_second_signal(run: Run, seen: list[str]) -> None:
    """What a second signal still leaves: results.json saying the run was cut short (the history is on disk
    already, line by line)."""
    from kafkaesque_harness.checkers.reasons import say

    if run.run_dir is None:
        return
    reason = say("interrupted", how=f"{seen[0]}, then {seen[1].removeprefix('interrupted by ')} during the "
                                     f"{run.stats.phase}: the harness stopped at once, leaving the heal to "
                                     "its watchdog (harness-died.txt says what it removed)")
    try:
        write_json(run.run_dir / "results.json", {
            "valid": UNKNOWN, "unknown_reasons": [reason], "interrupted": reason,
            "error": "a second signal ended the harness before the heal and teardown finished",
            "run": {**run.facts, "interrupted": reason}})
    except OSError:
        pass


STACK_DUMP_MARGIN_S = 60.0  # past every bound of the main phase and the nemesis's last step


class _StackWatchdog:
    """Every thread's stack written to the run dir (stacks.txt) if the run has not reached the end of its
    heal when every bound of the main phase has passed: faulthandler's own C thread writes it, so it works
    even when a client library's call holds the GIL or a lock and no Python code can run. The file stays
    empty when the run got through; a hung harness then shows where it hangs."""

    def __init__(self, path: Path, timeout_s: float):
        self._file = open(path, "w")  # noqa: SIM115 - faulthandler writes to it until cancel()
        faulthandler.dump_traceback_later(timeout_s, repeat=False, file=self._file, exit=False)
        self._path = path

    def cancel(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self._file.close()
        if self._path.stat().st_size == 0:
            self._path.unlink()


def _close_quietly(client) -> None:
    t = threading.Thread(target=_close, args=(client,), daemon=True)
    t.start()
    t.join(3.0)  # a client stuck on a paused broker must not hold up the run


def _close(client) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001
        pass


def run_test(spec: TestSpec, log=print, panel: bool = False,
             on_run_dir: Callable[[Path], None] | None = None) -> tuple[int, Path]:
    random.seed(spec.seed)
    return Run(spec, log, on_run_dir).execute(panel=panel)
