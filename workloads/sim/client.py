"""The network client of one simulated process: its connections to the brokers and its view of the cluster
(kafka-python's KafkaClient and ClusterMetadata, on asyncio).

Metadata follows kafka-python: bootstrap from any of the addresses given (the seeded RNG picks which, as
kafka-python's least-loaded node is a matter of timing), a refresh when the cached view is older than
`metadata_max_age_s` or when a request was answered NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE, a fenced leader epoch, or its connection failed (`request_update`). kafka-python takes
whatever the last Metadata answer says, an older leader epoch too (docs/FINDINGS.md, kafka-python 1): so does
this view, and each change of a partition's leader or leader epoch is told to the listeners (the consumer's
`leader` client events).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from kafkaesque_harness.workloads.sim.wire import (
    CONNECTION_ERRORS,
    BrokerConnection,
    OpenConnection,
    error_for,
)

REQUEST_TIMEOUT_S = 3.0      # request_timeout_ms=3000 of the real workloads' clients
METADATA_MAX_AGE_S = 2.0     # metadata_max_age_ms=2000
RECONNECT_BACKOFF_S = 0.05   # reconnect_backoff_ms (kafka-python's default 50 ms, up to 500 ms)
RETRY_BACKOFF_S = 0.1        # retry_backoff_ms (kafka-python's default 100 ms)

# Answers after which kafka-python asks for fresh metadata (errors.InvalidMetadataError and its kin).
STALE_METADATA_ERRORS = (Errors.NotLeaderForPartitionError, Errors.UnknownTopicOrPartitionError,
                         Errors.LeaderNotAvailableError, Errors.FencedLeaderEpochError,
                         Errors.UnknownLeaderEpochError, *CONNECTION_ERRORS)


def parse_bootstrap(bootstrap: str | list[str]) -> list[tuple[str, int]]:
    """"host:port,host:port" (or a list of them) -> [(host, port)]."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        host, _, port = item.strip().rpartition(":")
        out.append((host, int(port)))
    return out


