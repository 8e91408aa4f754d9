"""Client events: what a client library did on its own that changes what a later poll returns (issue 38 item 2).

A workload records them on its op completions, in the field CLIENT_EVENTS ("client_events"): a list, in the
order they happened, of the events the process's client libraries went through since the process's previous
completion (a library acts on its own threads, so an event lands on the next completion of its process,
whatever that op is). The field is absent when there were none: older checkers, and histories written before
it, read on unchanged. The workloads' adapters write them (workloads/kafka_python.py, workloads/confluent.py);
the checkers read them from the history, never from a workload (checkers/clients.py).

Every event: "type" (below), "library" ("kafka-python" | "confluent-kafka" | "sim-kafka-python": the simulator's
client, workloads/sim/, which follows kafka-python's rules), "mono" (when, on the host's
monotonic clock in seconds, the clock of the broker trace's `mono`), and, for an event about one partition,
"topic" and "key" (the partition).

  reset       the library moved its position on its own after an answer it took for an error:
                from          the position it held (the offset its fetch asked for)
                to            where it moved (null: not known, e.g. librdkafka's reset before its ListOffsets)
                policy        how it chose `to`: "earliest" | "latest" (auto.offset.reset), "truncation" (KIP-320:
                              the end of the diverging epoch an OffsetForLeaderEpoch answer named)
                error         the answer, by the protocol's name: "OFFSET_OUT_OF_RANGE", "LOG_TRUNCATION", ...
                broker        the node id the library took for the partition's leader when the answer came (whose
                              answer it was, as far as the library knows); null when unknown
                leader_epoch  the leader epoch it believed that leader led; null when unknown
                detail        the library's own words, where it gave any (a log line)
                answered_by   the node the library asked for `to` (its ListOffsets), where it tells
                client        the client id the library's handle sends, where it is not its process's own
                              (librdkafka: a group member handed on to a later process keeps its first id)
  seek        the position was placed for a reason other than an error: "to" (null: not known yet),
                "why": "workload" (the workload's own seek: an assignment from the start, a poll-unseen seek) |
                "committed" (the group's committed offset, on an assignment) | "no-position" (the reset
                policy placed a partition that had no position), "policy" where a policy chose it
  leader      the library's view of the partition's leader changed (a Metadata answer, or a fetch's hint):
                "from", "to" (leader node ids, -1: none), "from_epoch", "leader_epoch" (-1: unknown);
                leader_epoch < from_epoch is an epoch regression (metadata from a deposed leader taken)
  rebalance   the group moved partitions: "how" ("assigned" | "revoked" | "lost"), "keys"
              (also kept, as before, in the completion's "rebalance_log")
  send-error  a send failed in the client with the library's own answer (the txn workload records each,
                also when the transaction's commit returned): "key", "value", "error"

Client ids. Each process's producer and consumer send the client id `client_id(process)`, "kafkaesque-p<n>",
which the broker trace names on every answer it gives a client (`client`), so a broker answer is tied to the
process whose history shows what came of it (`process_of_client`).
"""

from __future__ import annotations

import re
from typing import Any

CLIENT_EVENTS = "client_events"  # the completion's field
EVENT_TYPES = ("reset", "seek", "leader", "rebalance", "send-error")
LIBRARIES = ("kafka-python", "confluent-kafka", "sim-kafka-python")
CLIENT_ID_PREFIX = "kafkaesque-p"
_CLIENT_ID = re.compile(r"^kafkaesque-p(\d+)$")


def client_id(process: int | str | None) -> str:
    """The client id a process's clients send; a process not known yet (None) sends the prefix alone."""
    return f"{CLIENT_ID_PREFIX}{process}" if process is not None else CLIENT_ID_PREFIX.rstrip("-p")


def process_of_client(cid: Any) -> int | None:
    """The process a client id names (`client_id`'s), or None for another client's (e.g. librdkafka's
    default "rdkafka", kafka-python's "kafka-python-3.0.12")."""
    m = _CLIENT_ID.match(cid) if isinstance(cid, str) else None
    return int(m.group(1)) if m else None


def client_events(extra: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The client events a completion carries (its other fields: an Op's extra, a history file's line), in
    order; [] when none, or when the field is not a list of objects (a foreign or damaged history)."""
    events = (extra or {}).get(CLIENT_EVENTS)
    if not isinstance(events, list):
        return []
    return [e for e in events if isinstance(e, dict) and isinstance(e.get("type"), str)]


__all__ = ["CLIENT_EVENTS", "CLIENT_ID_PREFIX", "EVENT_TYPES", "LIBRARIES", "client_events", "client_id",
           "process_of_client"]
