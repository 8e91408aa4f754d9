"""Client side of partition reassignment and preferred-leader election (PROTOCOL.md 7).

Operators use `python -m kafkaesque_harness.clusters.broker reassign ...` and `admin elect-preferred`; other
modules (the membership nemesis, a decommission coordinator) import:

    controller_call(addrs, api, body) -> response   # the active controller's answer
    reassign(addrs, topic, partition, replicas, wait_s=0.0) -> partition record or None
    cancel_reassignment(addrs, topic, partition)
    list_reassignments(addrs) -> [{topic, partition, replicas, target, adding, removing}]
    elect_preferred(addrs, partitions=None) -> [{topic, partition, error, message, leader}]
    unregister_broker(addrs, broker_id)

`addrs` is "HOST:PORT[,HOST:PORT...]" or a list of "HOST:PORT" or (host, port): the single
controller or every member of a controller quorum. Each takes `secret=`, the cluster's secret
(rpc.py; default: the environment variable rpc.SECRET_ENV). A quorum member that is not the active
controller answers NOT_CONTROLLER with the leader's address, which is followed; an
unreachable or leaderless one makes the next address be tried. Failures raise
ReassignError with one sentence for the operator.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from kafkaesque_harness.clusters.broker import rpc

Addrs = str | Sequence[str] | Sequence[tuple[str, int]]

ERROR_NAMES = {
    rpc.UNKNOWN_TOPIC_OR_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION",
    rpc.INVALID_REPLICA_ASSIGNMENT: "INVALID_REPLICA_ASSIGNMENT",
    rpc.REASSIGNMENT_IN_PROGRESS: "REASSIGNMENT_IN_PROGRESS",
    rpc.NO_REASSIGNMENT_IN_PROGRESS: "NO_REASSIGNMENT_IN_PROGRESS",
    rpc.PREFERRED_LEADER_NOT_AVAILABLE: "PREFERRED_LEADER_NOT_AVAILABLE",
    rpc.ELECTION_NOT_NEEDED: "ELECTION_NOT_NEEDED",
    rpc.INVALID_REQUEST: "INVALID_REQUEST",
    rpc.NOT_CONTROLLER: "NOT_CONTROLLER",
    rpc.REQUEST_TIMED_OUT: "REQUEST_TIMED_OUT",
    rpc.BROKER_ID_NOT_REGISTERED: "BROKER_ID_NOT_REGISTERED",
}


class ReassignError(Exception):
    """A refused or failed request; str() is one sentence for the operator."""


def parse_addrs(addrs: Addrs) -> list[tuple[str, int]]:
    items: list[Any] = addrs.split(",") if isinstance(addrs, str) else list(addrs)
    out = []
    for a in items:
        if isinstance(a, tuple):
            out.append((str(a[0]), int(a[1])))
            continue
        host, _, port = str(a).strip().rpartition(":")
        if not host or not port.isdigit():
            raise ReassignError(f"controller address {a!r} is not HOST:PORT (e.g. 127.0.0.1:19092)")
        out.append((host, int(port)))
    if not out:
        raise ReassignError("no controller address given")
    return out


def controller_call(addrs: Addrs, api: str, body: dict[str, Any], timeout: float = 5.0,
                    retry_s: float = 10.0, secret: str | None = None) -> dict[str, Any]:
    """Send one request to the active controller and return its response (whatever its error,
    except NOT_CONTROLLER, which is followed). Tries every address, following leader hints,
    for up to `retry_s` seconds (a quorum may be electing); raises ReassignError if no
    controller answers as the active one."""
    targets = parse_addrs(addrs)
    deadline = time.monotonic() + retry_s
    last = "no answer"
    while True:
        queue = list(targets)
        tried: set[tuple[str, int]] = set()
        while queue:
            addr = queue.pop(0)
            if addr in tried:
                continue
            tried.add(addr)
            try:
                resp = rpc.call_sync(addr[0], addr[1], api, body, timeout=timeout, secret=secret)
            except rpc.RpcError as e:
                last = str(e)
                continue
            if resp.get("error") != rpc.NOT_CONTROLLER:
                return resp
            last = f"{addr[0]}:{addr[1]} is not the active controller"
            hint = resp.get("leader")
            if hint:
                try:
                    hinted = parse_addrs(hint)[0]
                except ReassignError:
                    continue
                if hinted not in tried:
                    queue.insert(0, hinted)
        if time.monotonic() >= deadline:
            raise ReassignError(f"no active controller answered {api} at {_show(targets)} ({last})")
        time.sleep(0.3)


def _show(targets: list[tuple[str, int]]) -> str:
    return ",".join(f"{h}:{p}" for h, p in targets)


def _err(code: int) -> str:
    return ERROR_NAMES.get(code, f"error {code}")


def checked(resp: dict[str, Any], what: str) -> dict[str, Any]:
    """The controller's answer, or ReassignError naming `what` and why it was refused."""
    if resp.get("error") != rpc.NONE:
        raise ReassignError(f"the controller refused {what} ({_err(resp.get('error', -1))}): "
                            f"{resp.get('message') or 'no details'}")
    return resp


def _one_result(resp: dict[str, Any], what: str) -> dict[str, Any]:
    results = checked(resp, what).get("results") or []
    if len(results) != 1:
        raise ReassignError(f"the controller answered {what} with {len(results)} results instead of one")
    res = results[0]
    if res.get("error") != rpc.NONE:
        raise ReassignError(f"the controller refused {what} ({_err(res['error'])}): {res.get('message')}")
    return res


def partition_state(addrs: Addrs, topic: str, partition: int, secret: str | None = None) -> dict[str, Any] | None:
    """The partition record in the (active or committed) controller view, or None."""
    resp = controller_call(addrs, "dump_state", {"include_log": False}, secret=secret)
    for p in (resp.get("state") or {}).get("partitions", []):
        if p["topic"] == topic and p["partition"] == partition:
            return p
    return None


