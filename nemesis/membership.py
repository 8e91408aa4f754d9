"""Membership faults (issue 9 item 4): the cluster changes shape under load.

`--nemesis membership` picks, at each start, one of:

- remove-broker: decommission a running broker as an operator would (003, "Take brokers
  offline"): the coordinator (clusters/broker/membership.py) reassigns its replicas to the
  others, then the broker is stopped, unregistered and its disk wiped. Its stop adds it back
  as a new, empty broker and rebalances replicas onto it (003, "Incrementally add brokers
  online"): every partition it gets is copied to it from scratch.
- reassign: move one partition to another replica set (PROTOCOL.md 7). With spare brokers,
  a random set of the same size; without (brokers == replication factor), the set minus one
  replica, as long as min ISR still fits, so the stop's rebalance has to grow it back.
  Either may remove the leader.
- preferred-election: move every partition's leadership back to its preferred replica (000's
  checkLoadBalancing).

The stop undoes the shape change (re-add, rebalance to the full replication factor, preferred
leaders). A change that has not completed within its wait is recorded as such and left
running in the cluster; the next stop or the teardown settles it. Membership changes need the
reference broker's controller; other clusters are refused by name.

Each move is a fault of kind `membership` in the run's ledger: applied when the controller
took it, observed when it completed (the reassignment done, the broker stopped and
unregistered, the leaders elected), healed when the stop's rebalance completed. The broker
a decommission stops is a `stop` fault of its own, healed when it is started again.
"""

from __future__ import annotations

import random
from typing import Any

from kafkaesque_harness.history import INFO, Op
from kafkaesque_harness.nemesis.base import NemesisBase
from kafkaesque_harness.nemesis.targets import running_brokers

MOVES = ("remove-broker", "reassign", "preferred-election")
WAIT_S = 15.0  # how long a move waits for its reassignments before recording them as still running
HEAL_WAIT_S = 60.0


