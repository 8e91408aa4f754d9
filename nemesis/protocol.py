"""The protocol-aware random nemesis (`--nemesis protocol`, issue 8 item 2).

A plain random nemesis hits random nodes at random times; the protocol's deep flaws need a
fault that lands on a role at the moment that role matters. This one is still random, but
it draws from role-aware moves, each aimed by the cluster's own metadata for a random
partition of the test topic:

  kill-leader               SIGKILL the partition's leader
  isolate-follower          cut an in-sync follower off (it falls out of the ISR; the others
                            keep acknowledging without it)
  lossy-crash-last-isr      power-cut a broker that is alone in some partition's ISR
  kill-catching-up          SIGKILL a replica that is outside the ISR (restarting, lagging)
  pause-leader              SIGSTOP the leader until another is elected, then SIGCONT it
  pause-controller          SIGSTOP the active controller past the brokers' session timeout
                            (on resuming it may fence brokers whose heartbeats it missed)
  power-cut-controller      SIGKILL the active controller, drop every metadata byte it had not
                            fsynced, restart it: what it answered or served must survive (002
                            1.2.1); only where the controllers write through the lossy file system
  cut-leader-from-controllers
                            the controller fences the leader and elects another, while the
                            old one still serves its followers and clients (a zombie leader)
  cut-follower-from-controllers
                            an in-sync follower misses every metadata change from now on but
                            still fetches from the leader it knew (a zombie follower)
  bounce-follower-then-kill-leader
                            restart a follower (controlled) and kill the leader before it
                            has caught up
  kill-txn-coordinator      SIGKILL the transaction coordinator of the workload's transactional ids
                            (the leader of their __transaction_state partition) while its
                            transactions commit
  isolate-txn-coordinator   cut that coordinator off from every other node mid-commit (its
                            transaction state records cannot reach the ISR; another takes over)
  cut-txn-coordinator-from-leader
                            cut the coordinator off from the leader of a partition the
                            transactions write to: their markers there are late
  pause-leader-past-txn-timeout
                            SIGSTOP a partition leader (not the coordinator) for 12 s, past the
                            workload's default transaction timeout: it loses its leadership, the
                            producers' own delivery timeouts abort the transactions writing there
                            (their markers go to its successor), and it resumes with their produces
                            queued (the coordinator itself times nothing out here)
  stall-producer-past-txn-timeout
                            one of the workload's client processes stops inside an open transaction
                            for its transaction timeout plus 3 s, then goes on with it: the
                            coordinator aborts the transaction on its timeout and must fence the
                            producer (a bumped epoch), so what it sends after resuming is refused
  kill-group-coordinator    SIGKILL the coordinator of the workload's consumer group
  cut-group-coordinator-from-clients
                            cut the group's coordinator off from the harness's clients only, for 10 s
                            (past the members' 6 s session): it expires every member while it stays up
                            and leads; healed, the members commit with the generation that ended and
                            join again
  move-group-coordinator-mid-commit
                            SIGTERM the group's coordinator (a controlled shutdown moves its
                            __consumer_offsets leadership while the consumers commit after every poll),
                            restart it 3 s later
  move-txn-coordinator-mid-transaction
                            the same for the transaction coordinator of the workload's transactional ids,
                            with transactions open
  heal                      reconnect, resume and restart everything
  sequence:<scenario>       one of the flaw sequences of nemesis/scenario.py (004's unclean
                            election and HW truncation, 002's last replica standing, 001's
                            ELR recovery, the zombie leader, KAFKA-6880's zombie
                            follower, KAFKA-6361's fast failover, and stop-follower-then-elect: SIGTERM an
                            in-sync follower, then SIGKILL the leader so the partition elects without
                            it, the follower restarting once a new leader is in), on a random partition, from a
                            healed cluster only: two thirds of the moves drawn after a heal
                            are one, dealt from a shuffled deck so that every sequence runs
                            once before any runs again; with a workload of transactions or
                            groups (--workload txn, queue in subscribe mode) also the
                            coordinator scenarios: txn-coordinator-killed-mid-commit,
                            producer-paused-past-txn-timeout, late-txn-markers,
                            group-coordinator-fails-over
The coordinator moves and sequences are there only when the workload has transactional ids or a
consumer group (the runner passes them), and the stall only when its clients can stall (the txn
workload); a queue run in assign mode draws no coordinator move (since issue 40 its deck holds one more
sequence, stop-follower-then-elect).

Faults accumulate between heals (a follower stays cut off while the leader is killed),
which is what turns single faults into the sequences of 004 and 001. A move whose role
is missing right now (no partition with a lone ISR member) is skipped for another. Every
step is recorded like a scenario's (`scenario-<step>` ops, with the move's name), and the
run's final heal undoes everything.
"""

