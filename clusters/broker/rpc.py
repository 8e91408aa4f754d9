"""The broker's internal framed RPC: controller <-> broker <-> broker, and the admin request.

Kafka clients speak the Kafka wire protocol to a broker; everything internal uses this
small JSON RPC so that the protocol's own fields travel explicitly (broker epoch, leader
epoch, partition epoch, last fetched epoch, fetch offset, diverging epoch).

Framing. Both protocols share one listening port per process. A frame is a 4-byte
big-endian length followed by the body. A Kafka request body starts with an int16
api_key; an RPC body is a JSON object and so starts with b"{" (0x7B), which as a Kafka
api_key would be >= 31488, a key Kafka never uses. `is_rpc_frame` tells them apart.

Request body:  JSON {"api": NAME, "id": correlation_id, "body": {...}} + 32-byte tag
Response body: JSON {"id": correlation_id, "body": {...}}   (body always has "error": CODE)
Binary record data (replica fetch) travels base64-encoded in the JSON.

Authentication (issue 20). The port is the Kafka port too, so any Kafka client can write an
RPC frame; a forged replica fetch would make a leader count stopped followers as caught up
(002 2.5: acks=all commits on the ISR). Every request therefore ends with a tag,
HMAC-SHA256 under the cluster's secret of REQUEST_DOMAIN + the JSON, and a node serves
only requests whose tag it can recompute (constant-time compare). The secret is made when
a cluster is started and reaches the nodes as a file of mode 0600 (`--secret-file`) or the
environment variable SECRET_ENV, never a command line. Responses carry no tag: they go back
on the connection an authenticated request came in on.

The message catalogue (fields of "body"; every response also carries "error", an int
that uses Kafka's error codes, 0 = none) is in API below, so that the controller and the
broker agree on one definition.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import os
import secrets
import socket
import stat
import struct
import sys
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv

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
    # operator -> controller: unclean recovery by hand (001 5.3.1, admin elect)
    "elect_leader": "req {topic, partition, broker_id} -> {error, message}",
    # controller <-> controller in a quorum (controller_quorum.py)
    "raft": "req {messages: [Raft message as a JSON object, ...]} -> {error}",
    # transaction coordinator -> partition leader (txn_shell.py; Kafka's WriteTxnMarkers)
    "write_txn_markers": "req {topic, partition, producer_id, producer_epoch, commit: bool, coordinator_epoch} "
    "-> {error}",
    # partition leader -> transaction coordinator (KIP-890 part 1; txn_shell.py)
    "verify_txn": "req {txn_id, producer_id, producer_epoch, topic, partition} -> {error}",
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
# Consumer groups (group_coordinator.py; Kafka's codes)
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
# Transactions (txn_coordinator.py; Kafka's codes)
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
PRODUCER_FENCED = 90
UNSTABLE_OFFSET_COMMIT = 88

_LEN = struct.Struct(">i")
# What a client accepts in one response: a state dump with the physical log of a long run is the
# largest (a node's requests are capped by its --socket-request-max-bytes, listener.Limits).
MAX_RESPONSE = 256 * 1024 * 1024

SECRET_ENV = "KAFKAESQUE_CLUSTER_SECRET"
SECRET_MIN_CHARS = 32
TAG_BYTES = hashlib.sha256().digest_size
REQUEST_DOMAIN = b"kafkaesque-rpc-request\0"  # a tag made for a request is good for nothing else
ONE_SHOT_TAG_BYTES = 64 * 1024


class RpcError(Exception):
    """The peer could not be reached, closed the connection, or timed out."""


class BadFrame(Exception):
    """A request the listener refuses; str() is the reason logged with the closed connection."""


class SecretError(Exception):
    """No usable cluster secret; str() is one sentence naming the cause and the fix."""


def is_rpc_frame(body: bytes) -> bool:
    return body[:1] == b"{"


def encode_frame(obj: dict[str, Any]) -> bytes:
    """A response frame (untagged, see the module docstring)."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    return _LEN.pack(len(data)) + data


def request_tag(secret: str, data: bytes | memoryview) -> bytes:
    if len(data) <= ONE_SHOT_TAG_BYTES:
        # One call into OpenSSL: most requests are a few hundred bytes, and the HMAC object's
        # Python layers cost more than the copy.
        return hmac.digest(secret.encode(), REQUEST_DOMAIN + data, "sha256")
    mac = hmac.new(secret.encode(), REQUEST_DOMAIN, hashlib.sha256)
    mac.update(data)
    return mac.digest()


def encode_request(api: str, cid: int, body: dict[str, Any], secret: str) -> bytes:
    """A request frame: the JSON and its tag under the cluster's secret."""
    data = json.dumps({"api": api, "id": cid, "body": body}, separators=(",", ":")).encode()
    return _LEN.pack(len(data) + TAG_BYTES) + data + request_tag(secret, data)


