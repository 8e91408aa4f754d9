"""`python -m kafkaesque_harness.clusters.broker alter-cluster add|remove|rebalance|unregister --brokers ...`: grow and
shrink the cluster online (003, "Incrementally add brokers online", "Take brokers offline").

As in 003, a standalone coordinator does the rebalance: it reads the active controller's state,
asks clusters/broker/rebalance.py for the assignment that keeps the load even with the fewest
replica moves, carries it out as partition reassignments (PROTOCOL.md 7, the controller's
`alter_partition_reassignments`), waits for them to complete, and moves leadership back to the
preferred replicas (000's checkLoadBalancing). The coordinator holds no state of its own: run
again after a failure, it plans from what the controller has now.

- add: the brokers must already run and be registered (start them first); they get their
  share of the replicas.
- remove: every replica on the brokers moves elsewhere. The brokers then host nothing; stop
  them, then `unregister` deletes their registrations. A cluster shrinking below a topic's
  replication factor leaves its partitions with fewer replicas (said loudly); adding brokers
  back restores the factor.
- rebalance: no change of members; restores replication factors and evens out the load.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.reassign import ReassignError, checked, controller_call
from kafkaesque_harness.clusters.broker.rebalance import moved_replicas, plan_rebalance

Call = Callable[[str, dict[str, Any]], dict[str, Any]]


class MembershipError(ReassignError):
    """A membership change the cluster refused or could not finish; the message is one sentence."""


def controller_state(call: Call) -> dict[str, Any]:
    return checked(call("dump_state", {"include_log": False}), "a state dump")["state"]


def alter_cluster(call: Call, add: list[int] = (), remove: list[int] = (), wait_s: float = 60.0,
                  note: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Plan and carry out the rebalance for brokers +add -remove; returns what was done:
    {"members", "reassigned": {"topic-p": replicas}, "moved_replicas", "completed", "pending",
     "shrunk": ["topic-p", ...]}. `call(api, body)` reaches the active controller."""
    state = controller_state(call)
    registered = {b["broker_id"]: b for b in state["brokers"]}
    for b in add:
        if b not in registered or registered[b]["fenced"]:
            raise MembershipError(f"broker {b} is not registered and unfenced at the controller; start it "
                                  "first, wait until it has registered, then add it")
    unknown = [b for b in remove if b not in registered]
    if unknown:
        raise MembershipError(f"broker(s) {unknown} are not registered, so there is nothing to remove; "
                              f"registered: {sorted(registered)}")
    members = sorted(set(registered) - set(remove))
    if not members:
        raise MembershipError("removing every broker would leave the partitions nowhere to live; keep at least one")
    rf = {t["topic"]: t["replication_factor"] for t in state["topics"]}
    assignment = {(p["topic"], p["partition"]): list(p["replicas"]) for p in state["partitions"]}
    in_flight = {(p["topic"], p["partition"]) for p in state["partitions"] if p.get("adding") or p.get("removing")}
    if in_flight:
        # A partition mid-reassignment lists old and new replicas together; plan from settled ones.
        note(f"waiting for {len(in_flight)} reassignment(s) already in progress to finish")
        if not wait_reassignments(call, in_flight, wait_s):
            raise MembershipError(f"reassignments already in progress did not finish within {wait_s:.0f} s; "
                                  "retry once they have (alter-cluster is safe to run again)")
        return alter_cluster(call, add, remove, wait_s, note)
    plan = plan_rebalance(assignment, members, rf)
    shrunk = [f"{t}-{p}" for (t, p), target in plan.items() if len(target) < rf.get(t, len(target))]
    if shrunk:
        note(f"{len(members)} broker(s) cannot hold replication factor {max(rf.values())}: "
             f"{len(shrunk)} partition(s) keep fewer replicas until brokers are added")
    result = {"members": members, "reassigned": {f"{t}-{p}": r for (t, p), r in sorted(plan.items())},
              "moved_replicas": moved_replicas(assignment, plan), "shrunk": shrunk,
              "completed": True, "pending": []}
    if plan:
        resp = checked(call("alter_partition_reassignments", {"reassignments": [
            {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(plan.items())]}), "reassignment")
        refused = [r for r in resp.get("results", []) if r.get("error") != rpc.NONE]
        if refused:
            r = refused[0]
            raise MembershipError(f"the controller refused reassigning {r['topic']}-{r['partition']} "
                                  f"(error {r['error']}): {r.get('message', '')}")
        note(f"reassigning {len(plan)} partition(s), {result['moved_replicas']} replica(s) to copy")
        done = wait_reassignments(call, set(plan), wait_s)
        result["completed"] = done
        if not done:
            result["pending"] = sorted(f"{t}-{p}" for t, p in pending_reassignments(call) & set(plan))
            return result
    checked(call("elect_preferred_leaders", {"partitions": None}), "preferred-leader election")
    return result


def pending_reassignments(call: Call) -> set[tuple[str, int]]:
    resp = checked(call("list_partition_reassignments", {}), "listing reassignments")
    return {(r["topic"], r["partition"]) for r in resp.get("reassignments", [])}


def wait_reassignments(call: Call, keys: set[tuple[str, int]], wait_s: float) -> bool:
    """Until none of `keys` is reassigning (True), or `wait_s` passed (False). A controller that is
    briefly unreachable (a fail-over) is asked again."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if not pending_reassignments(call) & keys:
                return True
        except rpc.RpcError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.3)


def unregister(call: Call, broker_id: int, wait_s: float = 15.0) -> None:
    """Delete a stopped broker's registration; the controller refuses while its session is live,
    so this retries until the session has timed out, up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        resp = call("unregister_broker", {"broker_id": broker_id})
        if resp.get("error") == rpc.NONE or time.monotonic() >= deadline:
            checked(resp, f"unregistering broker {broker_id}")
            return
        time.sleep(0.5)


def active_controller_call(addrs: list[tuple[str, int]], timeout: float = 5.0, retry_s: float = 10.0,
                           secret: str | None = None) -> Call:
    """A `call` that reaches whichever of `addrs` is the active controller at the time of the call:
    requests follow NOT_CONTROLLER (reassign.controller_call); a state dump, which every
    controller answers with its own view, is taken from the one that says it is active.
    `secret`: the cluster's (rpc.py; default: the environment variable rpc.SECRET_ENV)."""
    def call(api: str, body: dict[str, Any]) -> dict[str, Any]:
        if api != "dump_state" or len(addrs) == 1:
            try:
                return controller_call(addrs, api, body, timeout=timeout, retry_s=retry_s, secret=secret)
            except ReassignError as e:
                raise rpc.RpcError(str(e)) from None
        deadline = time.monotonic() + retry_s  # a quorum may be electing a new active controller
        while True:
            for host, port in addrs:
                try:
                    resp = rpc.call_sync(host, port, api, body, timeout=timeout, secret=secret)
                except rpc.RpcError:
                    continue
                if resp.get("state", {}).get("active", True):
                    return resp
            if time.monotonic() >= deadline:
                raise rpc.RpcError(f"no active controller among {', '.join(f'{h}:{p}' for h, p in addrs)} "
                                   f"for {retry_s:.0f} s")
            time.sleep(0.3)

    return call


def alter_cluster_cli(args: Any) -> int:
    from kafkaesque_harness.clusters.broker.server import controller_addresses

    secret = rpc.cli_secret(args)
    if secret is None:
        return 2
    call = active_controller_call(controller_addresses(args.controller), secret=secret)
    brokers = [int(b) for b in args.brokers.split(",") if b.strip()] if args.brokers else []
    if args.action in ("add", "remove", "unregister") and not brokers:
        print(f"error: alter-cluster {args.action} needs --brokers ID[,ID...].", file=sys.stderr)
        return 2
    try:
        if args.action == "unregister":
            for b in brokers:
                unregister(call, b)
                print(f"broker {b} unregistered")
            return 0
        result = alter_cluster(call, add=brokers if args.action == "add" else [],
                               remove=brokers if args.action == "remove" else [], wait_s=args.wait,
                               note=lambda s: print(s, file=sys.stderr))
    except (ReassignError, rpc.RpcError) as e:
        print(f"error: {e}.", file=sys.stderr)
        return 1
    for part, replicas in result["reassigned"].items():
        print(f"{part}: replicas {replicas}")
    if not result["completed"]:
        print(f"error: {len(result['pending'])} reassignment(s) still in progress after {args.wait:.0f} s "
              f"({', '.join(result['pending'])}); they go on in the cluster, run again to finish.", file=sys.stderr)
        return 1
    print(f"members {result['members']}: {len(result['reassigned'])} partition(s) reassigned, "
          f"{result['moved_replicas']} replica(s) copied")
    if args.action == "remove":
        print(f"broker(s) {brokers} host no partitions now: stop them, then run "
              f"`python -m kafkaesque_harness.clusters.broker alter-cluster unregister --brokers {args.brokers} --controller ...`")
    return 0
