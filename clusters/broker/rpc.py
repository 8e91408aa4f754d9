"""The broker's internal framed RPC: controller <-> broker <-> broker, and the admin request.

Kafka clients speak the Kafka wire protocol to a broker; everything internal uses this
small JSON RPC so that the protocol's own fields travel explicitly (broker epoch, leader
epoch, partition epoch, last fetched epoch, fetch offset, diverging epoch).

Framing. Both protocols share one listening port per process. A frame is a 4-byte
big-endian length followed by the body. A Kafka request body starts with an int16
api_key; an RPC body is a JSON object and so starts with b"{" (0x7B), which as a Kafka
api_key would be >= 31488, a key Kafka never uses. `is_rpc_frame` tells them apart.

Request body:  {"api": NAME, "id": correlation_id, "body": {...}}
Response body: {"id": correlation_id, "body": {...}}   (body always has "error": CODE)
Binary record data (replica fetch) travels base64-encoded in the JSON.

The message catalogue (fields of "body"; every response also carries "error", an int
that uses Kafka's error codes, 0 = none) is in API below, so that the controller and the
broker agree on one definition.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import socket
import struct
from typing import Any

# --- the message catalogue ---------------------------------------------------------------
API: dict[str, str] = {
    # broker -> controller (002 1.2.2, PROTOCOL.md 5)
    "broker_registration": "req {broker_id, incarnation_id, host, port, previous_broker_epoch (-1 if no "
    "clean-shutdown file)} -> {error, broker_epoch}",
    "broker_heartbeat": "req {broker_id, broker_epoch, want_fence, want_shutdown, metadata_offset} -> "
    "{error, is_fenced, should_shutdown}",
    "fetch_metadata": "req {broker_id, offset (next offset wanted), max_records, max_wait_ms (long poll: "
    "answer at once when records exist, else when one arrives or the wait ends)} -> "
    "{error, records: [[offset, record], ...], end_offset}",
    "alter_partition": "req {broker_id, broker_epoch, topic, partition, leader_epoch, partition_epoch, "
    "new_isr: [{broker_id, broker_epoch}] (broker_epoch -1 for existing members)} -> "
    "{error, partition: partition record fields}",
    "create_topic": "req {topic, partitions, replication_factor, configs: {min.insync.replicas: N, ...}} -> "
    "{error, message}",
    # operator -> controller (PROTOCOL.md 7; controller.py)
    "alter_partition_reassignments": "req {reassignments: [{topic, partition, replicas: [ids] | null (cancel)}]} "
    "-> {error, results: [{topic, partition, error, message}]}",
    "list_partition_reassignments": "req {} -> {error, reassignments: [{topic, partition, replicas, target, "
    "adding, removing}]}",
    "elect_preferred_leaders": "req {partitions: [{topic, partition}] | null (all)} -> {error, results: "
    "[{topic, partition, error, message, leader}]}",
    "unregister_broker": "req {broker_id} -> {error, message}",
    "get_replica_log_info": "controller -> broker: req {topic, partition} -> {error, last_epoch, log_end_offset, "
    "broker_epoch}",
    # broker -> leader broker (002 2.2, PROTOCOL.md 2)
    "replica_fetch": "req {replica_id, broker_epoch, topic, partition, fetch_offset, last_fetched_epoch, "
    "current_leader_epoch, max_bytes} -> {error, high_watermark, log_start_offset, "
    "diverging_epoch: {epoch, end_offset} | null, records: base64 of record batches}",
    # harness / operator -> any node
    "dump_state": "req {include_log: bool} -> {error, state: see the node's dump_state docs}",
}

# Kafka error codes used on both protocols (same numbers as Apache Kafka's Errors enum).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
STALE_CONTROLLER_EPOCH = 11
NOT_CONTROLLER = 41
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REPLICATION_FACTOR = 38
TOPIC_ALREADY_EXISTS = 36
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
STALE_BROKER_EPOCH = 77
INELIGIBLE_REPLICA = 107
NEW_LEADER_ELECTED = 106
INVALID_UPDATE_VERSION = 108  # stale partition epoch in AlterPartition
# Reassignment and preferred-leader election (PROTOCOL.md 7; Kafka's codes)
INVALID_REPLICA_ASSIGNMENT = 39
REASSIGNMENT_IN_PROGRESS = 60
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
UNKNOWN_SERVER_ERROR = -1
BROKER_ID_NOT_REGISTERED = 102
DUPLICATE_BROKER_REGISTRATION = 101

_LEN = struct.Struct(">i")
MAX_FRAME = 64 * 1024 * 1024


class RpcError(Exception):
    """The peer could not be reached, closed the connection, or timed out."""


def is_rpc_frame(body: bytes) -> bool:
    return body[:1] == b"{"


def encode_frame(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return _LEN.pack(len(data)) + data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """Read one length-prefixed frame; raises asyncio.IncompleteReadError on EOF, ValueError on a bad length."""
    header = await reader.readexactly(4)
    (n,) = _LEN.unpack(header)
    if n < 0 or n > MAX_FRAME:
        raise ValueError(f"frame length {n} out of range")
    return await reader.readexactly(n)


class RpcClient:
    """One persistent connection to a peer, with pipelined request/response by correlation id.

    Reconnects lazily after a failure. Every call has a timeout; on timeout or disconnect it
    raises RpcError and the connection is dropped (a partitioned peer must not wedge us).
    """

    def __init__(self, host: str, port: int, connect_timeout: float = 1.0):
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._reader_task: asyncio.Task | None = None
        self._connect_lock = asyncio.Lock()

    async def _ensure_connected(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            return
        async with self._connect_lock:
            if self._writer is not None and not self._writer.is_closing():
                return
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self.connect_timeout
                )
            except (TimeoutError, OSError) as e:
                raise RpcError(f"cannot connect to {self.host}:{self.port}: {e}") from None
            self._reader_task = asyncio.create_task(self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                body = await read_frame(reader)
                msg = json.loads(body)
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg.get("body", {}))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, OSError):
            pass
        finally:
            self._fail_pending(RpcError(f"connection to {self.host}:{self.port} lost"))

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    async def call(self, api: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        await self._ensure_connected()
        cid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        assert self._writer is not None
        try:
            self._writer.write(encode_frame({"api": api, "id": cid, "body": body}))
            await self._writer.drain()
        except (ConnectionError, OSError) as e:
            self._pending.pop(cid, None)
            self._fail_pending(RpcError(str(e)))
            raise RpcError(f"send to {self.host}:{self.port} failed: {e}") from None
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self._pending.pop(cid, None)
            self._fail_pending(RpcError("timeout"))
            raise RpcError(f"{api} to {self.host}:{self.port} timed out after {timeout}s") from None

    async def close(self) -> None:
        self._fail_pending(RpcError("closed"))
        if self._reader_task is not None:
            self._reader_task.cancel()


def call_sync(host: str, port: int, api: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """A blocking one-shot RPC, for the admin CLI and the harness (no event loop needed)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(encode_frame({"api": api, "id": 1, "body": body}))
            header = _recv_exact(s, 4)
            (n,) = _LEN.unpack(header)
            msg = json.loads(_recv_exact(s, n))
            return msg.get("body", {})
    except (OSError, ValueError) as e:
        raise RpcError(f"{api} to {host}:{port} failed: {e}") from None


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)
