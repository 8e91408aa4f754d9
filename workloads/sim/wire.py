"""One connection to one broker, over any asyncio-streams connector: the Kafka wire protocol with
kafka-python's generated protocol classes (the classes the reference broker's kafka_api.py decodes with).

`open_connection(host, port) -> (reader, writer)` is asyncio's own or the simulator's network (clusters/sim/):
nothing here reads a clock but the running loop's, so the same code runs on loopback and in virtual time.
A connection negotiates its API versions with ApiVersions first (the highest both sides have, as kafka-python
does), then pipelines requests: each carries a correlation id, one reader task hands each response to the
request that waits for it. A request that gets no answer in its timeout closes the connection, and every request still waiting on it
fails with RequestTimedOutError ("Request timed out after N ms", kafka-python's connection `_request_timed_out`);
a connection that fails fails them with KafkaConnectionError. Either way whether the broker acted on them is
unknown (CONNECTION_ERRORS).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import kafka.errors as Errors
from kafka.protocol.metadata import ApiVersionsRequest

OpenConnection = Callable[[str, int], Awaitable[tuple[Any, Any]]]  # asyncio.open_connection's shape
CONNECTION_ERRORS = (Errors.KafkaConnectionError, Errors.RequestTimedOutError)  # a request lost with its connection
CLIENT_SOFTWARE = ("kafkaesque-sim", "1")


def error_for(code: int, detail: str = "") -> Errors.KafkaError:
    """The exception kafka-python raises for a protocol error code (its class names are what the real
    workloads' histories carry: NotLeaderForPartitionError, NotEnoughReplicasError, ...)."""
    return Errors.for_code(code)(detail) if detail else Errors.for_code(code)()


class BrokerConnection:
    """A connection to one broker (`node`: its id, or a bootstrap address before metadata named it)."""

    def __init__(self, open_connection: OpenConnection, host: str, port: int, client_id: str, node: Any = None):
        self.open_connection, self.host, self.port, self.client_id = open_connection, host, port, client_id
        self.node = node
        self.versions: dict[int, int] = {}  # api key -> the version requests of it are sent at
        self._reader: Any = None
        self._writer: Any = None
        self._pending: dict[int, tuple[Any, asyncio.Future]] = {}  # correlation id -> (response class, answer)
        self._next_id = 1
        self._read_task: asyncio.Task | None = None
        self.closed = False

    async def connect(self, timeout_s: float) -> None:
        """Open the stream and negotiate versions; KafkaConnectionError when either fails."""
        try:
            self._reader, self._writer = await asyncio.wait_for(self.open_connection(self.host, self.port), timeout_s)
        except (TimeoutError, OSError) as e:
            self.closed = True
            raise Errors.KafkaConnectionError(f"connect to {self.host}:{self.port}: {type(e).__name__}: {e}") from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        self.versions = {18: ApiVersionsRequest.max_version}
        answer = await self.request(ApiVersionsRequest, timeout_s, client_software_name=CLIENT_SOFTWARE[0],
                                    client_software_version=CLIENT_SOFTWARE[1])
        if answer.error_code != 0:  # KIP-511: a broker that does not know our version answers v0 with its range
            self.versions = {18: 0}
            answer = await self.request(ApiVersionsRequest, timeout_s)
        self.versions = negotiated_versions({k.api_key: (k.min_version, k.max_version) for k in answer.api_keys})

    async def request(self, request_class: Any, timeout_s: float, **fields: Any) -> Any:
        """Send one request at the negotiated version and wait for its response (decoded). Raises
        KafkaConnectionError if the connection fails, RequestTimedOutError if the answer does not come in
        `timeout_s` (the connection is then closed);
        UnsupportedVersionError if the broker does not serve the api."""
        if self.closed:
            raise Errors.KafkaConnectionError(f"connection to {self.host}:{self.port} is closed")
        version = self.versions.get(request_class.API_KEY)
        if version is None:
            raise Errors.UnsupportedVersionError(f"broker {self.node} does not serve api {request_class.API_KEY}")
        req = request_class[version](**fields)
        correlation_id, self._next_id = self._next_id, self._next_id + 1
        req.with_header(correlation_id=correlation_id, client_id=self.client_id)
        answer: asyncio.Future = asyncio.get_running_loop().create_future()
        response_class = _response_class(request_class)[version]
        expects = req.expect_response()
        if expects:
            self._pending[correlation_id] = (response_class, answer)
        try:
            self._writer.write(bytes(req.encode(header=True, framed=True)))
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self.close(f"write failed: {e}")
            raise Errors.KafkaConnectionError(f"send to {self.host}:{self.port}: {e}") from None
        if not expects:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(answer), timeout_s)
        except TimeoutError:
            error = Errors.RequestTimedOutError(f"Request timed out after {int(timeout_s * 1000)} ms")
            self.close("request timed out", error)
            raise error from None

    async def _read_loop(self) -> None:
        try:
            while True:
                size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                payload = await self._reader.readexactly(size)
                (correlation_id,) = struct.unpack_from(">i", payload, 0)
                waiting = self._pending.pop(correlation_id, None)
                if waiting is None:
                    continue  # an answer to a request that timed out: nobody waits for it
                response_class, answer = waiting
                if not answer.done():
                    try:
                        answer.set_result(response_class.decode(payload, header=True))
                    except Exception as e:  # noqa: BLE001 - an undecodable answer fails its request
                        answer.set_exception(Errors.KafkaProtocolError(f"cannot decode: {e!r}"[:300]))
        except (asyncio.IncompleteReadError, OSError, ConnectionError) as e:
            self.close(f"read failed: {type(e).__name__}")
        except asyncio.CancelledError:
            self.close("cancelled")
            raise

    def close(self, why: str = "closed", error: Errors.KafkaError | None = None) -> None:
        """Close the stream; every request still waiting fails with `error` (a KafkaConnectionError naming
        `why` when none is given)."""
        if self.closed and not self._pending:
            return
        self.closed = True
        for _, answer in self._pending.values():
            if not answer.done():
                answer.set_exception(error if error is not None else
                                     Errors.KafkaConnectionError(f"connection to {self.host}:{self.port}: {why}"))
                answer.exception()  # retrieved here: a waiter that already gave up must not warn
        self._pending.clear()
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - closing a dead stream
                pass
        task = self._read_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()


