"""Client-facing Kafka wire protocol: ApiVersions, Metadata, Produce, Fetch, ListOffsets, OffsetForLeaderEpoch
(KIP-320: a consumer validates its position after a leader change), CreateTopics,
InitProducerId, AlterPartitionReassignments and ListPartitionReassignments (the last three forwarded
to the controller, as KRaft brokers do), and the consumer-group APIs (FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch) served by group_coordinator.py, and the
transaction APIs (FindCoordinator key type 1, InitProducerId with a transactional.id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit; Fetch read_committed) served by txn_shell.py.

Codecs are kafka-python's generated protocol classes used server-side (PROTOCOL.md 10):
requests decode with `Req[version].decode(payload, header=True)`, responses are built with
the version in the constructor and encoded with `.with_header(correlation_id=...)` and
`.encode(header=True, framed=True)`. Handlers ask the broker shell (server.py) for state;
they never touch sockets or logs directly.

Versions are capped where the clients' choices would need more than we implement: Fetch at
12 (v13+ names topics by id), Produce at 10 (v13 by id), Metadata at 12, OffsetCommit at 8 and
OffsetFetch at 8 (v9+ belong to KIP-848's consumer protocol), FindCoordinator at 4, the transaction
APIs below the versions of KIP-890 part 2 (AddPartitionsToTxn 3, AddOffsetsToTxn 3, EndTxn 3,
TxnOffsetCommit 3).
"""

from __future__ import annotations

import asyncio
import contextvars
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from kafkaesque_harness.clusters.broker import hostenv, rpc
from kafkaesque_harness.clusters.broker.group_coordinator import (
    MAX_METADATA_CHARS,
    OFFSETS_TOPIC,
    JoinResult,
    SyncResult,
)
from kafkaesque_harness.clusters.broker.log import InvalidBatchError, validate_batches
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER


class Broker(Protocol):
    """What the Kafka API handlers use of the broker (server.Broker, which satisfies it). Declared
    here because server.py imports this module to serve the Kafka port: the handlers stand above the
    broker's state, never the other way round."""

    node_id: int
    image: Any        # the metadata image (metadata.MetadataImage)
    controller: Any   # the client of the active controller (rpc.ControllerClient)
    groups: Any       # the group coordinator (group_coordinator.GroupCoordinator)
    txn: Any          # transactions (txn_shell.TxnShell)

    def change_event(self, topic: str, partition: int) -> asyncio.Event: ...

    async def wait_any(self, events: list[asyncio.Event], timeout: float) -> None: ...

    async def produce(self, topic: str, partition: int, raw: bytes, headers: list[Any], acks: int,
                      timeout_s: float) -> tuple[int, int, int]: ...

    def consumer_read(self, topic: str, partition: int, offset: int, current_leader_epoch: int,
                      max_bytes: int, read_committed: bool = False, last_fetched_epoch: int = -1) -> dict[str, Any]: ...

    def offset_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                epoch: int) -> tuple[int, int, int]: ...

    def answered(self, event: dict[str, Any]) -> None:
        """Record in the protocol trace what this broker answered a client (clusters/broker/trace.py)."""

    def list_offset(self, topic: str, partition: int, timestamp: int,
                    current_leader_epoch: int, read_committed: bool = False) -> tuple[int, int, int]: ...

    async def create_topic(self, topic: str, partitions: int, rf: int, configs: dict[str, Any],
                           timeout_s: float) -> tuple[int, str | None]: ...

    def next_producer_id(self) -> int: ...

    async def group_wait(self, call: Any, timeout_s: float) -> Any: ...

    def deliver(self, replies: list[Any]) -> None: ...

    async def find_coordinator(self, group_id: str) -> tuple[int, Any]: ...

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             offsets: list[tuple[str, int, int, int, str]], timeout_s: float) -> int: ...

    async def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                                 member_id: str, offsets: list[tuple[str, int, int, int, str]],
                                 timeout_s: float) -> int: ...

