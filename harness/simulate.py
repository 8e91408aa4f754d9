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

Faults (`--nemesis-schedule sequential`, the default: one at a time, a start and its stop `nemesis_interval`
apart on average, on a node drawn from every node, controllers included; `mix`: overlapping, several held at
once within the real nemesis's bounds, SimNemesis): kill (SIGKILL, restarted at the stop), pause
(SIGSTOP/SIGCONT), partition (the node isolated both ways), cut (the node cut off from the controllers both
ways), lossy-crash (SIGKILL and its unsynced writes lost, restarted; on a broker only within the fault budget
of nemesis/faults.py: at most min ISR - 1 brokers power-cut and not yet back in every ISR), clock (its wall
clock jumped by up to 2 minutes, set back at the stop), and `protocol`: the protocol nemesis's moves and
sequences aimed at a partition's roles (SimNemesis, SEQUENCES). The schedule a run applied is written
to its run dir (fault-schedule.json) and test.json ("fault_schedule"); given one (`--schedule FILE`), the run
applies it instead of drawing one (nemesis/sim_schedule.py), and `--shrink` makes a failing one smaller
(harness/sim_shrink.py).
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
from kafkaesque_harness.nemesis.protocol import MAX_DOWN, SEQUENCE_SHARE
from kafkaesque_harness.nemesis.scenario_steps import CONTROLLERS
from kafkaesque_harness.nemesis.sim_schedule import SCHEDULE_FILE, FaultSchedule, ScheduleRecorder
from kafkaesque_harness.results.store import create_run_dir, write_json
from kafkaesque_harness.workloads.sim.driver import WORKLOADS, SimWorkloadRun

SIM_FAULTS = ("kill", "pause", "partition", "lossy-crash", "clock", "cut", "protocol")
SIM_SCHEDULES = ("sequential", "mix")  # --nemesis-schedule: one fault at a time, or overlapping
READY_TIMEOUT_S = 60.0
# The protocol moves' holds and waits, in virtual seconds: a single move holds its fault long enough to outlast
# the reference cluster's replica lag time (5 s: a cut-off follower leaves the ISR) or not; a wait for the
# cluster's metadata to reach a state gives up after its timeout (the move's faults are stopped as drawn).
MOVE_HOLD_S = (2.0, 12.0)
WAIT_POLL_S = 0.25
WAIT_TIMEOUT_S = 15.0
HEAL_SHARE = 0.5  # of the protocol moves drawn while single moves hold: wait for them to end (a heal), then draw


class SimNemesis:
    """The simulated run's fault schedule, drawn from the seed, recorded through the ledger (history/faults.py's
    records in the nemesis ops' completions, as harness/runner.py writes them).

    `mode` sequential: one fault at a time. mix: faults overlap as nemesis/schedule.py's mix has them in real
    runs: every interval (+-50%) one of the faults is toggled, started on a node drawn from those free of
    faults, or stopped; one fault of a kind at a time, at most MAX_DOWN brokers down or paused at once (the
    protocol nemesis's bound), lossy crashes within the fault budget. The pseudo-fault `protocol` draws the
    protocol nemesis's moves (nemesis/protocol.py), aimed by the active controller's metadata at a role of a
    random partition of the workload's topics: single moves (kill or pause the leader, isolate an in-sync
    follower, kill a replica outside the ISR, cut a follower or the leader off from the controllers) that hold
    and accumulate, and from a cluster without faults the sequences of nemesis/scenarios.py that reach the
    historic flaws, in simulated form (SEQUENCES). Each is recorded as plain faults (by "protocol"), so its
    schedule replays without the aiming."""

    def __init__(self, sim: SimCluster, writer: HistoryWriter, faults: list[str], rng: random.Random,
                 interval_s: float, min_isr: int = 2, schedule: FaultSchedule | None = None,
                 mode: str = "sequential", partitions: list[tuple[str, int]] | None = None,
                 every_fault_first: bool = False):
        self.sim, self.writer, self.faults, self.rng, self.interval_s = sim, writer, faults, rng, interval_s
        self.mode = mode
        # a sequential schedule drawn as run_mix draws (every planned fault started once before any repeats)
        # rather than as run() does: a swarm seed's (run() stays as it was, so the seeds swept before replay)
        self.every_fault_first = every_fault_first
        self.partitions = partitions or []  # (topic, partition) the protocol moves aim at
        self.ledger = FaultLedger(writer.now)
        self.cuts: dict[int, set[tuple[str, str]]] = {}  # fault record id -> the (src, dst) pairs it blocks
        self.held: dict[int, tuple[str, str]] = {}  # fault record id -> (kind, node) of every fault holding now
        self.moves: list[asyncio.Task] = []  # protocol single moves holding their faults
        self.deck: list[str] = []  # the sequences not yet run in this round (as the protocol nemesis deals them)
        self.given = schedule  # applied instead of drawing one
        self.recorder = ScheduleRecorder(sim.now, sim.now())  # built as the main phase begins
        # The lossy crash's fault budget, as nemesis/faults.py's: at most min ISR - 1 brokers power-cut and not
        # yet back in every ISR of the partitions they hold (001 5); beyond it a correct broker may lose data.
        self.budget = max(min_isr - 1, 0)
        self.recovering: dict[str, int] = {}  # power-cut broker -> its broker epoch before the cut

    async def play(self, until_s: float) -> FaultSchedule:
        """The given schedule, or one drawn (run()); the schedule applied."""
        if self.given is not None:
            await self.given.play(self, self.recorder.t0, self.sim.now)
        elif self.mode == "mix" or "protocol" in self.faults or self.every_fault_first:
            await self.run_mix(until_s)
        else:
            await self.run(until_s)
        return self.recorder.finished()

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

    # --- overlapping faults (mode mix) and the protocol moves -------------------------------------------------
    async def run_mix(self, until_s: float) -> None:
        on: dict[str, tuple[str, Any]] = {}  # kind -> (node, record) of the plain faults held now
        started: set[str] = set()
        while self.faults:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5) * self.interval_s)
            if self.sim.now() >= until_s:
                break
            # until every fault has had its turn, one that has not goes (as nemesis/schedule.py's mix): a run must
            # show each planned fault took effect (checkers/evidence.py), and luck must not decide whether it can
            kind = self.rng.choice([k for k in self.faults if k not in started] or self.faults)
            if kind == "protocol":
                if await self._protocol_move():
                    started.add(kind)
                elif on:  # every role it could aim at is taken by the plain faults: the oldest one heals
                    held = next(iter(on))
                    self.stop(held, *on.pop(held))
            elif kind in on or (on and self.mode != "mix"):  # sequential (beside protocol moves): one plain fault
                held = kind if kind in on else next(iter(on))
                node, rec = on.pop(held)
                self.stop(held, node, rec)
            else:
                targets = self._free_targets(kind)
                if targets:
                    node = self.rng.choice(targets)
                    on[kind] = (node, self.start(kind, node))
                    started.add(kind)
        for kind in sorted(on):  # every fault started is stopped by the time limit, as in real runs
            self.stop(kind, *on[kind])
        if self.moves:
            await asyncio.gather(*self.moves)

    def _down_brokers(self) -> set[str]:
        return {n for kind, n in self.held.values() if kind in ("kill", "lossy-crash", "pause") and n in self.sim.brokers}

    def _free_targets(self, kind: str) -> list[str]:
        """Nodes free of faults that `kind` may hit now: within MAX_DOWN and the lossy crash's budget."""
        busy = {n for _, n in self.held.values()}
        pool = self._lossy_crash_targets() if kind == "lossy-crash" else list(self.sim.names)
        if kind in ("kill", "lossy-crash", "pause") and len(self._down_brokers()) >= MAX_DOWN:
            pool = [n for n in pool if n not in self.sim.brokers]
        return [n for n in pool if n not in busy]

    def _roles(self) -> dict[str, Any] | None:
        """A random partition's roles by the active controller: leader, in-sync followers, replicas outside the
        ISR (broker names), or None when it has no leader or no controller answers."""
        if not self.partitions:
            return None
        topic, p = self.rng.choice(self.partitions)
        state = self.sim.partition_state(topic, p)
        if state is None or state["leader"] < 0:
            return None
        name = {r: f"broker-{r}" for r in state["replicas"]}
        return {"topic": topic, "partition": p, "leader": name[state["leader"]],
                "followers": [name[r] for r in state["replicas"] if r in state["isr"] and r != state["leader"]],
                "out": [name[r] for r in state["replicas"] if r not in state["isr"]],
                "replicas": [name[r] for r in state["replicas"]]}

    def _isr(self, topic: str, p: int) -> list[str]:
        state = self.sim.partition_state(topic, p)
        return [f"broker-{r}" for r in state["isr"]] if state else []

    async def _until(self, condition: Any, timeout_s: float = WAIT_TIMEOUT_S) -> bool:
        end = self.sim.now() + timeout_s
        while self.sim.now() < end:
            if condition():
                return True
            await asyncio.sleep(WAIT_POLL_S)
        return bool(condition())

    async def _protocol_move(self) -> bool:
        """One move, as nemesis/protocol.py's _one_move chooses: from a cluster without faults a sequence two
        times in three (dealt from a shuffled deck), else a single move; a move whose role is missing gives way.
        Whether a fault was started."""
        roles = self._roles()
        if roles is None:
            return False
        self.moves = [t for t in self.moves if not t.done()]
        if self.moves and self.rng.random() < HEAL_SHARE:  # the real nemesis's heal move: the holds end first
            await asyncio.gather(*self.moves)
            self.moves = []
            roles = self._roles()
            if roles is None:
                return False
        healed = not self.held and not self.moves
        if healed and self.rng.random() < SEQUENCE_SHARE:
            if not self.deck:
                self.deck = self.rng.sample(sorted(SEQUENCES), len(SEQUENCES))
            name = self.deck.pop(0)
            return await SEQUENCES[name](self, roles)
        busy = {n for _, n in self.held.values()}
        down = len(self._down_brokers()) >= MAX_DOWN
        options = [(m, n) for m, n in (
            ("kill", roles["leader"]), ("pause", roles["leader"]), ("cut", roles["leader"]),
            *(("partition", f) for f in roles["followers"]), *(("cut", f) for f in roles["followers"]),
            *(("kill", o) for o in roles["out"])) if n not in busy and not (down and m in ("kill", "pause"))]
        if not options:
            return False
        kind, node = options[self.rng.randrange(len(options))]
        self.moves.append(self.sim.loop.create_task(self._hold(kind, node, self.rng.uniform(*MOVE_HOLD_S))))
        return True

    async def _hold(self, kind: str, node: str, seconds: float) -> None:
        peer = CONTROLLERS if kind == "cut" else ""
        rec = self.start(kind, node, peer=peer, by="protocol")
        await asyncio.sleep(seconds)
        self.stop(kind, node, rec)

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

    def start(self, kind: str, node: str, delta_s: float | None = None, peer: str = "", by: str = "") -> Any:
        """Apply one fault and record it (requested, applied, observed); what its stop needs. `delta_s`: a clock
        jump's, given (a replayed schedule's) rather than drawn; `peer`: a cut's; `by`: the nemesis that drew it
        when not the fault's own (a protocol move)."""
        sim, f = self.sim, f"start-{kind}"
        if kind == "cut":
            peer = peer or CONTROLLERS  # drawn: the node cut off from the controllers
        self._op(f, {"node": node, "peer": peer} if peer else {"node": node})
        detail: dict[str, Any] = {}
        if kind == "clock":
            detail["delta_s"] = delta_s if delta_s is not None else round(
                self.rng.choice([-1, 1]) * self.rng.uniform(1, 120), 3)
        if kind == "cut":
            detail["peer"] = peer
        self.recorder.started(kind, node, detail.get("delta_s", 0.0), peer, by)
        # a cut is a partition of one node from some, as the real nemesis records its cuts
        rec = self.ledger.request("partition" if kind == "cut" else kind, [node], by=by or kind, detail=detail or None)
        self.held[rec.id] = (kind, node)
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
        elif kind in ("partition", "cut"):
            self.cuts[rec.id] = self._cut_pairs(node, peer if kind == "cut" else "")
            sim.set_cuts(set().union(*self.cuts.values()))
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
        peer = (rec.detail or {}).get("peer", "") if kind == "cut" else ""
        self._op(f, {"node": node, "peer": peer} if peer else {"node": node})
        self.recorder.stopped(kind, node, peer)
        self.held.pop(rec.id, None)
        if kind in ("kill", "lossy-crash"):
            if not sim.running(node):
                sim.start(node)

            evidence = {"restarted": sim.nodes[node].incarnations}
        elif kind == "pause":
            sim.resume(node)
            evidence = {"process": "running"}
        elif kind in ("partition", "cut"):
            self.cuts.pop(rec.id, None)
            sim.set_cuts(set().union(*self.cuts.values()))
            evidence = {"blocked_pairs": len(sim.net.blocked)}
        else:
            sim.skew_clock(node, 0.0)
            evidence = {"offset_s": 0.0}
        self.ledger.healed(rec, True, evidence)
        self._done(f, {"node": node})

    def _cut_pairs(self, node: str, peer: str) -> set[tuple[str, str]]:
        """The (src, dst) pairs a fault blocks: the node isolated from every node and client (no peer), or cut
        off from its peer (a node, or every controller), both ways."""
        sim = self.sim
        others = ([n for n in list(sim.names) + list(sim.clients) if n != node] if not peer else
                  list(sim.controllers) if peer == CONTROLLERS else [peer])
        return {(node, o) for o in others} | {(o, node) for o in others}

    def final_heal(self) -> None:
        """The run's heal op: every node running and reachable, every clock true again."""
        self._op("heal", None)
        sim = self.sim
        self.cuts.clear()
        self.held.clear()
        sim.heal()
        for name in sim.names:
            sim.resume(name)
            sim.skew_clock(name, 0.0)
            if not sim.running(name):
                sim.start(name)
        for rec in self.ledger.active():
            self.ledger.healed(rec, True, {"by": "final heal"})
        self._done("heal", {"errors": []})