def negotiated_versions(broker: dict[int, tuple[int, int]]) -> dict[int, int]:
    """api key -> the highest version both the broker and kafka-python's classes have (none: not used)."""
    out = {}
    for key, (low, high) in broker.items():
        cls = _REQUEST_CLASSES.get(key)
        if cls is None:
            continue
        version = min(high, cls.max_version)
        if version >= low:
            out[key] = version
    return out


def _response_class(request_class: Any) -> Any:
    return _RESPONSE_CLASSES[request_class.API_KEY]


def _classes() -> tuple[dict[int, Any], dict[int, Any]]:
    """The APIs the simulated clients speak: api key -> kafka-python's request class, and its response class."""
    from kafka.protocol import consumer, metadata, producer
    from kafka.protocol.consumer import group
    from kafka.protocol.producer import transaction

    apis = [(metadata, "ApiVersions"), (metadata, "Metadata"), (producer, "Produce"), (consumer, "Fetch"),
            (consumer, "ListOffsets"), (consumer, "OffsetForLeaderEpoch"), (metadata, "FindCoordinator"),
            (group, "JoinGroup"), (group, "SyncGroup"), (group, "Heartbeat"), (group, "LeaveGroup"),
            (group, "OffsetCommit"), (group, "OffsetFetch"), (producer, "InitProducerId"),
            (transaction, "AddPartitionsToTxn"), (transaction, "AddOffsetsToTxn"), (transaction, "EndTxn"),
            (transaction, "TxnOffsetCommit")]
    requests = {getattr(m, f"{api}Request").API_KEY: getattr(m, f"{api}Request") for m, api in apis}
    responses = {getattr(m, f"{api}Request").API_KEY: getattr(m, f"{api}Response") for m, api in apis}
    return requests, responses


_REQUEST_CLASSES, _RESPONSE_CLASSES = _classes()