UNSUPPORTED_VERSION = 35
READ_COMMITTED = 1  # Fetch isolation_level
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# api_key -> (request class, response class, min version, max version)
SUPPORTED: dict[int, tuple[Any, Any, int, int]] = {
    0: (ProduceRequest, ProduceResponse, 3, 10),
    1: (FetchRequest, FetchResponse, 4, 12),
    2: (ListOffsetsRequest, ListOffsetsResponse, 1, 7),
    23: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),  # v0-1 carry no current epoch
    3: (MetadataRequest, MetadataResponse, 0, 12),
    18: (ApiVersionsRequest, ApiVersionsResponse, 0, 4),
    19: (CreateTopicsRequest, CreateTopicsResponse, 2, 7),
    22: (InitProducerIdRequest, InitProducerIdResponse, 0, 4),
    8: (OffsetCommitRequest, OffsetCommitResponse, 2, 8),
    9: (OffsetFetchRequest, OffsetFetchResponse, 2, 8),  # v0-1 have no group-level error to say "not here"
    10: (FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
    11: (JoinGroupRequest, JoinGroupResponse, 0, 9),
    12: (HeartbeatRequest, HeartbeatResponse, 0, 4),
    13: (LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    14: (SyncGroupRequest, SyncGroupResponse, 0, 5),
    45: (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, 0, 0),
    46: (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, 0, 0),
    # Transactions (txn_shell.py), capped below the versions of KIP-890 part 2 and of
    # TRANSACTION_ABORTABLE; AddPartitionsToTxn v4+ is the inter-broker form.
    24: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
    25: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
    26: (EndTxnRequest, EndTxnResponse, 0, 3),
    28: (TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
}


class BadRequest(Exception):
    """A request we cannot decode: the connection is closed (it never crashes the broker)."""


@dataclass(frozen=True)
class KafkaRequest:
    """A decoded request: its header, and its body (None: an ApiVersions of a version above ours)."""

    api_key: int
    version: int
    correlation_id: int
    body: Any
    client_id: str | None = None  # the request header's (the trace names the client it answered with it)


# The client id of the request being answered, for the trace lines its handler writes (`respond` sets it in
# the request's own task).
CLIENT_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("kafka_client_id", default=None)


def topic_id(topic: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kafkaesque/{topic}")


def peek_header(payload: bytes) -> tuple[int, int, int]:
    if len(payload) < 8:
        raise BadRequest("request shorter than a request header")
    return struct.unpack_from(">hhi", payload, 0)


def peek_client_id(payload: bytes) -> str | None:
    """The header's client id (request header v1+: a nullable int16-length string after the correlation id)."""
    if len(payload) < 10:
        return None
    (n,) = struct.unpack_from(">h", payload, 8)
    return None if n < 0 else bytes(payload[10:10 + n]).decode("utf-8", "replace")


def decode_request(payload: bytes) -> KafkaRequest:
    """Check and decode one request's frame body, or BadRequest naming what is wrong with it: an api
    or version we do not serve, a truncated header, a body that does not decode. Run by the listener
    before any handler sees the request (listener.py)."""
    api_key, version, correlation_id = peek_header(payload)
    if api_key == 18 and version > SUPPORTED[18][3]:
        # KIP-511: an unknown ApiVersions version is answered (in a v0 body), not refused.
        return KafkaRequest(api_key, version, correlation_id, None, peek_client_id(payload))
    spec = SUPPORTED.get(api_key)
    if spec is None or not spec[2] <= version <= spec[3]:
        raise BadRequest(f"unsupported api {api_key} v{version}")
    req_cls = spec[0]
    try:
        body = req_cls[version].decode(payload, header=True)
    except Exception as e:  # noqa: BLE001 - any decoding failure is a malformed request
        raise BadRequest(f"cannot decode api {api_key} v{version}: {e!r}"[:300]) from None
    return KafkaRequest(api_key, version, correlation_id, body, peek_client_id(payload))


async def respond(broker: Broker, request: KafkaRequest) -> bytes | None:
    """Run a decoded request's handler; the framed response (None: no reply, acks=0)."""
    if request.body is None:
        resp = _api_versions(0, error=UNSUPPORTED_VERSION)  # KIP-511: the client retries with a version we know
    else:
        CLIENT_ID.set(request.client_id)
        resp = await HANDLERS[request.api_key](broker, request.body, request.version)
        if resp is None:
            return None
    resp.with_header(correlation_id=request.correlation_id)
    return bytes(resp.encode(header=True, framed=True))


async def handle_kafka_request(broker: Broker, payload: bytes) -> bytes | None:
    """Decode one framed request body, run its handler, return the framed response (None: no reply)."""
    return await respond(broker, decode_request(payload))


def _api_versions(version: int, error: int = 0) -> Any:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=v[2], max_version=v[3])
            for k, v in sorted(SUPPORTED.items())]
    return ApiVersionsResponse(version=version, error_code=error, api_keys=keys, throttle_time_ms=0)


async def api_versions(broker: Broker, req: Any, version: int) -> Any:
    return _api_versions(version)


async def metadata(broker: Broker, req: Any, version: int) -> Any:
    image = broker.image
    R = MetadataResponse
    live = [b for b in sorted(image.brokers.values(), key=lambda b: b.broker_id) if not b.fenced]
    brokers = [R.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port, rack=None) for b in live]
    # v1+: null = all topics, [] = none; v0 has no null, so [] means all.
    all_topics = req.topics is None or (version == 0 and not req.topics)
    names = sorted(image.topics) if all_topics else [t.name for t in req.topics]
    topics = []
    for name in names:
        info = image.topics.get(name)
        if info is None:
            topics.append(R.MetadataResponseTopic(error_code=rpc.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                                                  topic_id=topic_id(name), is_internal=False, partitions=[],
                                                  authorized_operations={31}))
            continue
        parts = []
        for p in image.partitions_of(name):
            offline = [r for r in p.replicas if r not in image.brokers or image.brokers[r].fenced]
            parts.append(R.MetadataResponseTopic.MetadataResponsePartition(
                error_code=rpc.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0,
                partition_index=p.partition, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=offline))
        topics.append(R.MetadataResponseTopic(error_code=0, name=name, topic_id=topic_id(name), is_internal=False,
                                              partitions=parts, authorized_operations={31}))
    # What this broker told the client each partition's leader and leader epoch are: a deposed leader
    # that has not heard of its successor names itself (KIP-320 clients keep the newer epoch they know).
    broker.answered({"event": "metadata_answered", "brokers": [b.broker_id for b in live],
                     "leaders": {t.name: [[p.partition_index, p.leader_id, p.leader_epoch] for p in t.partitions]
                                 for t in topics if t.error_code == 0}})
    # Clients send admin requests to the controller id: a live broker, which forwards
    # CreateTopics to the real controller (as KRaft brokers do).
    controller = broker.node_id
    return R(version=version, throttle_time_ms=0, brokers=brokers, cluster_id="kafkaesque",
             controller_id=controller, topics=topics, authorized_operations={31}, error_code=0)