# --- the protocol nemesis's sequences, simulated -------------------------------------------------------------------
# Each follows its scenario in nemesis/scenarios.py with the simulator's faults, its waits polling the active
# controller's metadata (a wait that times out goes on: the sequence's faults are stopped in its order regardless).
async def unclean_election(nem: SimNemesis, roles: dict[str, Any]) -> bool:
    """Scenario unclean-election: a follower S cut off until it leaves the ISR, then the leader and the other
    follower killed; S healed, and only then the killed ones restarted (with unclean.leader.election.enable S
    leads, and the writes acknowledged without it are gone)."""
    if len(roles["followers"]) < 2 or nem.held:
        return False
    topic, p, leader = roles["topic"], roles["partition"], roles["leader"]
    follower, stale = nem.rng.sample(roles["followers"], 2)
    cut = nem.start("partition", stale, by="protocol")
    await nem._until(lambda: stale not in nem._isr(topic, p))
    await asyncio.sleep(nem.rng.uniform(1.0, 3.0))
    killed = [(b, nem.start("kill", b, by="protocol")) for b in (leader, follower)]
    ids = {nem.sim.node_id(b) for b in (leader, follower)}
    await nem._until(lambda: not ids & nem.sim.registered_unfenced())
    nem.stop("partition", stale, cut)
    await asyncio.sleep(nem.rng.uniform(3.0, 8.0))
    for b, rec in killed:
        nem.stop("kill", b, rec)
    return True


