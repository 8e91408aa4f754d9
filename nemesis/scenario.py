"""Protocol-aware fault scenarios: faults timed against the cluster's own state, as data (issue 8).

Random faults find shallow bugs; the protocol's deep flaws need a fault at the moment the
protocol is weakest: kill the leader just after the ISR shrank to one, power-cut the last
ISR member, restart a follower and kill the leader before it catches up. A scenario is a
list of steps that bind roles to nodes from the cluster's own metadata ("L is partition
0's leader"), act on them (kill, lossy-crash, pause, isolate, controlled stop, restart)
and wait for the protocol to react ("until the ISR is [L]", "until L is fenced"), each
wait with a timeout. It runs inside a normal test: the workload keeps going, every step
is recorded in the history as a nemesis op (`scenario-<step>`, with the nodes and what
was seen), and the run's final heal restarts, resumes and reconnects whatever the
scenario left down.

    kafkaesque run --nemesis scenario:last-replica-standing --cluster docker ...
    kafkaesque run --nemesis scenario:my-scenario.toml ...     # your own, as data (below)

Steps (`Step.do`): bind (a role: leader, follower, successor: the ISR member the controller elects
when the leader goes, any broker, other-leader: the leader of another partition of the topic, held by
no bound name, which becomes the scenario's partition; txn-coordinator and group-coordinator: the
broker coordinating the workload's transactional ids or consumer group, found the way clients find
it, as the leader of the key's __transaction_state or __consumer_offsets partition), wait (a condition on the
partition or a broker: isr-is, in-isr, not-in-isr, leader-is, leader-is-not, no-leader,
has-leader, fenced, unfenced, log-reaches: the node's log end offset has reached each
named node's), kill, lossy-crash, pause, resume, stop (controlled shutdown), start,
isolate (cut one node off from every other), cut (one node from one other, or from the
controllers, both ways), cut-clients (one node from the harness's own clients only, where the cluster
says where they are: ClientCuts), heal (one node's cuts, from its peers and from the clients, or all),
sleep; and two steps on the workload's own clients rather than a node: stall-producer (a client
process stops inside an open transaction for the transaction timeout plus `seconds`; with a node, a
process whose transactional id that broker coordinates: nemesis/actions.py stall_producer,
workloads/stalls.py) and resume-producer (wait until it goes on, and record what its transaction came
to). A wait that times out, or a stall no
process could take, ends the scenario there (recorded, not an error of the run): the protocol did not go
where the scenario needed it, which the detection table counts separately from "no
anomaly".
"""

from __future__ import annotations

import random
from typing import Any

from kafkaesque_harness.history import BEYOND_BUDGET, Op
from kafkaesque_harness.nemesis import grudge
from kafkaesque_harness.nemesis.actions import PROCESS_FAULTS, resumed
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.plan import Plan, PlanStep, Stalled, pause
from kafkaesque_harness.nemesis.requirements import IsolatedNodes, StateDumps, can, steps_refusal
from kafkaesque_harness.nemesis.scenario_steps import (
    ACTIONS,
    CLIENT_ACTIONS,
    CONDITIONS,
    CONTROLLERS,
    COORDINATOR_ROLES,
    ROLES,
    Scenario,
    Step,
    bind,
    load_scenario_file,
)
from kafkaesque_harness.nemesis.scenarios import SCENARIOS


class ScenarioStalled(Stalled):
    """The cluster is not in the state the next step needs (no node holds the role to bind), or cannot
    show it (a wait's condition this cluster does not report)."""