def reassign(controller_addrs: Addrs, topic: str, partition: int, replicas: list[int] | None,
             wait_s: float = 0.0, secret: str | None = None) -> dict[str, Any] | None:
    """Start moving `topic`-`partition` to `replicas` (None cancels). With wait_s > 0, wait until
    the reassignment completed (replicas == target, adding and removing empty) and return the
    partition record; raise ReassignError when refused or not done in time."""
    if replicas is None:
        cancel_reassignment(controller_addrs, topic, partition, secret=secret)
        return None
    target = [int(r) for r in replicas]
    what = f"reassigning {topic}-{partition} to {target}"
    _one_result(controller_call(controller_addrs, "alter_partition_reassignments",
                                {"reassignments": [{"topic": topic, "partition": partition,
                                                    "replicas": target}]}, secret=secret), what)
    if wait_s <= 0:
        return None
    deadline = time.monotonic() + wait_s
    last: dict[str, Any] | None = None
    while True:
        try:
            last = partition_state(controller_addrs, topic, partition, secret=secret)
        except ReassignError:
            last = None
        if last is not None and last["replicas"] == target and not last.get("adding") and not last.get("removing"):
            return last
        if time.monotonic() >= deadline:
            shown = (f"replicas {last['replicas']}, ISR {last['isr']}, adding {last.get('adding')}, "
                     f"removing {last.get('removing')}") if last else "state unknown"
            raise ReassignError(f"{what} did not complete within {wait_s:g}s ({shown}); "
                                "the new replicas may still be catching up")
        time.sleep(0.2)


def cancel_reassignment(controller_addrs: Addrs, topic: str, partition: int, secret: str | None = None) -> None:
    _one_result(controller_call(controller_addrs, "alter_partition_reassignments",
                                {"reassignments": [{"topic": topic, "partition": partition, "replicas": None}]},
                                secret=secret),
                f"cancelling the reassignment of {topic}-{partition}")


def list_reassignments(controller_addrs: Addrs, secret: str | None = None) -> list[dict[str, Any]]:
    resp = checked(controller_call(controller_addrs, "list_partition_reassignments", {}, secret=secret),
                   "listing reassignments")
    return list(resp.get("reassignments") or [])


def elect_preferred(controller_addrs: Addrs, partitions: list[tuple[str, int]] | None = None,
                    secret: str | None = None) -> list[dict[str, Any]]:
    """Preferred-leader election for `partitions` (None: all); the per-partition results."""
    body = {"partitions": None if partitions is None else
            [{"topic": t, "partition": p} for t, p in partitions]}
    resp = checked(controller_call(controller_addrs, "elect_preferred_leaders", body, secret=secret),
                   "preferred leader election")
    return list(resp.get("results") or [])


def unregister_broker(controller_addrs: Addrs, broker_id: int, secret: str | None = None) -> None:
    checked(controller_call(controller_addrs, "unregister_broker", {"broker_id": broker_id}, secret=secret),
            f"unregistering broker {broker_id}")


# --- CLIs -----------------------------------------------------------------------------------
def reassign_cli(args: Any) -> int:
    """`reassign --controller ... (--list | --topic T --partition P (--replicas 2,3,4 [--wait S] | --cancel))`"""
    secret = rpc.cli_secret(args)
    if secret is None:
        return 2
    try:
        if args.list:
            items = list_reassignments(args.controller, secret=secret)
            if not items:
                print("no reassignments in progress")
            for r in items:
                print(f"{r['topic']}-{r['partition']}: replicas {r['replicas']} -> target {r['target']} "
                      f"(adding {r['adding']}, removing {r['removing']})")
            return 0
        if not args.topic or args.partition is None:
            print("error: reassign needs --topic and --partition (or --list).", file=sys.stderr)
            return 2
        if args.cancel:
            cancel_reassignment(args.controller, args.topic, args.partition, secret=secret)
            print(f"cancelled the reassignment of {args.topic}-{args.partition}")
            return 0
        if not args.replicas:
            print("error: reassign needs --replicas 2,3,4 (the target broker ids), --cancel or --list.",
                  file=sys.stderr)
            return 2
        try:
            target = [int(x) for x in args.replicas.split(",") if x.strip()]
        except ValueError:
            print(f"error: --replicas {args.replicas!r} is not a comma-separated list of broker ids.",
                  file=sys.stderr)
            return 2
        final = reassign(args.controller, args.topic, args.partition, target, args.wait, secret=secret)
        if final is None:
            print(f"reassignment of {args.topic}-{args.partition} to {target} started")
        else:
            print(f"reassignment of {args.topic}-{args.partition} completed: replicas {final['replicas']}, "
                  f"leader {final['leader']}, ISR {final['isr']}")
        return 0
    except ReassignError as e:
        print(f"error: {e}.", file=sys.stderr)
        return 1


def elect_preferred_cli(node: str, topic: str | None, partition: int | None, secret: str) -> int:
    try:
        results = elect_preferred(node, None if not topic else [(topic, partition or 0)], secret=secret)
    except ReassignError as e:
        print(f"error: {e}.", file=sys.stderr)
        return 1
    failed = False
    for r in results:
        name = f"{r['topic']}-{r['partition']}"
        if r["error"] == rpc.NONE:
            print(f"{name}: leader moved to preferred replica {r['leader']}")
        elif r["error"] == rpc.ELECTION_NOT_NEEDED:
            print(f"{name}: {r['message']}")
        else:
            failed = True
            print(f"{name}: not elected ({_err(r['error'])}): {r['message']}")
    return 1 if failed and topic else 0