from __future__ import annotations

from typing import Any

from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.plan import Plan, Stalled, pause
from kafkaesque_harness.nemesis.requirements import (
    ClientCuts,
    IsolatedNodes,
    LossyControllers,
    can,
    steps_refusal,
    why_not,
)
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis, ScenarioStalled
from kafkaesque_harness.nemesis.scenario_steps import (
    CLIENT_ACTIONS,
    CONTROLLERS,
    COORDINATOR_ROLES,
    Scenario,
    Step,
    act,
    bind,
    cut,
    sleep,
    stall_producer,
    wait,
)
from kafkaesque_harness.nemesis.scenarios import SCENARIOS

MEMBERS_GONE_S = 10  # past the workloads' consumer session timeout (6 s) and the coordinator's next tick

MOVES: dict[str, tuple[Step, ...]] = {
    "kill-leader": (bind("L", "leader"), act("kill", "L")),
    "isolate-follower": (bind("F", "in-sync-follower"), act("isolate", "F")),
    "lossy-crash-last-isr": (bind("X", "last-isr"), act("lossy-crash", "X")),
    "kill-catching-up": (bind("C", "out-of-sync"), act("kill", "C")),
    "pause-leader": (bind("L", "leader"), act("pause", "L"), wait("leader-is-not", "L", timeout=15),
                     act("resume", "L")),
    "bounce-follower-then-kill-leader": (bind("L", "leader"), bind("F", "in-sync-follower"), act("stop", "F"),
                                         act("start", "F"), act("kill", "L")),
    "pause-controller": (bind("K", "controller"), act("pause", "K"), sleep(4), act("resume", "K")),
    "power-cut-controller": (bind("K", "controller"), act("lossy-crash", "K"), sleep(1), act("start", "K")),
    "cut-leader-from-controllers": (bind("L", "leader"), cut("L", CONTROLLERS)),
    "cut-follower-from-controllers": (bind("Z", "in-sync-follower"), cut("Z", CONTROLLERS)),
    "kill-txn-coordinator": (bind("C", "txn-coordinator"), act("kill", "C")),
    "isolate-txn-coordinator": (bind("C", "txn-coordinator"), act("isolate", "C")),
    "cut-txn-coordinator-from-leader": (bind("C", "txn-coordinator"), bind("L", "other-leader"), cut("C", "L")),
    # 12 s: past the txn workload's default transaction timeout (10 s), so the pause outlasts transactions
    "pause-leader-past-txn-timeout": (bind("L", "other-leader"), act("pause", "L"), sleep(12), act("resume", "L")),
    # any process holding an open transaction, as a GC pause would stop it; drawn like every single move
    "stall-producer-past-txn-timeout": (stall_producer(), act("resume-producer")),
    "kill-group-coordinator": (bind("G", "group-coordinator"), act("kill", "G")),
    # Issue 40: the coordinators moved by a controlled shutdown (SIGTERM): the controller moves the leadership of
    # their internal partitions while the broker still runs, so requests in flight (the consumers' synchronous
    # commits after every poll, the producers' open transactions) meet a coordinator that hands over rather
    # than one that vanishes; the broker comes back 3 s later (a clean restart, its epoch kept).
    "move-group-coordinator-mid-commit": (bind("G", "group-coordinator"), act("stop", "G"), sleep(3),
                                          act("start", "G")),
    "move-txn-coordinator-mid-transaction": (bind("C", "txn-coordinator"), act("stop", "C"), sleep(3),
                                             act("start", "C")),
    # A rebalance while the coordinator stays up: the group's coordinator is cut off from the harness's clients
    # (not from its peers: it keeps leading) past the members' session timeout (6 s, both client libraries), so
    # it expires every member and the group empties; healed, the members' next commits carry the generation
    # that ended, and they join again (a new generation).
    "cut-group-coordinator-from-clients": (bind("G", "group-coordinator"), act("cut-clients", "G"),
                                           sleep(MEMBERS_GONE_S), act("heal", "G")),
    "heal": (act("heal"), act("start-all"), act("resume-all")),
}
# The single moves find shallow bugs; the deep ones of 004, 001 and 002 take a fault timed
# against the state another fault created (the ISR shrinks, then its last member dies). In
# 5-minute runs the single moves rarely lined those up (the unclean election was never found in
# the first measurements, docs/DETECTION.md), so the flaw sequences are moves too. Balanced recovery is
# not one: its two power cuts are beyond the fault budget, so its losses would not be findings.
SCENARIO_SEQUENCES = ("unclean-election", "hw-truncation-then-election", "last-replica-standing",
                      "elr-clean-recovery", "zombie-leader", "zombie-follower")