class MembershipNemesis(NemesisBase):
    name, start_f, stop_f = "membership", "start-membership", "stop-membership"
    # Re-adding a broker waits for reassignments, which need every other broker back: the
    # composite heals this part after the process and network faults.
    heal_last = True

    def __init__(self, options: dict[str, Any]):
        self.rng = random.Random(options.get("seed", 0) + 17)
        self.removed: str | None = None  # the decommissioned broker, stopped and wiped
        self.unsettled = False  # a move's reassignments did not complete in time

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)

    def _call(self, cluster):
        return lambda api, body: cluster.controller_call(api, body)

    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, self._heal(cluster, HEAL_WAIT_S / 2))
        if op.f != self.start_f:
            raise ValueError(f"membership nemesis cannot do {op.f!r}")
        if self.removed or self.unsettled:
            self._heal(cluster, WAIT_S)  # one shape change at a time
        move = self.rng.choice(MOVES)
        ledger = self.faults.ledger
        rec = ledger.request("membership", [], self.name, {"move": move})
        try:
            value = getattr(self, "_" + move.replace("-", "_"))(cluster)
        except Exception as e:  # noqa: BLE001 - a refused or failed change is a result, not a crash
            value = {"error": f"{type(e).__name__}: {e}"}
        why_not = value.get("error") or value.get("skipped") or value.get("refused")
        ledger.applied(rec, not why_not, str(why_not) if why_not else None)
        if not why_not:
            done = value.get("completed", True) if move != "remove-broker" else value.get("unregistered", False)
            ledger.observed(rec, bool(done), value, f"the {move} did not complete within its wait")
        return Op(INFO, op.f, op.process, {"move": move, **value})

    # --- moves -----------------------------------------------------------------------------------
    def _remove_broker(self, cluster) -> dict[str, Any]:
        from kafkaesque_harness.clusters.broker import alter_cluster, unregister

        candidates = running_brokers(cluster)
        if len(candidates) < 2:
            return {"skipped": "fewer than two brokers are running"}
        node = self.rng.choice(candidates)
        bid = cluster.node_id(node)
        result = alter_cluster(self._call(cluster), remove=[bid], wait_s=WAIT_S)
        value = {"broker": node, "reassigned": len(result["reassigned"]),
                 "moved_replicas": result["moved_replicas"], "completed": result["completed"]}
        if not result["completed"]:
            self.unsettled = True  # it still hosts replicas: do not stop it
            return value
        self.faults.stop(node, self.name, {"move": "remove-broker"})
        self.removed = node
        unregister(self._call(cluster), bid, wait_s=20.0)
        cluster.wipe_data(node)
        return {**value, "stopped": True, "unregistered": True, "wiped": True}

    def _reassign(self, cluster) -> dict[str, Any]:
        from kafkaesque_harness.clusters.broker import controller_state, wait_reassignments

        state = controller_state(self._call(cluster))
        settled = [p for p in state["partitions"] if not p.get("adding") and not p.get("removing")]
        if not settled:
            return {"skipped": "every partition is being reassigned"}
        p = self.rng.choice(settled)
        min_isr = next((int(t["configs"].get("min.insync.replicas", 1)) for t in state["topics"]
                        if t["topic"] == p["topic"]), 1)
        up = {cluster.node_id(n) for n in running_brokers(cluster)}
        live = sorted(up & {b["broker_id"] for b in state["brokers"] if not b["fenced"]})
        current = list(p["replicas"])
        if len(live) > len(current):
            target = current
            for _ in range(10):  # a different set; the same set in another order moves nothing
                target = self.rng.sample(live, len(current))
                if set(target) != set(current):
                    break
        elif len(current) - 1 >= min_isr:
            leaving = p["leader"] if p["leader"] in current and self.rng.random() < 0.5 else self.rng.choice(current)
            target = [r for r in current if r != leaving]
        else:
            target = current[1:] + current[:1]  # no room to move: a new preferred replica
        call = self._call(cluster)
        resp = call("alter_partition_reassignments", {"reassignments": [
            {"topic": p["topic"], "partition": p["partition"], "replicas": target}]})
        errors = [r for r in resp.get("results", []) if r.get("error")] if resp.get("error") == 0 else [resp]
        value = {"partition": f"{p['topic']}-{p['partition']}", "from": current, "to": target,
                 "leader": p["leader"]}
        if errors:
            return {**value, "refused": errors[0].get("message", f"error {errors[0].get('error')}")}
        self.unsettled = True  # the stop grows a shrunk set back and evens out the load
        return {**value, "completed": wait_reassignments(call, {(p["topic"], p["partition"])}, WAIT_S)}

    def _preferred_election(self, cluster) -> dict[str, Any]:
        resp = cluster.controller_call("elect_preferred_leaders", {"partitions": None})
        results = resp.get("results", [])
        return {"elected": sum(1 for r in results if r.get("error") == 0),  # ELECTION_NOT_NEEDED is not one
                "partitions": len(results)}

    # --- heal ------------------------------------------------------------------------------------
    def _heal(self, cluster, wait_s: float) -> dict[str, Any]:
        """Add the removed broker back (empty) and rebalance to the full replication factor."""
        from kafkaesque_harness.clusters.broker import alter_cluster

        healed: dict[str, Any] = {}
        add = []
        if self.removed:
            node = self.removed
            self.faults.start(node)
            cluster.wait_ready([node], 30.0)
            add = [cluster.node_id(node)]
            healed["added"] = node
            self.removed = None
        self.unsettled = True  # until the rebalance below has completed (it may raise: no active controller)
        result = alter_cluster(self._call(cluster), add=add, wait_s=wait_s)
        self.unsettled = not result["completed"]
        if result["completed"]:  # every move so far is undone: the full replication factor is back
            for rec in self.faults.ledger.active(("membership",), by=self.name):
                self.faults.ledger.healed(rec, True, {"rebalanced": True, **healed})
        return {**healed, "reassigned": len(result["reassigned"]), "moved_replicas": result["moved_replicas"],
                "completed": result["completed"], **({"pending": result["pending"]} if result["pending"] else {})}

    def teardown(self, cluster) -> None:
        if self.removed or self.unsettled or self.faults.ledger.active(("membership",), by=self.name):
            result = self._heal(cluster, HEAL_WAIT_S)
            if not result["completed"]:
                raise RuntimeError(f"membership: reassignments {result.get('pending')} did not complete within "
                                   f"{HEAL_WAIT_S:.0f} s of the heal; they go on in the cluster")