async def zombie_follower(nem: SimNemesis, roles: dict[str, Any]) -> bool:
    """Scenario zombie-follower (KAFKA-6880): follower Z cut off from the controllers (fenced, it misses every
    leader change, yet still fetches from leader L); F cut off from L; L paused until F leads, resumed; F killed
    so L leads again and restarted; then Z's cut healed. Without epoch fencing Z splices L's new records after
    its stale ones."""
    if len(roles["followers"]) < 2 or nem.held:
        return False
    topic, p, leader = roles["topic"], roles["partition"], roles["leader"]
    zombie, follower = nem.rng.sample(roles["followers"], 2)
    zcut = nem.start("cut", zombie, peer=CONTROLLERS, by="protocol")
    await nem._until(lambda: zombie not in nem._isr(topic, p))
    fcut = nem.start("cut", follower, peer=leader, by="protocol")
    await asyncio.sleep(3.0)
    paused = nem.start("pause", leader, by="protocol")
    await nem._until(lambda: nem.sim.leader(topic, p) == follower)
    nem.stop("cut", follower, fcut)
    nem.stop("pause", leader, paused)
    await nem._until(lambda: leader in nem._isr(topic, p), 30.0)
    killed = nem.start("kill", follower, by="protocol")
    await nem._until(lambda: nem.sim.leader(topic, p) == leader)
    nem.stop("kill", follower, killed)
    await asyncio.sleep(nem.rng.uniform(2.0, 6.0))
    nem.stop("cut", zombie, zcut)
    return True