async def produce(broker: Broker, req: Any, version: int) -> Any:
    acks = req.acks
    timeout_s = max(req.timeout_ms, 1) / 1000
    jobs = []
    for t in req.topic_data:
        for pd in t.partition_data:
            jobs.append((t.name, pd.index, pd.records))
    txn_id = getattr(req, "transactional_id", None)
    results = await asyncio.gather(*(_produce_partition(broker, name, index, records, acks, timeout_s, txn_id)
                                     for name, index, records in jobs))
    if acks == 0:
        return None
    R = ProduceResponse
    by_topic: dict[str, list] = {}
    for (name, index, _), (err, base_offset, log_start) in zip(jobs, results, strict=True):
        by_topic.setdefault(name, []).append(R.TopicProduceResponse.PartitionProduceResponse(
            index=index, error_code=err, base_offset=base_offset, log_append_time_ms=-1,
            log_start_offset=log_start, record_errors=[], error_message=None))
    return R(version=version, responses=[R.TopicProduceResponse(name=n, partition_responses=ps)
                                         for n, ps in by_topic.items()], throttle_time_ms=0)


async def _produce_partition(broker: Broker, topic: str, partition: int, records: Any, acks: int,
                             timeout_s: float, txn_id: str | None = None) -> tuple[int, int, int]:
    raw = bytes(records) if records is not None else b""
    try:
        headers = validate_batches(raw)
    except InvalidBatchError:
        return rpc.CORRUPT_MESSAGE, -1, -1
    if not headers:
        return rpc.INVALID_REQUEST, -1, -1
    if any(h.is_control for h in headers):
        return rpc.INVALID_REQUEST, -1, -1  # markers are the coordinator's to write (Kafka: INVALID_RECORD)
    if any(h.is_transactional for h in headers):
        err = await broker.txn.verify_produce(txn_id, topic, partition, headers)
        if err != rpc.NONE:
            return err, -1, -1
    return await broker.produce(topic, partition, raw, headers, acks, timeout_s)