SEQUENCE_PREFIX = "sequence:"
# The coordinators' sequences (issue 25): in the moves only when the workload has the keys they bind.
COORDINATOR_SEQUENCES = ("txn-coordinator-killed-mid-commit", "producer-paused-past-txn-timeout", "late-txn-markers",
                         "group-coordinator-fails-over")
MOVES.update({SEQUENCE_PREFIX + name: SCENARIOS[name].steps for name in SCENARIO_SEQUENCES + COORDINATOR_SEQUENCES})
# PROTOCOL.md 9.3 (KAFKA-6361, KIP-279), a sequence of this nemesis only (no broker variant targets it, so it
# is not in the detection matrix): the successor A is cut off from the leader L and the other follower C, so
# it falls behind while it still heartbeats (it stays in the ISR for the replica lag time, 5 s; a pause would
# fence it once a loaded machine makes the steps slow); L dies, A leads with the shorter log of L's epoch and
# appends in its own, which C never fetches; A is cut off and C leads. Back as C's follower, A must cut at its
# own end of L's epoch, below what C holds of it; cutting at C's end of that epoch keeps A's records where C
# has L's. Nothing A appended was acknowledged (C never fetched it), so the correct broker loses nothing.
FAST_FAILOVER = "lagging-leader-then-failover"
MOVES[SEQUENCE_PREFIX + FAST_FAILOVER] = (
    bind("L", "leader"), bind("A", "successor"), bind("C", "follower"),
    cut("A", "L"), cut("A", "C"), sleep(1), act("kill", "L"),
    wait("leader-is", "A"), sleep(2),
    act("isolate", "A"), wait("leader-is", "C"),
    act("heal"), act("start", "L"), wait("in-isr", "A", timeout=60))
# Issue 40: a controlled shutdown (SIGTERM) of an in-sync follower, then an election without it (the leader
# killed): its clean shutdown keeps it eligible (ELR) while it is down, and it comes back registered clean
# (PROTOCOL.md 5.1-5.2, 6). A sequence, from a healed cluster only: it has two brokers down at its peak.
STOP_THEN_ELECT = "stop-follower-then-elect"
MOVES[SEQUENCE_PREFIX + STOP_THEN_ELECT] = (
    bind("L", "leader"), bind("F", "in-sync-follower"), act("stop", "F"), act("kill", "L"),
    wait("leader-is-not", "L", timeout=15), act("start", "F"))
NEEDS_ISOLATED_NODES = {"isolate-follower", "lossy-crash-last-isr", "cut-leader-from-controllers",
                        "cut-follower-from-controllers", "power-cut-controller", "isolate-txn-coordinator",
                        "cut-txn-coordinator-from-leader", "cut-group-coordinator-from-clients",
                        SEQUENCE_PREFIX + FAST_FAILOVER} | {
    SEQUENCE_PREFIX + name for name in SCENARIO_SEQUENCES + COORDINATOR_SEQUENCES
    if SCENARIOS[name].needs_isolated_nodes}