SEQUENCES = {"unclean-election": unclean_election, "zombie-follower": zombie_follower}


def sim_problems(spec: TestSpec) -> list[str]:
    """One sentence per setting the simulator cannot run."""
    out = []
    if spec.workload not in WORKLOADS:
        out.append(f"the simulator has clients for the {' and '.join(WORKLOADS)} workloads, not {spec.workload!r}; "
                   "pick one of those, or run it for real with `kafkaesque run`")
    unknown = [n for n in spec.nemesis if n not in SIM_FAULTS]
    if unknown:
        out.append(f"the simulator has no fault {', '.join(unknown)}; its faults: {', '.join(SIM_FAULTS)}")
    if spec.nemesis_schedule not in SIM_SCHEDULES:
        out.append(f"the simulator's fault schedules are {', '.join(SIM_SCHEDULES)}, not {spec.nemesis_schedule!r}")
    if spec.broker.broker_variant != "default" and spec.broker.broker_variant not in FLAW_VARIANTS:
        out.append(f"unknown broker variant {spec.broker.broker_variant!r}")
    if spec.broker.node_code:
        out.append("the simulator runs this tree's broker; --node-code (a mutant's copy) is for real runs")
    return out


def simulate(spec: TestSpec, log: Any = print, mutant: dict[str, str] | None = None,
             schedule: FaultSchedule | None = None, swarm: dict[str, Any] | None = None) -> tuple[int, Path]:
    """Run, store and check one simulated run; (exit status, run dir). `mutant`: the broker loaded is a
    mutant's copy (clusters/sim/mutant.py), {"mutant": its name, "digest": its code's}, kept in test.json.
    `schedule`: the faults to apply, instead of a schedule drawn from the seed. `swarm`: what the seed drew
    under --swarm (harness/sim_swarm.py; its settings already in `spec`), kept in test.json; its BUGGIFY points
    are switched on in the cluster."""
    run_dir = create_run_dir(spec.store, spec.name)
    variant = spec.broker.broker_variant
    sim = SimCluster(spec.seed, n_brokers=spec.brokers, n_controllers=spec.broker.controllers,
                     flush_policy=spec.broker.flush_policy, variants=[variant] if variant in FLAW_VARIANTS else [],
                     broker_config=spec.broker.cluster_spec_fields()["broker_config"], run_dir=str(run_dir),
                     buggify=(swarm or {}).get("buggify"))
    test = spec.to_dict()
    test.update(cluster="sim", simulated=True, run_dir=str(run_dir), nodes=list(sim.names), state_dumps=True,
                protocol_trace=True, **(mutant or {}), **({"swarm": swarm} if swarm is not None else {}))
    write_json(run_dir / "test.json", test)
    log(f"simulated run {run_dir} · seed {spec.seed} · workload {spec.workload} · nemesis "
        f"{','.join(spec.nemesis) or 'none'} · {spec.time_limit:.0f} virtual s")
    if swarm is not None:
        log(f"swarm: {spec.brokers} brokers, {spec.broker.controllers} controller(s), {spec.partitions} partition(s), "
            f"RF {spec.replication_factor}, min ISR {spec.min_isr}, flush {spec.broker.flush_policy}, "
            f"{spec.nemesis_schedule} faults every {spec.nemesis_interval:g} s, clients {swarm['workload_options']}, "
            f"BUGGIFY {swarm['buggify'] or 'none'}")
    writer = HistoryWriter(run_dir / "history.jsonl", start_ns=0, clock_ns=lambda: int(round(sim.now() * 1e9)))
    outcome: dict[str, Any] = {}
    run = applied = None
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
                             spec.nemesis_interval, spec.min_isr, schedule, spec.nemesis_schedule,
                             [(topic, p) for topic, n in run.workload.topics(run.test) for p in range(n)],
                             every_fault_first=swarm is not None)
        main = sim.spawn(clients, run.main_phase())
        faults = sim.loop.create_task(nemesis.play(start + spec.time_limit))
        applied = sim.loop.run_until_complete(asyncio.gather(main, faults))[1]
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
    if applied is not None:
        applied.write(run_dir / SCHEDULE_FILE)
        test["fault_schedule"] = applied.to_dict()
        write_json(run_dir / "test.json", test)
    # exceptions no node's own handler took (the nodes log theirs): a client task's, the simulator's
    warnings = [f"{u.get('process')}: {u.get('message', '')} {u.get('exception', '')}".strip()[:300]
                for u in sim.loop.unhandled]
    facts = {"thread_failures": {}, "cluster": "sim", **outcome}
    results = check_run(run_dir, test, facts, run.workload if run is not None else None)
    results.update(outcome)
    results["simulated"] = True
    if swarm is not None:
        results["buggify_fired"] = dict(sorted(sim.buggify_fired.items()))  # each point switched on: times it fired
    if warnings:
        results["harness_warnings"] = warnings[:50]
    history = read_run_history(run_dir)[0]
    results["availability"] = availability(history, float(spec.time_limit), [])
    write_json(run_dir / "results.json", results)
    try:
        from kafkaesque_harness.results.report import render_report

        render_report(run_dir, history)
    except Exception as e:  # noqa: BLE001 - a report failure never hides the verdict
        log(f"report failed: {e}")
    return (EXIT_HARNESS if "error" in outcome else exit_code(results["valid"])), run_dir