async def fetch(broker: Broker, req: Any, version: int) -> Any:
    # v12+: the epoch of the last record the consumer read (KIP-320), checked like a follower's (-1: none)
    wanted = [(t.topic, p.partition, p.fetch_offset, getattr(p, "current_leader_epoch", -1), p.partition_max_bytes,
               getattr(p, "last_fetched_epoch", -1)) for t in req.topics for p in t.partitions]
    deadline = hostenv.monotonic_s() + max(req.max_wait_ms, 0) / 1000
    read_committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    while True:
        waiters = [broker.change_event(t, p) for t, p, *_ in wanted]
        parts = [broker.consumer_read(t, p, off, cle, max_bytes, read_committed, lfe)
                 for t, p, off, cle, max_bytes, lfe in wanted]
        total = sum(len(x["records"]) for x in parts)
        remaining = deadline - hostenv.monotonic_s()
        if (total >= max(req.min_bytes, 1) or remaining <= 0 or not wanted
                or any(x["error"] or x.get("diverging") for x in parts)):
            break
        await broker.wait_any(waiters, remaining)
    R = FetchResponse
    PD = R.FetchableTopicResponse.PartitionData
    by_topic: dict[str, list] = {}
    for (topic, partition, *_), x in zip(wanted, parts, strict=True):
        div = x.get("diverging")
        by_topic.setdefault(topic, []).append(PD(
            partition_index=partition, error_code=x["error"], high_watermark=x["hwm"], last_stable_offset=x["lso"],
            log_start_offset=x["log_start"], preferred_read_replica=-1,
            diverging_epoch=None if div is None else PD.EpochEndOffset(epoch=div["epoch"], end_offset=div["end_offset"]),
            aborted_transactions=None if x["aborted"] is None else [
                PD.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in x["aborted"]],
            records=x["records"]))
    return R(version=version, throttle_time_ms=0, error_code=0, session_id=0,
             responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in by_topic.items()])


async def list_offsets(broker: Broker, req: Any, version: int) -> Any:
    R = ListOffsetsResponse
    read_committed = getattr(req, "isolation_level", 0) == READ_COMMITTED  # KIP-98: the latest is the LSO
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            err, offset, epoch = broker.list_offset(t.name, p.partition_index, p.timestamp,
                                                    getattr(p, "current_leader_epoch", -1), read_committed)
            parts.append(R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=err, timestamp=-1, offset=offset, leader_epoch=epoch))
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(version=version, throttle_time_ms=0, topics=topics)


async def offset_for_leader_epoch(broker: Broker, req: Any, version: int) -> Any:
    """KIP-320: a consumer asks the leader where the epoch of its position ends, to find out whether the log
    was truncated under it (ReplicaId, v3+, is -1 for a consumer; our followers use the internal RPC)."""
    R = OffsetForLeaderEpochResponse
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            err, epoch, end = broker.offset_for_leader_epoch(t.topic, p.partition,
                                                             getattr(p, "current_leader_epoch", -1), p.leader_epoch)
            parts.append(R.OffsetForLeaderTopicResult.EpochEndOffset(error_code=err, partition=p.partition,
                                                                     leader_epoch=epoch, end_offset=end))
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(version=version, throttle_time_ms=0, topics=topics)


async def create_topics(broker: Broker, req: Any, version: int) -> Any:
    R = CreateTopicsResponse
    results = []
    for t in req.topics:
        configs = {c.name: c.value for c in (t.configs or [])}
        err, message = await broker.create_topic(t.name, t.num_partitions, t.replication_factor, configs,
                                                 max(req.timeout_ms, 1000) / 1000)
        results.append(R.CreatableTopicResult(name=t.name, error_code=err, error_message=message,
                                              num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                                              configs=[]))
    return R(version=version, throttle_time_ms=0, topics=results)


async def init_producer_id(broker: Broker, req: Any, version: int) -> Any:
    if not req.transactional_id:  # an idempotent producer: an id of its own, no coordinator
        return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=0,
                                      producer_id=broker.next_producer_id(), producer_epoch=0)
    pid, epoch = (req.producer_id, req.producer_epoch) if version >= 3 else (-1, -1)
    err, pid, epoch = await broker.txn.init_producer_id(req.transactional_id, req.transaction_timeout_ms, pid, epoch)
    return InitProducerIdResponse(version=version, throttle_time_ms=0, error_code=_fenced(err, version, 4),
                                  producer_id=pid, producer_epoch=epoch)


