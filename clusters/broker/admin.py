"""Operator commands: `create-topic` (through the Kafka CreateTopics API), `admin dump`, `admin elect` and
`admin elect-preferred` (internal RPC; reassignment and preferred leaders are in reassign.py).

Also importable by the harness: `dump_state(host, port, secret=...)` and `create_topic(bootstrap, ...)`.
The internal RPC needs the cluster's secret (rpc.py): the commands take `--secret-file`, else
the environment variable rpc.SECRET_ENV.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from kafkaesque_harness.clusters.broker import rpc


def dump_state(host: str, port: int, include_log: bool = True, timeout: float = 5.0,
               secret: str | None = None) -> dict[str, Any]:
    """The node's own state (a broker's partitions and physical log, or the controller's view).
    Without `secret`, the one in rpc.SECRET_ENV."""
    resp = rpc.call_sync(host, port, "dump_state", {"include_log": include_log}, timeout=timeout, secret=secret)
    if resp.get("error") != rpc.NONE:
        raise rpc.RpcError(f"dump_state on {host}:{port} failed with error {resp.get('error')}")
    return resp["state"]


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int, min_isr: int,
                 timeout_s: float = 30.0) -> None:
    """Create a topic with a real Kafka client's admin API (kafka-python's KafkaAdminClient)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=int(timeout_s * 1000),
                             client_id="kafkaesque-admin")
    try:
        admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                      topic_configs={"min.insync.replicas": str(min_isr)})],
                            timeout_ms=int(timeout_s * 1000))
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def create_topic_cli(args: Any) -> int:
    try:
        create_topic(args.bootstrap, args.topic, args.partitions, args.replication_factor, args.min_isr)
    except Exception as e:  # noqa: BLE001 - one sentence for the operator
        print(f"error: creating topic {args.topic!r} through {args.bootstrap} failed ({e}); "
              "check that the brokers are up and the replication factor fits.", file=sys.stderr)
        return 1
    print(f"created topic {args.topic} ({args.partitions} partitions, RF {args.replication_factor}, "
          f"min ISR {args.min_isr})")
    return 0


def admin_cli(args: Any) -> int:
    secret = rpc.cli_secret(args)
    if secret is None:
        return 2
    if args.what == "elect-preferred":
        from kafkaesque_harness.clusters.broker.reassign import elect_preferred_cli

        return elect_preferred_cli(args.node, args.topic, args.partition, secret)
    host, port = args.node.rsplit(":", 1)
    if args.what == "elect":
        return elect_cli(host, int(port), args, secret)
    try:
        state = dump_state(host, int(port), include_log=not args.no_log, secret=secret)
    except rpc.RpcError as e:
        print(f"error: {e}; is the node up at {args.node}?", file=sys.stderr)
        return 1
    json.dump(state, sys.stdout, indent=2)
    print()
    return 0


def elect_cli(host: str, port: int, args: Any, secret: str) -> int:
    """`admin elect`: the operator's unclean recovery under the manual strategy (001 5.3.1)."""
    if not args.topic or args.broker is None:
        print("error: admin elect needs --topic, --partition and --broker (the replica to make leader).",
              file=sys.stderr)
        return 2
    try:
        resp = rpc.call_sync(host, port, "elect_leader",
                             {"topic": args.topic, "partition": args.partition, "broker_id": args.broker},
                             secret=secret)
    except rpc.RpcError as e:
        print(f"error: {e}; is the controller up at {args.node}?", file=sys.stderr)
        return 1
    if resp.get("error") != rpc.NONE:
        print(f"error: the controller refused (error {resp.get('error')}): {resp.get('message', '')}", file=sys.stderr)
        return 1
    print(f"broker {args.broker} leads {args.topic}-{args.partition}; reported as a potential data-loss event")
    return 0
