"""`kafkaesque sim`: one run of the reference cluster in the deterministic simulator, stored and checked as
a real run is.

The cluster is clusters/sim/'s SimCluster (the broker's own node programs, every node in this process on
one event loop with virtual time), the clients the workload's simulated ones (workloads/sim/: the queue or
txn workload's processes and op mixes, the real libraries' behaviour), the faults a seeded schedule of the
kinds the simulator has (SIM_FAULTS), each through the fault ledger into the history as a real nemesis's
are. The run dir is a real run's: test.json (with "simulated": true and "cluster": "sim"), history.jsonl,
data/<node>/ (each node's log, trace and data), nodes/<node>/ and replicas.json (collected at the end),
results.json (the same checkers, through harness/runner.py's check_run) and report.html.

One seed decides everything: the same seed and settings give the same history, traces and logs, byte for
byte, in any process with PYTHONHASHSEED fixed (`kafkaesque sim` re-executes itself with 0 when needed).
The times in the history are virtual nanoseconds since the run began.

Faults (sequential: one at a time, a start and its stop `nemesis_interval` apart on average, on a node drawn
from every node, controllers included): kill (SIGKILL, restarted at the stop), pause (SIGSTOP/SIGCONT),
partition (the node isolated both ways), lossy-crash (SIGKILL and its unsynced writes lost, restarted; on a
broker only within the fault budget of nemesis/faults.py: at most min ISR - 1 brokers power-cut and not yet
back in every ISR),
clock (its wall clock jumped by up to 2 minutes, set back at the stop).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from kafkaesque_harness.checkers.availability import availability
from kafkaesque_harness.clusters.reference import FLAW_VARIANTS
from kafkaesque_harness.clusters.sim.cluster import SimCluster
from kafkaesque_harness.harness.runner import EXIT_HARNESS, check_run, exit_code, read_run_history
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.history import INFO, INVOKE, NEMESIS, HistoryWriter, Op
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.results.store import create_run_dir, write_json
from kafkaesque_harness.workloads.sim.driver import WORKLOADS, SimWorkloadRun

SIM_FAULTS = ("kill", "pause", "partition", "lossy-crash", "clock")
READY_TIMEOUT_S = 60.0


class SimNemesis:
    """The simulated run's fault schedule: one fault at a time, drawn from the seed, recorded through the ledger
    (history/faults.py's records in the nemesis ops' completions, as harness/runner.py writes them)."""

    def __init__(self, sim: SimCluster, writer: HistoryWriter, faults: list[str], rng: random.Random,
                 interval_s: float, min_isr: int = 2):
        self.sim, self.writer, self.faults, self.rng, self.interval_s = sim, writer, faults, rng, interval_s
        self.ledger = FaultLedger(writer.now)
        # The lossy crash's fault budget, as nemesis/faults.py's: at most min ISR - 1 brokers power-cut and not
        # yet back in every ISR of the partitions they hold (001 5); beyond it a correct broker may lose data.
        self.budget = max(min_isr - 1, 0)
        self.recovering: dict[str, int] = {}  # power-cut broker -> its broker epoch before the cut

    def _op(self, f: str, value: Any) -> None:
        self.writer.append(Op(INVOKE, f, NEMESIS, value))

    def _done(self, f: str, value: dict[str, Any]) -> None:
        self.writer.append(Op(INFO, f, NEMESIS, {**value, "faults": self.ledger.changes()}))

    async def run(self, until_s: float) -> None:
        if not self.faults:
            return
        while True:
            await asyncio.sleep(self.rng.expovariate(1 / self.interval_s))
            if self.sim.now() >= until_s:
                return
            kind = self.rng.choice(self.faults)
            targets = self._lossy_crash_targets() if kind == "lossy-crash" else list(self.sim.names)
            node = self.rng.choice(targets)
            undo = self.start(kind, node)
            await asyncio.sleep(self.rng.expovariate(1 / self.interval_s))
            self.stop(kind, node, undo)

    def _lossy_crash_targets(self) -> list[str]:
        """The controllers (their metadata is fsynced before it is acted on: a correct one loses nothing), and
        the brokers while the budget allows: not one still unclean, and fewer unclean than the budget."""
        sim = self.sim
        self.recovering = {n: e for n, e in self.recovering.items() if not self._back_in_sync(n, e)}
        unclean = set(self.recovering) | {n for r in self.ledger.active(("lossy-crash",)) for n in r.nodes}
        brokers = [b for b in sim.brokers if b not in unclean] if len(unclean & set(sim.brokers)) < self.budget else []
        return sim.controllers + brokers

    def _broker_epoch(self, broker: str) -> int | None:
        active = self.sim.active_controller()
        if active is None:
            return None
        bid = self.sim.node_id(broker)
        return next((b["broker_epoch"] for b in self.sim.dump(active).get("brokers", []) if b["broker_id"] == bid),
                    None)

    def _back_in_sync(self, broker: str, epoch_before: int | None) -> bool:
        """Registered again since the cut (a new broker epoch: until then the controller's ISR may still list it
        from before, when it held the data it lost) and in the ISR of every partition that lists it as a
        replica, by the active controller. Unknown is no."""
        active = self.sim.active_controller()
        if not self.sim.running(broker) or active is None:
            return False
        state = self.sim.dump(active)
        bid = self.sim.node_id(broker)
        me = next((b for b in state.get("brokers", []) if b["broker_id"] == bid), None)
        if me is None or me["fenced"] or me["broker_epoch"] == epoch_before:
            return False
        return all(bid in p["isr"] for p in state.get("partitions", []) if bid in p["replicas"])

    def start(self, kind: str, node: str) -> Any:
        """Apply one fault and record it (requested, applied, observed); what its stop needs."""
        sim, f = self.sim, f"start-{kind}"
        self._op(f, {"node": node})
        detail: dict[str, Any] = {}
        if kind == "clock":
            detail["delta_s"] = round(self.rng.choice([-1, 1]) * self.rng.uniform(1, 120), 3)
        rec = self.ledger.request(kind, [node], by=kind, detail=detail or None)
        evidence: dict[str, Any]
        if kind == "lossy-crash" and node in sim.brokers:
            self.recovering[node] = self._broker_epoch(node)  # unclean from now until back in sync
        if kind == "kill":
            sim.kill(node)
            evidence = {"process": "gone"} if not sim.running(node) else {}
        elif kind == "lossy-crash":
            report = sim.power_cut(node)
            evidence = {"files": report.files, "bytes": report.bytes_lost} if not sim.running(node) else {}
        elif kind == "pause":
            sim.pause(node)
            evidence = {"process": "stopped"}
        elif kind == "partition":
            sim.isolate(node)
            evidence = {"blocked_pairs": len(sim.net.blocked)}
        else:
            before = sim.clock_offset_s.get(node, 0.0)
            sim.jump_clock(node, detail["delta_s"])
            evidence = {"offset_s": round(sim.clock_offset_s[node], 3), "was_s": round(before, 3)}
        self.ledger.applied(rec)
        self.ledger.observed(rec, bool(evidence), evidence)
        self._done(f, {"node": node})
        return rec

    def stop(self, kind: str, node: str, rec: Any) -> None:
        sim, f = self.sim, f"stop-{kind}"
        self._op(f, {"node": node})
        if kind in ("kill", "lossy-crash"):
            if not sim.running(node):
                sim.start(node)

            evidence = {"restarted": sim.nodes[node].incarnations}
        elif kind == "pause":
            sim.resume(node)
            evidence = {"process": "running"}
        elif kind == "partition":
            sim.heal()
            evidence = {"blocked_pairs": len(sim.net.blocked)}
        else:
            sim.skew_clock(node, 0.0)
            evidence = {"offset_s": 0.0}
        self.ledger.healed(rec, True, evidence)
        self._done(f, {"node": node})

    def final_heal(self) -> None:
        """The run's heal op: every node running and reachable, every clock true again."""
        self._op("heal", None)
        sim = self.sim
        sim.heal()
        for name in sim.names:
            sim.resume(name)
            sim.skew_clock(name, 0.0)
            if not sim.running(name):
                sim.start(name)
        for rec in self.ledger.active():
            self.ledger.healed(rec, True, {"by": "final heal"})
        self._done("heal", {"errors": []})