def _fenced(err: int, version: int, first_version: int) -> int:
    """KIP-588: PRODUCER_FENCED exists for clients from `first_version` of a request on; older ones are
    told INVALID_PRODUCER_EPOCH, which they also treat as fatal."""
    return rpc.INVALID_PRODUCER_EPOCH if err == rpc.PRODUCER_FENCED and version < first_version else err


async def add_partitions_to_txn(broker: Broker, req: Any, version: int) -> Any:
    wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    err = await broker.txn.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                          req.v3_and_below_producer_epoch, wanted)
    err = _fenced(err, version, 2)
    R = AddPartitionsToTxnResponse
    T = R.AddPartitionsToTxnTopicResult
    by_topic: dict[str, list[int]] = {}
    for t, p in wanted:
        by_topic.setdefault(t, []).append(p)
    return R(version=version, throttle_time_ms=0, results_by_topic_v3_and_below=[
        T(name=t, results_by_partition=[T.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=err)
                                        for p in ps]) for t, ps in by_topic.items()])


async def add_offsets_to_txn(broker: Broker, req: Any, version: int) -> Any:
    # Kafka: the group's __consumer_offsets partition joins the transaction, so its markers reach the
    # group coordinator, which makes the transaction's offsets visible on commit.
    partition = (OFFSETS_TOPIC, broker.groups.partition_for(req.group_id))
    err = await broker.txn.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch, [partition])
    return AddOffsetsToTxnResponse(version=version, throttle_time_ms=0, error_code=_fenced(err, version, 2))


def _requested_offsets(req: Any) -> tuple[list[tuple[str, int, int, int, str]], set[tuple[str, int]]]:
    """An OffsetCommit's or TxnOffsetCommit's offsets as (topic, partition, offset, leader epoch, metadata),
    and the partitions left out because their metadata is too long (OFFSET_METADATA_TOO_LARGE)."""
    offsets, too_large = [], set()
    for t in req.topics:
        for p in t.partitions:
            metadata = p.committed_metadata or ""
            if len(metadata) > MAX_METADATA_CHARS:
                too_large.add((t.name, p.partition_index))
                continue
            offsets.append((t.name, p.partition_index, p.committed_offset,
                            getattr(p, "committed_leader_epoch", -1), metadata))
    return offsets, too_large


def _commit_answers(req: Any, too_large: set[tuple[str, int]], err: int, topic_class: Any, partition_class: Any) -> list[Any]:
    """An offset commit's (or TxnOffsetCommit's) answer per requested partition: _commit_error of each."""
    return [topic_class(name=t.name, partitions=[
        partition_class(partition_index=p.partition_index,
                        error_code=_commit_error(t.name, p.partition_index, too_large, err))
        for p in t.partitions]) for t in req.topics]


def _commit_error(topic: str, partition: int, too_large: set[tuple[str, int]], err: int) -> int:
    return rpc.OFFSET_METADATA_TOO_LARGE if (topic, partition) in too_large else err


async def txn_offset_commit(broker: Broker, req: Any, version: int) -> Any:
    offsets, too_large = _requested_offsets(req)
    generation_id, member_id = (req.generation_id, req.member_id) if version >= 3 else (-1, "")
    err = await broker.txn_commit_offsets(req.group_id, req.producer_id, req.producer_epoch, generation_id,
                                          member_id, offsets, COMMIT_TIMEOUT_S)
    err = _fenced(err, version, 3)
    Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return TxnOffsetCommitResponse(version=version, throttle_time_ms=0, topics=_commit_answers(
        req, too_large, err, Topic, Topic.TxnOffsetCommitResponsePartition))


async def end_txn(broker: Broker, req: Any, version: int) -> Any:
    err = await broker.txn.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed)
    return EndTxnResponse(version=version, throttle_time_ms=0, error_code=_fenced(err, version, 2))


async def alter_partition_reassignments(broker: Broker, req: Any, version: int) -> Any:
    R = AlterPartitionReassignmentsResponse
    items = [{"topic": t.name, "partition": p.partition_index,
              "replicas": None if p.replicas is None else list(p.replicas)}
             for t in req.topics for p in t.partitions]
    try:
        resp = await broker.controller.call("alter_partition_reassignments", {"reassignments": items})
    except rpc.RpcError as e:
        resp = {"error": rpc.REQUEST_TIMED_OUT, "message": f"controller unreachable: {e}", "results": []}
    by_topic: dict[str, list] = {}
    results = {(r["topic"], r["partition"]): r for r in resp.get("results") or []}
    for it in items:
        r = results.get((it["topic"], it["partition"]), {"error": resp.get("error", rpc.UNKNOWN_SERVER_ERROR),
                                                         "message": resp.get("message")})
        by_topic.setdefault(it["topic"], []).append(R.ReassignableTopicResponse.ReassignablePartitionResponse(
            partition_index=it["partition"], error_code=r["error"], error_message=r.get("message")))
    return R(version=version, throttle_time_ms=0, error_code=0, error_message=None,
             responses=[R.ReassignableTopicResponse(name=n, partitions=ps) for n, ps in by_topic.items()])