class ScenarioNemesis(NemesisBase):
    """Runs one scenario once, `delay` seconds into the main phase, then lets the workload go on."""

    name = "scenario"

    def __init__(self, scenario: str | Scenario, options: dict[str, Any]):
        if isinstance(scenario, str) and scenario.endswith(".toml"):
            scenario = load_scenario_file(scenario)
        if isinstance(scenario, str) and scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; valid: {', '.join(SCENARIOS)}, or a scenario file "
                             "NAME.toml")
        self.scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.topic = options.get("topic", "queue")
        self.partition = int(options.get("scenario_partition", 0))
        self.delay = float(options.get("scenario_delay", 10.0))
        self.rng = random.Random(options.get("seed", 0))
        self.min_isr = int(options.get("min_isr", 2))
        self.bound: dict[str, str] = {}
        # the workload's coordinated keys, for the coordinator roles (COORDINATOR_ROLES)
        self.keys = {"transactional_ids": list(options.get("transactional_ids") or ()),
                     "groups": list(options.get("groups") or ())}
        self.by = f"scenario:{self.scenario.name}"  # how the ledger knows this scenario's faults

    # --- the Nemesis shape (its plan is its steps: own_plan()) -----------------------------------------
    def pairs(self) -> list[tuple[str, str]]:
        return []

    def fs(self) -> set[str]:
        return {f"scenario-{s.do}" for s in self.scenario.steps}

    def capability_refusal(self, cluster, capabilities) -> str | None:
        """Refused as a whole when a node lacks what one of its steps needs (nemesis/requirements.py)."""
        return steps_refusal(f"scenario {self.scenario.name}", self.scenario.steps, cluster, capabilities)

    def ability_refusal(self, cluster) -> str | None:
        why = self.keys_refusal(self.scenario.name, self.scenario.steps)
        if why:
            return why
        if self.scenario.needs_isolated_nodes and not can(cluster, IsolatedNodes):
            return (f"scenario {self.scenario.name} cuts nodes off or power-cuts them, which needs nodes of their "
                    f"own (--cluster docker, or local as root); {cluster.name} has not")
        return None

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        why = self.stalls_refusal(f"scenario {self.scenario.name}", self.scenario.steps, faults)
        if why:
            raise NemesisRefused(why)
        if self.scenario.needs_isolated_nodes:
            faults.prepare_network()

    @staticmethod
    def stalls_refusal(what: str, steps, faults) -> str | None:
        """Why `what` cannot stall a producer: the run's fault actions were given no producer stalls."""
        return faults.stall_refusal(what) if any(st.do in CLIENT_ACTIONS for st in steps) else None

    def keys_refusal(self, what: str, steps) -> str | None:
        """Why `what` cannot bind its coordinator roles or stall a producer: the workload has no such keys (no
        transactional ids: no transactional producer); or None."""
        if any(st.do in CLIENT_ACTIONS for st in steps) and not self.keys["transactional_ids"]:
            return (f"{what} stalls a transactional producer of the workload, and this workload has none; run it "
                    "with --workload txn")
        for st in steps:
            if st.do == "bind" and st.role in COORDINATOR_ROLES:
                option, _, noun = COORDINATOR_ROLES[st.role]
                if not self.keys[option]:
                    return (f"{what} binds the {st.role}, the coordinator of the workload's {noun}s, and this "
                            f"workload has none; run it with --workload txn"
                            + (" or --workload queue --workload-option queue_mode=subscribe"
                               if st.role == "group-coordinator" else ""))
        return None

    # --- what it has done and not undone: the ledger's records of it ---------------------------------
    def active_nodes(self, kinds: tuple[str, ...]) -> set[str]:
        return {n for r in self.faults.ledger.active(kinds, by=self.by) for n in r.nodes}

    def down_nodes(self) -> set[str]:
        """Killed, stopped or power-cut, and not started again."""
        return self.active_nodes(PROCESS_FAULTS)

    def cut_off(self) -> bool:
        return bool(self.active_nodes(("partition",)))

    def invoke(self, cluster, op: Op) -> Op:
        raise ValueError("a scenario runs as a whole through its plan (own_plan()), not op by op")

    def own_plan(self, cluster) -> Plan:
        """The steps in order, `delay` seconds into the main phase, each decided when the one before it
        has ended. It ends early when a step fails (a wait that stalls): the rest needs that step. A
        sleep is a pause of the plan, not an op: random faults running beside the scenario may land in
        it, and the steps the history counts ("step i of n") are the others."""
        recorded = [s for s in self.scenario.steps if s.do != "sleep"]
        yield pause(self.delay)
        i = 0
        for step in self.scenario.steps:
            if step.do == "sleep":
                yield self.plan_step(cluster, step, {})
                continue
            i += 1
            # "step i of n" lets a stored run show whether the scenario ran to its end (checkers/evidence.py)
            value = {**self._describe(step), "step": i, "steps": len(recorded)}
            try:
                yield self.plan_step(cluster, step, value)
            except Exception:  # noqa: BLE001 - recorded as the step's error; the rest needs this step
                return

    # How long a bind waits for a node that holds its role and is up (another fault, a random kill beside the
    # scenario, may hold that node down right now); 0: a bind that finds none fails at once.
    bind_wait_s = 30.0

    def plan_step(self, cluster, step: Step, value: dict[str, Any]) -> PlanStep:
        """One step of the scenario language as a step of the plan: a sleep is a pause, a wait holds until its
        condition holds (at most its timeout), a bind until a live node holds the role; every other step is
        an act."""
        f = f"scenario-{step.do}"
        if step.do == "sleep":
            return pause(step.seconds)
        if step.do == "wait":
            return PlanStep(f, value, until=lambda: self._reached(cluster, step), timeout=step.seconds,
                            what=f"{step.until} {step.node or list(step.nodes)}")
        if step.do == "bind" and self.bind_wait_s > 0:
            return PlanStep(f, value, until=lambda: self._bound(cluster, step), timeout=self.bind_wait_s,
                            what=f"a live {step.role} to bind as {step.node}")
        return PlanStep(f, value, lambda: self._perform(cluster, step))

    # --- steps ------------------------------------------------------------------------------------------
    def _describe(self, step: Step) -> dict[str, Any]:
        d: dict[str, Any] = {"scenario": self.scenario.name}
        for k in ("node", "role", "until", "peer"):
            if getattr(step, k):
                d[k] = getattr(step, k)
        if step.nodes:
            d["nodes"] = list(step.nodes)
        if step.do == "wait":
            d["seconds"] = step.seconds
        if step.do == "stall-producer":
            d["past_txn_timeout_s"] = step.seconds
        return d

    def node(self, name: str) -> str:
        return self.bound.get(name, name)

    def _perform(self, cluster, step: Step) -> Any:
        if step.do == "bind":
            node = self._choose(cluster, step.role)
            self.bound[step.node] = node
            return {step.node: node}
        if step.do == "stall-producer":
            return self._stall_producer(cluster, step)
        if step.do == "resume-producer":
            return {"resumed": resumed(self.faults.resume_producers(by=self.by))}
        node = self.node(step.node) if step.node else ""
        if step.do == "kill":
            self.faults.kill(node, self.by)
        elif step.do == "lossy-crash":
            from kafkaesque_harness.nemesis.faults import beyond_fault_budget

            rec = self.faults.lossy_crash(node, self.by)
            out = {"lossy-crash": node, "dropped": rec.evidence.get("lossyfs")}
            brokers_cut = self.active_nodes(("lossy-crash",)) & set(cluster.broker_nodes())  # a controller's is no replica's
            if node in brokers_cut and beyond_fault_budget(len(brokers_cut), self.min_isr):
                # More power cuts at once than the durability contract covers (001: n-1 replicas):
                # what was acknowledged before may be gone (checkers/queue.py counts it apart).
                out[BEYOND_BUDGET] = True
            return out
        elif step.do == "pause":
            self.faults.pause(node, self.by)
        elif step.do == "resume":
            self.faults.resume(node)
        elif step.do == "stop":
            self.faults.stop(node, self.by)
        elif step.do == "start":
            self.faults.start(node)
        elif step.do == "isolate":
            self.faults.cut(grudge.isolate(cluster.nodes(), node), self.by, nodes=[node])
        elif step.do == "cut-clients":
            rec = self.faults.cut_clients(node, self.by)
            return {"cut": node, "from": "clients", "address": rec.detail.get("clients")}
        elif step.do == "cut":
            peers = [p for p in (cluster.controller_nodes() if step.peer == CONTROLLERS else [self.node(step.peer)])
                     if p != node]
            g: grudge.Grudge = {node: set(peers), **{p: {node} for p in peers}}
            self.faults.cut(g, self.by, nodes=[node, *peers])
            return {"cut": node, "from": sorted(peers)}
        elif step.do == "heal":
            # One node: its isolation and every cut it is part of; no node: everything the scenario cut.
            healed = self.faults.heal_cuts(node=node or None, by=self.by)
            healed += self.faults.heal_client_cuts(node=node or None, by=self.by)
            return {"healed": ([node] if healed else []) if node else sorted({n for r in healed for n in r.nodes})}
        else:
            raise ValueError(f"unknown scenario step {step.do!r}; valid: bind, wait, sleep, {', '.join(ACTIONS)}")
        return {step.do: node}

    def _stall_producer(self, cluster, step: Step) -> dict[str, Any]:
        """Stall a client producer for the transaction timeout plus `step.seconds`: with a node, one whose
        transactional id that broker coordinates now. A stall no process took ends the scenario here."""
        from kafkaesque_harness.nemesis.targets import coordinator_node

        ids, detail = None, {}
        if step.node:
            node = self.node(step.node)
            ids = [k for k in self.keys["transactional_ids"]
                   if coordinator_node(cluster, COORDINATOR_ROLES["txn-coordinator"][1], k) == node]
            if not ids:
                raise ScenarioStalled(f"{node} coordinates none of the workload's transactional ids now")
            detail = {"coordinator": node}
        seconds = round(self.faults.txn_timeout_s + step.seconds, 3)
        rec = self.faults.stall_producer(seconds, self.by, transactional_ids=ids, detail=detail)
        if not rec.applied:
            raise ScenarioStalled(rec.apply_error or "the stall was not applied")
        return {"stalled": {k: v for k, v in rec.evidence.items() if k != "txn_timeout_s"}, "seconds": seconds}

    def _choose(self, cluster, role: str) -> str:
        p = self._partition(cluster)
        taken = set(self.bound.values())
        if role == "leader":
            if p is None or p.leader < 0:
                raise ScenarioStalled(f"partition {self.partition} has no leader to bind")
            return cluster.node_name(p.leader)
        if role == "follower":
            followers = [cluster.node_name(r) for r in (p.replicas if p else []) if r != p.leader]
            free = [n for n in followers if n not in taken]
            if not free:
                raise ScenarioStalled("no unbound follower left")
            return self.rng.choice(sorted(free))
        if role == "successor":
            # The controller elects the first eligible ISR member in replica order (controller.py
            # _choose_leader): that one, or none if it is already bound (a later one would not be elected).
            nxt = [r for r in (p.replicas if p else []) if p and r in p.isr and r != p.leader]
            if not nxt or cluster.node_name(nxt[0]) in taken:
                raise ScenarioStalled("no unbound successor in the ISR")
            return cluster.node_name(nxt[0])
        if role == "broker":
            return self.rng.choice(sorted(n for n in cluster.broker_nodes() if n not in taken))
        if role == "other-leader":
            held = [q for q in cluster.partitions(self.topic)
                    if q.leader >= 0 and cluster.node_name(q.leader) not in taken]
            if not held:
                raise ScenarioStalled(f"no partition of {self.topic} has a leader that no bound name holds")
            q = self.rng.choice(sorted(held, key=lambda q: q.partition))
            self.partition = q.partition  # the later steps and waits are about this partition
            return cluster.node_name(q.leader)
        if role in COORDINATOR_ROLES:
            return self._coordinator(cluster, role, taken)
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")

    def _coordinator(self, cluster, role: str, taken: set[str]) -> str:
        """The broker coordinating the most of the workload's keys (ties drawn), down or paused ones aside."""
        from kafkaesque_harness.nemesis.targets import coordinator_node

        option, topic, noun = COORDINATOR_ROLES[role]
        if not self.keys[option]:
            raise ValueError(self.keys_refusal(f"scenario {self.scenario.name}", [bind("X", role)]))
        out = taken | self.down_nodes() | self.active_nodes(("pause",))
        counts: dict[str, int] = {}
        for key in self.keys[option]:
            node = coordinator_node(cluster, topic, key)
            if node is not None and node not in out:
                counts[node] = counts.get(node, 0) + 1
        if not counts:
            raise ScenarioStalled(f"no {noun} of the workload has a coordinator right now ({topic} has no "
                                  "leader for it, or does not exist yet)")
        most = max(counts.values())
        return self.rng.choice(sorted(n for n, k in counts.items() if k == most))

    def _partition(self, cluster):
        for p in cluster.partitions(self.topic):
            if p.partition == self.partition:
                return p
        return None

    def _holds(self, cluster, step: Step) -> tuple[bool, dict[str, Any]]:
        if step.until in ("fenced", "unfenced"):
            fenced = cluster.node_id(self.node(step.node)) in cluster.fenced_brokers()
            return fenced == (step.until == "fenced"), {"fenced": fenced}
        if step.until == "log-reaches":
            leos = {n: self._leo(cluster, self.node(n)) for n in (step.node, *step.nodes)}
            mine = leos.pop(step.node)
            return mine is not None and all(o is not None and mine >= o for o in leos.values()), {"leo": {
                self.node(step.node): mine, **{self.node(n): o for n, o in leos.items()}}}
        p = self._partition(cluster)
        if p is None:
            return False, {}
        isr = sorted(cluster.node_name(r) for r in p.isr)
        leader = cluster.node_name(p.leader) if p.leader >= 0 else None
        seen = {"leader": leader, "isr": isr}
        node = self.node(step.node) if step.node else None
        holds = {
            "isr-is": lambda: isr == sorted(self.node(n) for n in step.nodes),
            "in-isr": lambda: node in isr,
            "not-in-isr": lambda: node not in isr,
            "leader-is": lambda: leader == node,
            "leader-is-not": lambda: leader is not None and leader != node,
            "no-leader": lambda: leader is None,
            "has-leader": lambda: leader is not None,
        }.get(step.until)
        if holds is None:
            raise ValueError(f"unknown condition {step.until!r}; valid: {', '.join(CONDITIONS)}")
        return holds(), seen

    def _leo(self, cluster, node: str) -> int | None:
        """The node's log end offset for the scenario's partition, from its own state dump. A cluster we
        did not build has none (the Kafka protocol tells a replica's end offset only to its leader)."""
        if not can(cluster, StateDumps):
            raise ScenarioStalled(f"the {cluster.name} cluster reports no replica's log end offset (no state "
                                  "dumps); log-reaches needs the reference broker")
        state = cluster.dump_state(node, include_log=False) or {}
        for p in state.get("partitions", []):
            if p.get("topic") == self.topic and p.get("partition") == self.partition:
                return int(p["leo"])
        return None

    def _bound(self, cluster, step: Step) -> tuple[bool, dict[str, Any]]:
        """A bind, as the plan asks it: the role's node, once one holds it that no fault (the scenario's or
        another part's) holds down or paused."""
        try:
            node = self._choose(cluster, step.role)
        except ScenarioStalled as e:
            return False, {"why": str(e)}
        held = {n for r in self.faults.ledger.active((*PROCESS_FAULTS, "pause")) for n in r.nodes}
        if node in held:
            return False, {step.role: node, "why": f"{node} is down or paused by a fault"}
        self.bound[step.node] = node
        return True, {step.node: node}

    def _reached(self, cluster, step: Step) -> tuple[bool, dict[str, Any]]:
        """A wait's condition, as the plan asks it: (reached, the completion's value or what was seen)."""
        ok, seen = self._holds(cluster, step)
        return ok, ({"reached": True, **seen} if ok else seen)

    def teardown(self, cluster) -> list[str]:
        """Reconnect, resume and restart everything the scenario left down; every part is tried."""
        errors = self.faults.heal(by=self.by) if self.faults is not None else []
        if errors:
            raise RuntimeError("scenario teardown: " + "; ".join(errors))
        return []