SEQUENCES = (*SCENARIO_SEQUENCES, FAST_FAILOVER, STOP_THEN_ELECT)
MAX_DOWN = 2  # brokers down at once before a heal is forced (a quorum of 3 can still elect)
# After a heal, the share of moves that are a flaw sequence. The single moves find shallow bugs
# on their own and pile up between heals; the sequences are what reaches the deep flaws, and a
# 5-minute run has room for about ten of them (each takes 15-40 s).
SEQUENCE_SHARE = 2 / 3
# The moves aimed at the workload's coordinators (issue 40): those that bind a coordinator or stall a producer
# mid-transaction, and, with transactional ids, the pause of a leader past the transaction timeout. With
# `protocol_moves=coordinator` they (and heal) are the only moves: in a 2-minute run the whole deck deals about
# five sequences, and with one seed the same five every run, none of them a coordinator's (the first groups runs
# of docs/MUTATION-notes.md).
COORDINATOR_MOVES = frozenset(
    m for m, steps in MOVES.items()
    if any((s.do == "bind" and s.role in COORDINATOR_ROLES) or s.do in CLIENT_ACTIONS for s in steps))
PAST_TXN_TIMEOUT_MOVES = frozenset({"pause-leader-past-txn-timeout"})  # aimed at transactions, bound to no key