async def list_partition_reassignments(broker: Broker, req: Any, version: int) -> Any:
    R = ListPartitionReassignmentsResponse
    try:
        resp = await broker.controller.call("list_partition_reassignments", {})
    except rpc.RpcError as e:
        return R(version=version, throttle_time_ms=0, error_code=rpc.REQUEST_TIMED_OUT,
                 error_message=f"controller unreachable: {e}", topics=[])
    if resp.get("error") != rpc.NONE:
        return R(version=version, throttle_time_ms=0, error_code=resp["error"], error_message=resp.get("message"),
                 topics=[])
    wanted = None if req.topics is None else {(t.name, p) for t in req.topics for p in t.partition_indexes}
    by_topic: dict[str, list] = {}
    for r in resp.get("reassignments") or []:
        if wanted is not None and (r["topic"], r["partition"]) not in wanted:
            continue
        by_topic.setdefault(r["topic"], []).append(R.OngoingTopicReassignment.OngoingPartitionReassignment(
            partition_index=r["partition"], replicas=r["replicas"], adding_replicas=r["adding"],
            removing_replicas=r["removing"]))
    return R(version=version, throttle_time_ms=0, error_code=0, error_message=None,
             topics=[R.OngoingTopicReassignment(name=n, partitions=ps) for n, ps in by_topic.items()])


# --- consumer groups (group_coordinator.py; Kafka's request and response schemas) -------------------------
GROUP_KEY_TYPE = 0   # FindCoordinator key_type: 0 group, 1 transaction
TXN_KEY_TYPE = 1
COMMIT_TIMEOUT_S = 5.0


async def find_coordinator(broker: Broker, req: Any, version: int) -> Any:
    R = FindCoordinatorResponse
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    found = []
    for key in keys:
        if getattr(req, "key_type", GROUP_KEY_TYPE) == TXN_KEY_TYPE:
            err, b = await broker.txn.find_coordinator(key)
        else:
            err, b = await broker.find_coordinator(key)
        found.append((key, err, b))
    if version >= 4:
        return R(version=version, throttle_time_ms=0, coordinators=[
            R.Coordinator(key=k, node_id=b.broker_id if b else -1, host=b.host if b else "", port=b.port if b else -1,
                          error_code=err, error_message=None) for k, err, b in found])
    _, err, b = found[0]
    return R(version=version, throttle_time_ms=0, error_code=err, error_message=None,
             node_id=b.broker_id if b else -1, host=b.host if b else "", port=b.port if b else -1)


async def join_group(broker: Broker, req: Any, version: int) -> Any:
    # JoinGroup v0 has no rebalance timeout: Kafka takes the session timeout for it.
    rebalance_timeout_ms = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
    result = await broker.group_wait(lambda waiter: broker.groups.join(
        waiter, req.group_id, req.member_id, req.protocol_type, protocols, req.session_timeout_ms,
        rebalance_timeout_ms, version >= 4, _now_ms()), rebalance_timeout_ms / 1000 + 5)
    if result is None:
        result = JoinResult(rpc.REBALANCE_IN_PROGRESS, member_id=req.member_id)
    R = JoinGroupResponse
    return R(version=version, throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
             protocol_type=result.protocol_type, protocol_name=result.protocol_name or "", leader=result.leader,
             skip_assignment=False, member_id=result.member_id,
             members=[R.JoinGroupResponseMember(member_id=m, group_instance_id=None, metadata=meta)
                      for m, meta in result.members])


async def sync_group(broker: Broker, req: Any, version: int) -> Any:
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    protocol_type = req.protocol_type if version >= 5 else None
    protocol_name = req.protocol_name if version >= 5 else None
    result = await broker.group_wait(lambda waiter: broker.groups.sync(
        waiter, req.group_id, req.generation_id, req.member_id, protocol_type, protocol_name, assignments,
        _now_ms()), 60.0)
    if result is None:
        result = SyncResult(rpc.REBALANCE_IN_PROGRESS)
    return SyncGroupResponse(version=version, throttle_time_ms=0, error_code=result.error,
                             protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                             assignment=result.assignment)