def open_request(frame: bytes | bytearray, secret: str) -> tuple[int, str, dict[str, Any]]:
    """(id, api, body) of an RPC request frame's body, or BadFrame: checked before anything reads it."""
    # A large frame (a bytearray, listener.py) is looked at through a view: no copy until it is known to be ours.
    view = memoryview(frame) if isinstance(frame, bytearray) else frame
    data, tag = view[:-TAG_BYTES], view[-TAG_BYTES:]
    if len(frame) <= TAG_BYTES or not hmac.compare_digest(request_tag(secret, data), tag):
        # Not one byte of an unauthenticated frame is parsed (deep JSON from a client costs nothing).
        raise BadFrame("unauthenticated internal request")
    try:
        msg = json.loads(data if isinstance(data, bytes) else bytes(data))
    except (ValueError, RecursionError) as e:
        raise BadFrame(f"internal request is not JSON ({type(e).__name__})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("body"), dict):
        raise BadFrame("internal request without a body object")
    api, cid = msg.get("api"), msg.get("id")
    if not isinstance(api, str) or api not in API:
        raise BadFrame(f"unknown internal api {str(api)[:60]!r}")
    if not isinstance(cid, int) or isinstance(cid, bool):
        raise BadFrame("internal request without an integer id")
    return cid, api, msg["body"]


# --- the cluster's secret ----------------------------------------------------------------------
def new_secret() -> str:
    return secrets.token_hex(32)


def _checked_secret(text: str, where: str) -> str:
    text = text.strip()
    if len(text) < SECRET_MIN_CHARS:
        raise SecretError(f"{where} holds no cluster secret of at least {SECRET_MIN_CHARS} characters; "
                          "write one there (e.g. `python3 -c 'import secrets; print(secrets.token_hex(32))'`).")
    return text


def read_secret_file(path: str) -> str:
    """The secret in `path`, which only its owner may read (like ssh's private keys)."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SecretError(f"cannot read the cluster secret file {path} ({getattr(e, 'strerror', None) or e}); "
                          "give the path of the file the cluster was started with.") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(f"the cluster secret file {path} is open to other users (mode {stat.S_IMODE(mode):04o}); "
                          f"make it private with `chmod 600 {path}`.")
    return _checked_secret(text, f"the cluster secret file {path}")


def write_secret_file(path: str, secret: str) -> None:
    """Write `secret` to a new file of mode 0600 (never readable by others, not even for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
        os.write(fd, (secret + "\n").encode())
    finally:
        os.close(fd)


def env_secret() -> str:
    """The secret in SECRET_ENV (how processes started on this machine share it), or SecretError."""
    text = os.environ.get(SECRET_ENV)
    if text is None:
        raise SecretError(f"no cluster secret: give --secret-file PATH (the cluster's secret file, mode 0600) "
                          f"or set {SECRET_ENV}; the nodes serve internal requests only with it.")
    return _checked_secret(text, f"the environment variable {SECRET_ENV}")


def node_secret(secret_file: str | None) -> str:
    """A node's or an operator command's secret: the file if one is named, else the environment."""
    return read_secret_file(secret_file) if secret_file else env_secret()



def cli_secret(args: Any) -> str | None:
    """An admin command's secret (--secret-file, else the environment), or None after printing why not."""
    try:
        return node_secret(args.secret_file)
    except SecretError as e:
        print(f"error: {e}", file=sys.stderr)
        return None

def process_secret() -> str:
    """This process's secret for the processes it starts on this machine: SECRET_ENV, made now if it
    is not set, so that children inherit it (clusters/broker/local_cluster.py)."""
    if SECRET_ENV not in os.environ:
        os.environ[SECRET_ENV] = new_secret()
    return env_secret()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """Read one length-prefixed response; raises asyncio.IncompleteReadError on EOF, ValueError on a bad length."""
    header = await reader.readexactly(4)
    (n,) = _LEN.unpack(header)
    if n < 0 or n > MAX_RESPONSE:
        raise ValueError(f"response length {n} out of range")
    return await reader.readexactly(n)


class RpcClient:
    """One persistent connection to a peer, with pipelined request/response by correlation id.

    Reconnects lazily after a failure. Every call has a timeout; on timeout or disconnect it
    raises RpcError and the connection is dropped (a partitioned peer must not wedge us).
    """

    def __init__(self, host: str, port: int, secret: str, connect_timeout: float = 1.0):
        self.host, self.port = host, port
        self.secret = secret
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
                    hostenv.open_connection(self.host, self.port), self.connect_timeout
                )
            except (TimeoutError, OSError) as e:
                raise RpcError(f"cannot connect to {self.host}:{self.port}: {e}") from None
            self._reader_task = asyncio.create_task(self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                msg = json.loads(await read_response(reader))
                fut = self._pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg.get("body", {}))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, OSError, RecursionError, AttributeError):
            pass  # EOF, a reset or a response we cannot read: the calls waiting on it fail below
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
            self._writer.write(encode_request(api, cid, body, self.secret))
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


def call_sync(host: str, port: int, api: str, body: dict[str, Any], timeout: float = 5.0,
              secret: str | None = None) -> dict[str, Any]:
    """A blocking one-shot RPC, for the admin CLI and the harness (no event loop needed). Without
    `secret`, the one in SECRET_ENV (RpcError when there is none)."""
    try:
        key = secret if secret is not None else env_secret()
    except SecretError as e:
        raise RpcError(str(e)) from None
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(encode_request(api, 1, body, key))
            header = _recv_exact(s, 4)
            (n,) = _LEN.unpack(header)
            if n < 0 or n > MAX_RESPONSE:
                raise ValueError(f"response length {n} out of range")
            msg = json.loads(_recv_exact(s, n))
            return msg.get("body", {})
    except ConnectionError as e:
        # A node closes the connection without an answer when the request's tag is wrong.
        raise RpcError(f"{api} to {host}:{port} failed: {e} (a node that is up closes it when the cluster "
                       "secret differs)") from None
    except (OSError, ValueError, RecursionError) as e:
        raise RpcError(f"{api} to {host}:{port} failed: {e}") from None


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)