class ClusterClient:
    """Connections by broker id and the cached metadata of the topics asked about."""

    def __init__(self, open_connection: OpenConnection, bootstrap: str | list[str], client_id: str,
                 rng: random.Random, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 metadata_max_age_s: float = METADATA_MAX_AGE_S):
        self.open_connection, self.client_id, self.rng = open_connection, client_id, rng
        self.bootstrap = parse_bootstrap(bootstrap)
        self.request_timeout_s, self.metadata_max_age_s = request_timeout_s, metadata_max_age_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, partition) -> (leader, leader epoch)
        self.partitions: dict[str, list[int]] = {}
        self.topics: set[str] = set()
        self.listeners: list[Callable[[str, int, tuple[int, int] | None, tuple[int, int]], None]] = []
        self._connections: dict[Any, BrokerConnection] = {}
        self._connecting: dict[Any, asyncio.Future] = {}
        self._updated_at: float | None = None
        self._update_wanted = True
        self._refresh: asyncio.Future | None = None
        self.closed = False

    # --- connections ---------------------------------------------------------------------------------------
    async def connection(self, node: Any) -> BrokerConnection:
        """The open connection to broker `node` (an id, or a bootstrap (host, port)), connecting if needed."""
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return conn
        if self.closed:
            raise Errors.KafkaConnectionError("the client is closed")
        address = node if isinstance(node, tuple) else self.brokers.get(node)
        if address is None:
            raise Errors.KafkaConnectionError(f"broker {node} is not in the metadata")
        pending = self._connecting.get(node)
        if pending is None:  # one connect per broker at a time, as kafka-python's one connection per node
            pending = asyncio.ensure_future(self._connect(node, address))
            self._connecting[node] = pending
            pending.add_done_callback(lambda _f, n=node: self._connecting.pop(n, None))
        return await asyncio.shield(pending)

    async def _connect(self, node: Any, address: tuple[str, int]) -> BrokerConnection:
        conn = BrokerConnection(self.open_connection, address[0], address[1], self.client_id, node)
        try:
            await conn.connect(self.request_timeout_s)
        except Errors.KafkaError:
            conn.close("connect failed")
            await asyncio.sleep(RECONNECT_BACKOFF_S)
            raise
        self._connections[node] = conn
        return conn

    async def send(self, node: Any, request_class: Any, timeout_s: float | None = None, **fields: Any) -> Any:
        """One request to `node`; a failed connection asks for fresh metadata (the leader may have moved)."""
        try:
            conn = await self.connection(node)
            return await conn.request(request_class, timeout_s if timeout_s is not None else self.request_timeout_s,
                                      **fields)
        except CONNECTION_ERRORS:
            self.request_update()
            raise

    def close(self) -> None:
        self.closed = True
        for conn in list(self._connections.values()):
            conn.close("client closed")
        self._connections.clear()

    # --- metadata ------------------------------------------------------------------------------------------
    def request_update(self) -> None:
        self._update_wanted = True

    def stale(self) -> bool:
        if self._update_wanted or self._updated_at is None:
            return True
        return asyncio.get_running_loop().time() - self._updated_at >= self.metadata_max_age_s

    async def ensure_metadata(self, topics: list[str]) -> None:
        """Refresh the metadata if it is stale or does not cover `topics`."""
        if self.stale() or not set(topics) <= self.topics:
            await self.refresh_metadata(topics)

    async def refresh_metadata(self, topics: list[str]) -> None:
        """One Metadata request (shared by concurrent callers) to a broker the RNG picks among the known ones
        (the bootstrap addresses before any answer); raises the connection's error when it fails."""
        self.topics |= set(topics)
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._refresh_once(sorted(self.topics)))
        await asyncio.shield(self._refresh)

    async def _refresh_once(self, topics: list[str]) -> None:
        candidates: list[Any] = sorted(self.brokers) or list(self.bootstrap)
        node = candidates[self.rng.randrange(len(candidates))]
        answer = await self.send(node, MetadataRequest, topics=[MetadataRequest.MetadataRequestTopic(name=t)
                                                                 for t in topics],
                                 allow_auto_topic_creation=False)
        self.apply_metadata(answer)

    def apply_metadata(self, answer: Any) -> None:
        """Take a Metadata answer as kafka-python does: whatever it says replaces the cached view."""
        self.brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        for t in answer.topics:
            if t.error_code != 0:
                continue
            self.partitions[t.name] = sorted(p.partition_index for p in t.partitions)
            for p in t.partitions:
                key = (t.name, p.partition_index)
                now = (p.leader_id, p.leader_epoch)
                before = self.leaders.get(key)
                self.leaders[key] = now
                if before != now:
                    for listener in self.listeners:
                        listener(t.name, p.partition_index, before, now)
        self._updated_at = asyncio.get_running_loop().time()
        self._update_wanted = False

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) in the cached view; None when unknown or leaderless."""
        found = self.leaders.get((topic, partition))
        return found if found is not None and found[0] >= 0 else None

    async def leader_for(self, topic: str, partition: int) -> tuple[int, int]:
        """The partition's leader, refreshing the metadata once if it is unknown; LeaderNotAvailableError else."""
        await self.ensure_metadata([topic])
        found = self.leader(topic, partition)
        if found is None:
            self.request_update()
            await self.refresh_metadata([topic])
            found = self.leader(topic, partition)
        if found is None:
            raise Errors.LeaderNotAvailableError(f"no leader for {topic}-{partition}")
        return found

    async def find_coordinator(self, key: str, key_type: int) -> int:
        """The broker id coordinating a group (key_type 0) or a transactional id (1); the protocol's error
        (COORDINATOR_NOT_AVAILABLE, ...) raised as kafka-python's exception."""
        await self.ensure_metadata(sorted(self.topics))
        candidates: list[Any] = sorted(self.brokers) or list(self.bootstrap)
        node = candidates[self.rng.randrange(len(candidates))]
        conn = await self.connection(node)
        if conn.versions.get(FindCoordinatorRequest.API_KEY, 0) >= 4:
            answer = await self.send(node, FindCoordinatorRequest, key_type=key_type, coordinator_keys=[key])
            c = answer.coordinators[0]
            error, node_id, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            answer = await self.send(node, FindCoordinatorRequest, key=key, key_type=key_type)
            error, node_id, host, port = answer.error_code, answer.node_id, answer.host, answer.port
        if error != 0:
            raise error_for(error, f"FindCoordinator({key!r})")
        self.brokers.setdefault(node_id, (host, port))
        return node_id