def sim_problems(spec: TestSpec) -> list[str]:
    """One sentence per setting the simulator cannot run."""
    out = []
    if spec.workload not in WORKLOADS:
        out.append(f"the simulator has clients for the {' and '.join(WORKLOADS)} workloads, not {spec.workload!r}; "
                   "pick one of those, or run it for real with `kafkaesque run`")
    unknown = [n for n in spec.nemesis if n not in SIM_FAULTS]
    if unknown:
        out.append(f"the simulator has no fault {', '.join(unknown)}; its faults: {', '.join(SIM_FAULTS)}")
    if spec.broker.broker_variant != "default" and spec.broker.broker_variant not in FLAW_VARIANTS:
        out.append(f"unknown broker variant {spec.broker.broker_variant!r}")
    if spec.broker.node_code:
        out.append("the simulator runs this tree's broker; --node-code (a mutant's copy) is for real runs")
    return out


def simulate(spec: TestSpec, log: Any = print, mutant: dict[str, str] | None = None) -> tuple[int, Path]:
    """Run, store and check one simulated run; (exit status, run dir). `mutant`: the broker loaded is a
    mutant's copy (clusters/sim/mutant.py), {"mutant": its name, "digest": its code's}, kept in test.json."""
    run_dir = create_run_dir(spec.store, spec.name)
    variant = spec.broker.broker_variant
    sim = SimCluster(spec.seed, n_brokers=spec.brokers, n_controllers=spec.broker.controllers,
                     flush_policy=spec.broker.flush_policy, variants=[variant] if variant in FLAW_VARIANTS else [],
                     broker_config=spec.broker.cluster_spec_fields()["broker_config"], run_dir=str(run_dir))
    test = spec.to_dict()
    test.update(cluster="sim", simulated=True, run_dir=str(run_dir), nodes=list(sim.names), state_dumps=True,
                protocol_trace=True, **(mutant or {}))
    write_json(run_dir / "test.json", test)
    log(f"simulated run {run_dir} · seed {spec.seed} · workload {spec.workload} · nemesis "
        f"{','.join(spec.nemesis) or 'none'} · {spec.time_limit:.0f} virtual s")
    writer = HistoryWriter(run_dir / "history.jsonl", start_ns=0, clock_ns=lambda: int(round(sim.now() * 1e9)))
    outcome: dict[str, Any] = {}
    run = None
    try:
        sim.start_all()
        if not sim.wait_ready(READY_TIMEOUT_S):
            raise RuntimeError(f"the simulated brokers did not register within {READY_TIMEOUT_S:.0f} virtual s")
        bootstrap = ",".join(f"{h}:{p}" for h, p in sim.bootstrap())
        options = {**spec.workload_opts(), "acks": spec.acks}
        clients = sim.add_client("clients")
        run = SimWorkloadRun(spec.workload, options, sim.net.open_connection, random.Random(f"{spec.seed}/clients"),
                             bootstrap, writer, spec.concurrency, spec.time_limit, spec.rate)
        for topic, partitions in run.workload.topics(run.test):
            sim.create_topic(topic, partitions, spec.replication_factor, spec.min_isr)
        start = sim.now()
        writer.start_ns = int(round(start * 1e9))  # history times from the main phase's start, as a real run's
        nemesis = SimNemesis(sim, writer, list(spec.nemesis), random.Random(f"{spec.seed}/nemesis"),
                             spec.nemesis_interval, spec.min_isr)
        main = sim.spawn(clients, run.main_phase())
        faults = sim.loop.create_task(nemesis.run(start + spec.time_limit))
        sim.loop.run_until_complete(asyncio.gather(main, faults))
        nemesis.final_heal()
        sim.run_for(spec.recovery_wait)
        sim.run_as(clients, run.final_reads())
    except Exception as e:  # noqa: BLE001 - a harness or simulator bug: kept in results, exit 3
        outcome["error"] = f"{type(e).__name__}: {e}"
    finally:
        try:
            sim.collect(str(run_dir / "nodes"))
        finally:
            writer.close()
            sim.close()
    facts = {"thread_failures": {}, "cluster": "sim", **outcome}
    results = check_run(run_dir, test, facts, run.workload if run is not None else None)
    results.update(outcome)
    results["simulated"] = True
    history = read_run_history(run_dir)[0]
    results["availability"] = availability(history, float(spec.time_limit), [])
    write_json(run_dir / "results.json", results)
    try:
        from kafkaesque_harness.results.report import render_report

        render_report(run_dir, history)
    except Exception as e:  # noqa: BLE001 - a report failure never hides the verdict
        log(f"report failed: {e}")
    return (EXIT_HARNESS if "error" in outcome else exit_code(results["valid"])), run_dir