async def heartbeat(broker: Broker, req: Any, version: int) -> Any:
    err = broker.groups.heartbeat(req.group_id, req.generation_id, req.member_id, _now_ms())
    return HeartbeatResponse(version=version, throttle_time_ms=0, error_code=err)


async def leave_group(broker: Broker, req: Any, version: int) -> Any:
    member_ids = [m.member_id for m in req.members] if version >= 3 else [req.member_id]
    err, per_member, replies = broker.groups.leave(req.group_id, member_ids, _now_ms())
    broker.deliver(replies)  # parked requests of the members that left, and others a completed join answers
    R = LeaveGroupResponse
    if version < 3:
        return R(version=version, throttle_time_ms=0, error_code=err if err != rpc.NONE else per_member[0])
    return R(version=version, throttle_time_ms=0, error_code=err,
             members=[R.MemberResponse(member_id=m, group_instance_id=None, error_code=e)
                      for m, e in zip(member_ids, per_member, strict=True)])


async def offset_commit(broker: Broker, req: Any, version: int) -> Any:
    offsets, too_large = _requested_offsets(req)
    err = await broker.commit_offsets(req.group_id, req.generation_id_or_member_epoch, req.member_id, offsets,
                                      COMMIT_TIMEOUT_S)
    Topic = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse(version=version, throttle_time_ms=0, topics=_commit_answers(
        req, too_large, err, Topic, Topic.OffsetCommitResponsePartition))


async def offset_fetch(broker: Broker, req: Any, version: int) -> Any:
    R = OffsetFetchResponse
    if version < 8:
        err, topics = _fetch_group_offsets(broker, req.group_id, req.topics, version >= 7 and req.require_stable)
        return R(version=version, throttle_time_ms=0, error_code=err, topics=[R.OffsetFetchResponseTopic(
            name=name, partitions=[R.OffsetFetchResponseTopic.OffsetFetchResponsePartition(**p) for p in parts])
            for name, parts in topics])
    groups = []
    for g in req.groups:
        err, topics = _fetch_group_offsets(broker, g.group_id, g.topics, req.require_stable)
        G = R.OffsetFetchResponseGroup
        groups.append(G(group_id=g.group_id, error_code=err, topics=[G.OffsetFetchResponseTopics(
            name=name, partitions=[G.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(**p) for p in parts])
            for name, parts in topics]))
    return R(version=version, throttle_time_ms=0, groups=groups)


def _fetch_group_offsets(broker: Broker, group_id: str, topics: Any,
                         require_stable: bool = False) -> tuple[int, list[tuple[str, list[dict]]]]:
    """(group error, [(topic, [partition fields])]): -1 for a partition without a committed offset;
    topics None asks for every partition the group has committed. KIP-447: with require_stable, a
    partition with an offset committed in a transaction not yet ended is UNSTABLE_OFFSET_COMMIT (the
    consumer asks again) rather than the older offset, which would make it process records twice."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    err, committed = broker.groups.committed_offsets(group_id, wanted)
    if err != rpc.NONE:
        return err, []
    by_topic: dict[str, list[dict]] = {}
    for tp in (wanted if wanted is not None else sorted(committed)):
        c = committed.get(tp)
        by_topic.setdefault(tp[0], []).append({
            "partition_index": tp[1], "committed_offset": c.offset if c else -1,
            "committed_leader_epoch": c.leader_epoch if c else -1, "metadata": c.metadata if c else "",
            "error_code": rpc.UNSTABLE_OFFSET_COMMIT if require_stable and broker.groups.txn_pending(group_id, tp)
            else rpc.NONE})
    return rpc.NONE, list(by_topic.items())


def _now_ms() -> int:
    return hostenv.monotonic_ms()  # the shell's clock (server.now_ms): session timers must not jump


HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch,
            10: find_coordinator, 11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group,
            18: api_versions, 19: create_topics, 22: init_producer_id, 23: offset_for_leader_epoch,
            24: add_partitions_to_txn, 25: add_offsets_to_txn, 26: end_txn, 28: txn_offset_commit, 45: alter_partition_reassignments, 46: list_partition_reassignments}
