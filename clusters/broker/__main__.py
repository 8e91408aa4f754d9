"""`python -m kafkaesque_harness.clusters.broker controller|broker|cluster|create-topic|reassign|alter-cluster|admin ...`

One program, two roles (DESIGN.md, "The reference broker"). Flags here are the contract
the harness's cluster backends rely on; change them only together with clusters/local.py.
"""

from __future__ import annotations

import argparse
import sys

from kafkaesque_harness.clusters.broker.listener import Limits
from kafkaesque_harness.clusters.broker.rpc import SECRET_ENV

_LIMITS = Limits()


def _add_secret(p: argparse.ArgumentParser) -> None:
    p.add_argument("--secret-file", default=None,
                   help=f"the cluster's secret (a file of mode 0600; default: ${SECRET_ENV}): internal requests "
                        "carry its tag, so Kafka clients cannot make them (rpc.py)")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-id", type=int, required=True)
    p.add_argument("--listen", required=True, help="HOST:PORT for this node (Kafka + internal RPC)")
    p.add_argument("--advertise", default=None, help="HOST:PORT given to others (default: --listen)")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--log-file", default=None, help="JSON state-change log (default: stderr)")
    p.add_argument("--trace-file", default=None,
                   help="the protocol trace, JSON lines (clusters/broker/trace.py; default: trace.jsonl beside "
                        "--log-file, none without it)")
    _add_secret(p)
    # The listener's caps (listener.py, docs/SAFETY.md), named after Kafka's settings.
    p.add_argument("--socket-request-max-bytes", type=int, default=_LIMITS.request_max_bytes,
                   help="socket.request.max.bytes: the largest request; a longer one closes its connection")
    p.add_argument("--queued-max-request-bytes", type=int, default=_LIMITS.queued_max_request_bytes,
                   help="queued.max.request.bytes: requests held by all connections at once; beyond it "
                        "connections are not read until answers free room")
    p.add_argument("--max-connections", type=int, default=_LIMITS.max_connections,
                   help="max.connections: a connection beyond it is closed at once")
    p.add_argument("--connections-max-idle-ms", type=int, default=_LIMITS.connections_max_idle_ms,
                   help="connections.max.idle.ms: a connection with no request for this long is closed")
    p.add_argument("--event-loop", default="auto", choices=["auto", "uvloop", "asyncio"],
                   help="the asyncio event loop: uvloop (libuv; about a third more acknowledged sends per CPU "
                        "second, benchmarks/bench_broker.py), asyncio's own, or auto: uvloop when installed")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kafkaesque_harness.clusters.broker", description=__doc__)
    sub = ap.add_subparsers(dest="role", required=True)

    c = sub.add_parser("controller", help="run the (single, active) controller")
    _add_common(c)
    c.add_argument("--session-timeout-ms", type=int, default=6000, help="broker.session.timeout.ms")
    c.add_argument("--unclean-leader-election", action="store_true", help="unclean.leader.election.enable")
    c.add_argument("--unclean-recovery-strategy", default="balanced", choices=["proactive", "balanced", "manual"],
                   help="unclean.recovery.strategy (001 5.3): what to do when ISR and ELR are both empty")
    c.add_argument("--unclean-recovery-timeout-ms", type=int, default=2000,
                   help="proactive recovery: how long to collect replicas' log info")
    c.add_argument("--variant", action="append", default=[], help="historic flaw to switch on (repeatable)")
    c.add_argument("--quorum", default=None,
                   help="ID@HOST:PORT,... of every controller, this one included: run as a member of a Raft "
                        "controller quorum (controller_quorum.py); without it, the single controller")
    c.add_argument("--snapshot-every", type=int, default=1000,
                   help="quorum: snapshot the metadata image and compact raft.log after this many records (0: never)")

    b = sub.add_parser("broker", help="run a broker")
    _add_common(b)
    b.add_argument("--controller", required=True,
                   help="HOST:PORT of the controller, or HOST:PORT,HOST:PORT,... of a controller quorum")
    b.add_argument("--flush-policy", default="never",
                   help="every-write | every-N-records:N | every-ms:N | never (OS decides)")
    b.add_argument("--heartbeat-interval-ms", type=int, default=500)
    b.add_argument("--replica-lag-time-max-ms", type=int, default=10000)
    b.add_argument("--replica-fetch-wait-max-ms", type=int, default=100)
    b.add_argument("--replica-fetch-max-bytes", type=int, default=4 * 1024 * 1024,
                   help="replica.fetch.max.bytes: about how much one follower fetch returns (at least one batch)")
    b.add_argument("--segment-bytes", type=int, default=16 * 1024 * 1024)
    b.add_argument("--hwm-checkpoint-interval-ms", type=int, default=1000,
                   help="replica.high.watermark.checkpoint.interval.ms")
    b.add_argument("--variant", action="append", default=[], help="historic flaw to switch on (repeatable)")
    b.add_argument("--offsets-topic-min-isr", type=int, default=2,
                   help="min.insync.replicas of __consumer_offsets when this broker creates it (capped at its "
                        "replication factor, min(3, brokers))")
    b.add_argument("--group-initial-rebalance-delay-ms", type=int, default=3000,
                   help="group.initial.rebalance.delay.ms (KIP-134)")
    b.add_argument("--group-min-session-timeout-ms", type=int, default=6000, help="group.min.session.timeout.ms")

    cl = sub.add_parser("cluster", help="run a controller and N brokers on this machine, in the foreground (the "
                        "cluster secret for admin commands: DATA_DIR/cluster.secret)")
    cl.add_argument("--brokers", type=int, default=3)
    cl.add_argument("--controllers", type=int, default=1, choices=[1, 3, 5],
                    help="1: the single controller; 3 or 5: a Raft controller quorum on ports P, P-1, ...")
    cl.add_argument("--data-dir", required=True)
    cl.add_argument("--host", default="127.0.0.1")
    cl.add_argument("--base-port", type=int, default=19092,
                    help="controller on P, broker i (1..N) on P+i")
    cl.add_argument("--flush-policy", default="never")
    cl.add_argument("--variant", action="append", default=[])
    cl.add_argument("--unclean-recovery-strategy", default="balanced", choices=["proactive", "balanced", "manual"])

    t = sub.add_parser("create-topic", help="create a topic through the Kafka CreateTopics API")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--partitions", type=int, default=1)
    t.add_argument("--replication-factor", type=int, default=3)
    t.add_argument("--min-isr", type=int, default=2)

    a = sub.add_parser("admin", help="admin requests over the internal RPC")
    a.add_argument("what", choices=["dump", "elect", "elect-preferred"],
                   help="dump: print the node's state as JSON; elect: make --broker the leader of a partition "
                        "no clean election can serve (unclean recovery by hand, 001 5.3 'manual'); "
                        "elect-preferred: move leadership to each partition's first replica where it is in "
                        "the ISR (all partitions unless --topic)")
    a.add_argument("--node", required=True, help="HOST:PORT of a broker or controller (elect, elect-preferred: "
                   "the controller, or HOST:PORT,... of a controller quorum)")
    a.add_argument("--no-log", action="store_true", help="leave the physical log out of the dump")
    a.add_argument("--topic")
    a.add_argument("--partition", type=int, default=0)
    a.add_argument("--broker", type=int, help="elect: the replica to make leader")
    _add_secret(a)

    r = sub.add_parser("reassign", help="move a partition's replicas (PROTOCOL.md 7), cancel, or list moves")
    r.add_argument("--controller", required=True, help="HOST:PORT of the controller, or HOST:PORT,... of a quorum")
    r.add_argument("--topic")
    r.add_argument("--partition", type=int)
    r.add_argument("--replicas", help="the target broker ids, e.g. 2,3,4 (the first is the preferred leader)")
    r.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long for the reassignment to complete")
    r.add_argument("--cancel", action="store_true", help="cancel the partition's reassignment in progress")
    r.add_argument("--list", action="store_true", help="list the reassignments in progress")
    _add_secret(r)

    m = sub.add_parser("alter-cluster", help="add or remove brokers online and rebalance (003; membership.py)")
    m.add_argument("action", choices=["add", "remove", "rebalance", "unregister"],
                   help="add: give registered brokers their share; remove: move every replica off them; "
                        "rebalance: restore replication factors and even out the load; unregister: forget "
                        "stopped brokers that host nothing")
    m.add_argument("--controller", required=True, help="HOST:PORT of the controller, or HOST:PORT,... of a quorum")
    m.add_argument("--brokers", default="", help="broker ids, e.g. 4,5")
    m.add_argument("--wait", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for the reassignments to complete")
    _add_secret(m)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.role == "controller":
        from kafkaesque_harness.clusters.broker.controller_quorum import run_controller

        return run_controller(args)
    if args.role == "broker":
        from kafkaesque_harness.clusters.broker.server import run_broker

        return run_broker(args)
    if args.role == "cluster":
        from kafkaesque_harness.clusters.broker.local_cluster import run_local_cluster

        return run_local_cluster(args)
    if args.role == "create-topic":
        from kafkaesque_harness.clusters.broker.admin import create_topic_cli

        return create_topic_cli(args)
    if args.role == "reassign":
        from kafkaesque_harness.clusters.broker.reassign import reassign_cli

        return reassign_cli(args)
    if args.role == "alter-cluster":
        from kafkaesque_harness.clusters.broker.membership import alter_cluster_cli

        return alter_cluster_cli(args)
    if args.role == "admin":
        from kafkaesque_harness.clusters.broker.admin import admin_cli

        return admin_cli(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