class ProtocolNemesis(ScenarioNemesis):
    name = "protocol"
    bind_wait_s = 0.0  # a move whose role is absent gives way to another move at once

    def __init__(self, options: dict[str, Any]):
        super().__init__(Scenario("protocol", __doc__ or "", (), needs_isolated_nodes=False), options)
        self.by = "protocol"
        self.interval = float(options.get("interval", 10.0))
        # the coordinator moves only when the workload has the keys they aim at (keys_refusal)
        self.moves = {m: steps for m, steps in MOVES.items() if self.keys_refusal(m, steps) is None}
        if options.get("protocol_moves", "all") == "coordinator":
            aimed = COORDINATOR_MOVES | (PAST_TXN_TIMEOUT_MOVES if self.keys["transactional_ids"] else frozenset())
            self.moves = {m: steps for m, steps in self.moves.items() if m in aimed or m == "heal"}
        self.deck: list[str] = []  # the sequences not yet run in this round, in the order they come
        self.left_out: dict[str, str] = {}  # move -> why the nodes cannot do it

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        for m in [m for m, steps in self.moves.items() if self.stalls_refusal(f"move {m}", steps, faults)]:
            del self.moves[m]  # the workload's clients cannot stall (no transactional producer): not a move here
        if can(cluster, IsolatedNodes):
            faults.prepare_network()
        else:  # a loopback cluster: the moves that need a node's own network or disk are left out
            for m in NEEDS_ISOLATED_NODES:
                self.moves.pop(m, None)
        why = why_not(cluster, ClientCuts)
        for m in [m for m, steps in self.moves.items() if any(s.do == "cut-clients" for s in steps)] if why else []:
            self.left_out[m] = f"move {m} cannot run: {why}"
            del self.moves[m]
        why = why_not(cluster, LossyControllers)
        if why and "power-cut-controller" in self.moves:  # brokers alone on the lossy file system (docker, SSH)
            self.left_out["power-cut-controller"] = f"move power-cut-controller cannot run: {why}"
            del self.moves["power-cut-controller"]
        caps = cluster.capabilities
        if caps:  # and the moves whose steps a node cannot do (the set-up probe's table)
            for m in [m for m in self.moves if m != "heal"]:
                why = steps_refusal(f"move {m}", self.moves[m], cluster, caps)
                if why:
                    self.left_out[m] = why
                    del self.moves[m]
        if not any(m != "heal" for m in self.moves):
            raise NemesisRefused("the protocol nemesis has no move left that these nodes can do: "
                                 + next(iter(self.left_out.values()), "no moves"))

    def capability_refusal(self, cluster, capabilities) -> str | None:
        return None  # not as a whole: setup leaves out the moves the nodes cannot do

    @property
    def not_run(self) -> list[str]:
        """The moves left out for what the nodes lack (results.json `faults_not_run`)."""
        return list(self.left_out.values())

    def fs(self) -> set[str]:
        return {f"scenario-{s.do}" for steps in MOVES.values() for s in steps}

    def own_plan(self, cluster) -> Plan:
        """One move after another, `interval` seconds apart on average, until the run stops (the scheduler
        begins no step at or after the time limit). Each move is chosen when it is due, against the
        cluster as it is then."""
        wait_s = self.delay
        while True:
            yield pause(wait_s)
            yield from self._one_move(cluster)
            wait_s = self.rng.uniform(self.interval / 2, self.interval)

    def _down(self) -> int:
        return len(self.down_nodes() | self.active_nodes(("pause",)))

    def _one_move(self, cluster) -> Plan:
        singles = sorted(m for m in self.moves if not m.startswith(SEQUENCE_PREFIX))
        sequences = sorted(m for m in self.moves if m.startswith(SEQUENCE_PREFIX))
        down, cut_off = self._down(), self.cut_off()
        healed = down == 0 and not cut_off
        if down >= MAX_DOWN or (cut_off and down >= 1 and self.rng.random() < 0.3):
            names = ["heal"]
        elif healed and sequences and self.rng.random() < SEQUENCE_SHARE:
            # A sequence starts from a healed cluster (its roles are the partition's, all up). Dealt
            # from a shuffled deck: each sequence once per round, so none waits on luck for its
            # turn. If a sequence's first role is missing now, the next one goes, then single moves.
            if not self.deck:
                self.deck = self.rng.sample(sequences, len(sequences))
            names = list(self.deck) + self.rng.sample(singles, len(singles))
        else:
            names = self.rng.sample(singles, len(singles))
        for move in names:
            partitions = cluster.partitions(self.topic)
            if not partitions:
                return
            self.partition = self.rng.choice(partitions).partition
            self.bound = {}
            try:
                for step in self.moves[move]:
                    value = {**self._describe(step), "move": move, "partition": self.partition}
                    yield self.plan_step(cluster, step, value)
                    if move in self.deck and self.bound:
                        self.deck.remove(move)  # it has begun: its turn in this round is taken
                return
            except Stalled:  # a role to bind absent, or a wait not reached
                if self.bound:  # the move had begun: its recorded steps stand, try nothing else now
                    return
                continue  # its role is absent right now: another move
            except Exception:  # noqa: BLE001 - recorded as the step's error; heal at the end regardless
                return

    def _perform(self, cluster, step: Step) -> Any:
        if step.do == "start-all":
            started = sorted(self.down_nodes())
            for n in started:
                self.faults.start(n)
            return {"started": started}
        if step.do == "resume-all":
            resumed = sorted(self.active_nodes(("pause",)))
            for n in resumed:
                self.faults.resume(n)
            return {"resumed": resumed}
        return super()._perform(cluster, step)

    def _choose(self, cluster, role: str) -> str:
        p = self._partition(cluster)
        if p is None:
            raise ScenarioStalled("no such partition")
        taken = set(self.bound.values()) | self.down_nodes() | self.active_nodes(("pause",))
        names = {r: cluster.node_name(r) for r in p.replicas}
        cut_off = self.active_nodes(("partition",))
        if role == "controller":
            active = cluster.active_controller()
            pool = [active] if active else cluster.controller_nodes()[:1]
        elif role == "in-sync-follower":
            pool = [names[r] for r in p.isr if r != p.leader and names[r] not in cut_off]
        elif role == "out-of-sync":
            pool = [names[r] for r in p.replicas if r not in p.isr]
        elif role == "last-isr":
            lone = [q.isr[0] for q in cluster.partitions(self.topic) if len(q.isr) == 1]
            pool = [cluster.node_name(r) for r in lone]
        else:
            return super()._choose(cluster, role)
        pool = sorted(n for n in set(pool) if n not in taken)
        if not pool:
            raise ScenarioStalled(f"no {role} right now")
        return self.rng.choice(pool)

