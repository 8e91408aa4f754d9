"""The listeners' guards (issue 20; docs/SAFETY.md): what one connection, and all of them together,
may cost a node, and what ends a connection.

One listener per node process. A broker's port speaks the Kafka protocol to clients and the
internal RPC (rpc.py) to its peers, the controller and the harness; a controller's port speaks
only the internal RPC. Every frame passes here before a protocol handler sees it:

- length: 1 .. Limits.request_max_bytes (Kafka's socket.request.max.bytes); any other length
  closes the connection before a byte of the body is read;
- memory: the announced length is reserved in the node's MemoryPool (Kafka's
  queued.max.request.bytes) before the body is read and given back once the request is
  answered; while the pool is full a connection is not read (Kafka mutes it the same way).
  One connection holds at most request_max_bytes of requests and max_in_flight requests;
- time: a body must arrive within read_timeout_s once it is being read; a connection with
  nothing in flight and no activity for connections_max_idle_ms is closed. One sweep a second
  (or more often for short limits) checks both, as Kafka's selector does, rather than a timer
  around every read (asyncio.timeout costs about 4.5 us a read, two reads a request);
- connections: beyond max_connections (Kafka's max.connections) a new one is closed at once;
- content: an RPC frame must carry the tag of the cluster's secret and name a known api
  (rpc.open_request); a Kafka frame must decode as a request of an api and version the node
  serves (the `kafka_decode` given; a controller has none and refuses Kafka frames).

A refused request closes its connection and writes exactly one JSON line (event
"bad_request", with the reason); so does a handler that raises on a request it cannot serve
(a missing field, a wrong type). Nothing that happens while serving a connection reaches the
event loop's exception handler; `log_loop_exceptions` turns anything else that would into a
JSON line too.
"""

from __future__ import annotations

import asyncio
import signal
import struct
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, rpc
from kafkaesque_harness.clusters.broker.code_digest import ROOT as CODE_ROOT
from kafkaesque_harness.clusters.broker.code_digest import node_code_digest

MiB = 1024 * 1024
_LEN = struct.Struct(">i")
REFUSAL_LOG_INTERVAL_S = 1.0  # refused connections are counted and logged at most once a second
DRAIN_ON_EOF_S = 0.5  # answers computed when a client half-closes still go out, for this long
READ_CHUNK = 256 * 1024  # a body is taken from the stream in pieces of at most this size

Log = Callable[[dict[str, Any]], None]
RpcDispatch = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
KafkaDecode = Callable[[bytes], Any]
KafkaRespond = Callable[[Any], Coroutine[Any, Any, bytes | None]]


@dataclass(frozen=True)
class Limits:
    """The caps of one node's listener; the flags of both roles (clusters/broker/__main__.py)."""

    request_max_bytes: int = 16 * MiB  # --socket-request-max-bytes (Kafka: 100 MiB)
    queued_max_request_bytes: int = 64 * MiB  # --queued-max-request-bytes (Kafka: unbounded)
    max_connections: int = 512  # --max-connections (Kafka: unbounded)
    connections_max_idle_ms: int = 600_000  # --connections-max-idle-ms (Kafka's default)
    read_timeout_s: float = 30.0  # a request's bytes all arrive within this once its body is being read
    max_in_flight: int = 32  # requests of one connection being served at once (clients pipeline <= 5)

    @classmethod
    def from_args(cls, args: Any) -> Limits:
        """The flags' values; a flag missing from `args` (built by hand, as in tests) keeps its default."""
        d = cls()
        return cls(request_max_bytes=getattr(args, "socket_request_max_bytes", d.request_max_bytes),
                   queued_max_request_bytes=getattr(args, "queued_max_request_bytes", d.queued_max_request_bytes),
                   max_connections=getattr(args, "max_connections", d.max_connections),
                   connections_max_idle_ms=getattr(args, "connections_max_idle_ms", d.connections_max_idle_ms))

    def problem(self) -> str | None:
        """One sentence naming the flag to fix, or None."""
        if self.request_max_bytes < 1024:
            return "--socket-request-max-bytes must be at least 1024 (a Kafka request header and a small request)"
        if self.queued_max_request_bytes < self.request_max_bytes:
            return ("--queued-max-request-bytes must be at least --socket-request-max-bytes, so that one request of "
                    "the largest size fits")
        if self.max_connections < 1:
            return "--max-connections must be at least 1"
        if self.connections_max_idle_ms <= 0:
            return "--connections-max-idle-ms must be a positive number of milliseconds"
        return None


class MemoryPool:
    """Bytes of requests every connection of a node holds (being read, or read and not yet answered)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0
        self._freed = asyncio.Event()

    def try_reserve(self, n: int) -> bool:
        if self.used + n > self.capacity:
            return False
        self.used += n
        return True

    async def reserve(self, n: int) -> None:
        """Wait until `n` more bytes fit (n <= capacity, which Limits.problem guarantees)."""
        while self.used + n > self.capacity:
            self._freed.clear()
            await self._freed.wait()
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n
        self._freed.set()


class Listener:
    """A node's listening port: accepts connections within the caps and serves each frame that passes."""

    def __init__(self, limits: Limits, secret: str, log: Log, rpc_dispatch: RpcDispatch,
                 kafka_decode: KafkaDecode | None = None, kafka_respond: KafkaRespond | None = None):
        self.limits = limits
        self.secret = secret
        self.log = log
        self.rpc_dispatch = rpc_dispatch
        self.kafka_decode, self.kafka_respond = kafka_decode, kafka_respond
        self.pool = MemoryPool(limits.queued_max_request_bytes)
        self.connections = 0
        self.open: set[Connection] = set()
        self._refused = 0
        self._refusal_logged_at = float("-inf")
        self._sweeper: asyncio.Task | None = None

    async def start(self, host: str, port: int) -> asyncio.Server:
        server = await hostenv.start_server(self.serve, host, port, reuse_address=True)
        self._sweeper = asyncio.create_task(self._sweep(server))
        return server

    async def _sweep(self, server: asyncio.Server) -> None:
        """Close connections whose body is late or which idle (Connection.expire), until the server closes."""
        interval = min(1.0, self.limits.read_timeout_s / 4, self.limits.connections_max_idle_ms / 4000)
        while server.is_serving():
            await asyncio.sleep(interval)
            now = hostenv.monotonic_s()
            for conn in list(self.open):
                conn.expire(now)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connections >= self.limits.max_connections:
            self._refuse_connection(writer)
            return
        self.connections += 1
        conn = Connection(self, reader, writer)
        self.open.add(conn)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # the server is shutting down (asyncio.run cancels the handlers): end quietly
        except Exception as e:  # noqa: BLE001 - whatever it is, it ends this connection only, logged once
            conn.reject("internal error serving the connection", error=repr(e)[:300])
        finally:
            self.connections -= 1
            self.open.discard(conn)
            conn.shut()

    def _refuse_connection(self, writer: asyncio.StreamWriter) -> None:
        writer.close()
        self._refused += 1
        now = hostenv.monotonic_s()
        if now - self._refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:
            self.log({"event": "connections_refused", "count": self._refused, "open": self.connections,
                      "limit": self.limits.max_connections, "flag": "--max-connections"})
            self._refused, self._refusal_logged_at = 0, now


class Connection:
    """One client's or peer's connection. Kafka answers go out in request order (Kafka's rule), but
    requests are served concurrently (an acks=all produce must not hold up the fetches behind it);
    RPC answers go out as they are ready, matched by id."""

    def __init__(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.listener, self.limits = listener, listener.limits
        self.reader, self.writer = reader, writer
        self.peer = str(writer.get_extra_info("peername"))
        self.closed = False  # refused: logged, closing, nothing more is read or logged
        self.held = 0  # bytes of this connection's requests reserved in the pool
        self.in_flight = 0
        self._progress = asyncio.Event()  # a request of this connection was answered
        self._order: asyncio.Queue[tuple[asyncio.Task, int]] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._write_lock = asyncio.Lock()
        self._reading: asyncio.Task | None = None
        self._writing: asyncio.Task | None = None
        self._shut = False
        self.last_active = hostenv.monotonic_s()  # a request read or an answer written
        self.body: tuple[float, int] | None = None  # (since, length) of the body being read
        self.body_received = 0

    # --- the connection's life --------------------------------------------------------------------
    async def run(self) -> None:
        self._writing = asyncio.create_task(self._write_kafka_answers())
        self._reading = asyncio.create_task(self._read_requests())
        try:
            await self._reading
        except asyncio.CancelledError:
            if not self.closed:
                raise  # the server is shutting down, not a refusal
            return
        # EOF after the last request (a client that half-closes): answers being computed still go out.
        deadline = hostenv.monotonic_s() + DRAIN_ON_EOF_S
        while self.in_flight and not self.closed and hostenv.monotonic_s() < deadline:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), deadline - hostenv.monotonic_s())
            except TimeoutError:
                break

    def reject(self, reason: str, **fields: Any) -> None:
        """Refuse this connection: one JSON line, then close. Later calls (the fallout) say nothing."""
        if self.closed:
            return
        self.closed = True
        self.listener.log({"event": "bad_request", "peer": self.peer, "reason": reason, **fields,
                           "action": "connection closed"})
        self.writer.close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()

    def expire(self, now: float) -> None:
        """The listener's sweep: a body that is late is refused; an idle connection is closed quietly
        (Kafka does, and clients reconnect) unless one of its requests is still being served (a long
        poll, an acks=all wait)."""
        if self.closed:
            return
        if self.body is not None:
            since, length = self.body
            if now - since > self.limits.read_timeout_s:
                self.reject("request not received in time", length=length, received=self.body_received,
                            timeout_s=self.limits.read_timeout_s)
        elif not self.in_flight and now - self.last_active > self.limits.connections_max_idle_ms / 1000:
            self.closed = True
            self.writer.close()
            if self._reading is not None:
                self._reading.cancel()

    def shut(self) -> None:
        """The end of the connection, however it came: stop everything, give back what it holds."""
        self._shut = True
        self.listener.pool.release(self.held)
        self.held = 0
        for t in list(self._tasks) + [t for t in (self._writing, self._reading) if t is not None]:
            t.cancel()
        self.writer.close()

    # --- reading: every check before a handler sees the request ------------------------------------
    async def _read_requests(self) -> None:
        while not self.closed:
            n = await self._read_length()
            if n is None:
                return
            if not 0 < n <= self.limits.request_max_bytes:
                self.reject("request length out of range", length=n,
                            limit=self.limits.request_max_bytes, flag="--socket-request-max-bytes")
                return
            while self.in_flight >= self.limits.max_in_flight or self.held + n > self.limits.request_max_bytes:
                self._progress.clear()
                await self._progress.wait()  # not read until an earlier request is answered
            if not self.listener.pool.try_reserve(n):
                await self.listener.pool.reserve(n)
            self.held += n
            handed_over = False
            try:
                body = await self._read_body(n)
                if body is None:
                    return
                handed_over = self._start(body, n)
            finally:
                if not handed_over:
                    self._release(n)

    async def _read_length(self) -> int | None:
        """The next frame's announced length; None at a clean end (EOF between requests)."""
        try:
            header = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                self.reject("connection closed inside a request length", received=len(e.partial))
            return None
        except (ConnectionError, OSError):
            return None
        return _LEN.unpack(header)[0]

    async def _read_body(self, n: int) -> bytes | bytearray | None:
        """The body. A large one is read into one buffer of exactly its size as it arrives: no growing
        buffer to copy (StreamReader.readexactly would hold it twice at the end, and leave the heap
        fragmented); a small one (most requests) is taken whole from the stream's buffer."""
        self.body, self.body_received = (hostenv.monotonic_s(), n), 0
        if n <= READ_CHUNK:
            try:
                return await self.reader.readexactly(n)
            except asyncio.IncompleteReadError as e:
                self.reject("connection closed inside a request", length=n, received=len(e.partial))
                return None
            except (ConnectionError, OSError):
                return None  # a reset: the peer is gone, nothing to answer
            finally:
                self.body = None
                self.last_active = hostenv.monotonic_s()
        body = bytearray(n)
        try:
            while self.body_received < n:
                chunk = await self.reader.read(min(n - self.body_received, READ_CHUNK))
                if not chunk:
                    self.reject("connection closed inside a request", length=n, received=self.body_received)
                    return None
                body[self.body_received:self.body_received + len(chunk)] = chunk
                self.body_received += len(chunk)
        except (ConnectionError, OSError):
            return None  # a reset: the peer is gone, nothing to answer
        finally:
            self.body = None
        self.last_active = hostenv.monotonic_s()
        return body

    def _start(self, body: bytes | bytearray, n: int) -> bool:
        """Check one request and start serving it; False (and the connection refused) if it fails a check."""
        if rpc.is_rpc_frame(body):
            try:
                cid, api, req = rpc.open_request(body, self.listener.secret)
            except rpc.BadFrame as e:
                self.reject(str(e), length=n)
                return False
            self._spawn(self._answer_rpc(cid, api, req), n, release_when_done=True)
            return True
        if self.listener.kafka_decode is None or self.listener.kafka_respond is None:
            self.reject("not an internal request (this port serves the internal RPC only)", length=n)
            return False
        try:
            request = self.listener.kafka_decode(body)
        except Exception as e:  # noqa: BLE001 - any decoding failure is a malformed request
            self.reject(str(e)[:300] or type(e).__name__, length=n)
            return False
        self._order.put_nowait((self._spawn(self.listener.kafka_respond(request), n), n))
        return True

    def _spawn(self, coro: Coroutine[Any, Any, Any], n: int, release_when_done: bool = False) -> asyncio.Task:
        self.in_flight += 1
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            # Retrieved here, so that a failure of a request whose answer is never awaited (the
            # connection closed first) is not "never retrieved" in the loop's exception handler.
            if not t.cancelled():
                t.exception()
            if release_when_done:  # an RPC answer is written by its own task
                self._release(n, answered=True)

        task.add_done_callback(done)
        return task

    def _release(self, n: int, answered: bool = False) -> None:
        if self._shut:
            return  # shut() gave back everything the connection held
        self.listener.pool.release(n)
        self.held -= n
        if answered:
            self.in_flight -= 1
            self._progress.set()

    # --- answering ----------------------------------------------------------------------------------
    async def _answer_rpc(self, cid: int, api: str, body: dict[str, Any]) -> None:
        try:
            frame = rpc.encode_frame({"id": cid, "body": await self.listener.rpc_dispatch(api, body)})
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a request the node cannot serve (a missing field, a wrong type)
            self.reject(f"cannot serve internal request {api}", error=repr(e)[:300])
            return
        try:
            async with self._write_lock:
                self.writer.write(frame)
                await self.writer.drain()
            self.last_active = hostenv.monotonic_s()
        except (ConnectionError, OSError):
            pass  # the peer went away (a killed or partitioned broker): nobody to answer

    async def _write_kafka_answers(self) -> None:
        """Kafka answers in request order; a request counts as in flight until its answer is written,
        so a client that does not read stops being read (its answers cannot pile up here)."""
        while True:
            task, n = await self._order.get()
            try:
                try:
                    data = await task
                except asyncio.CancelledError:
                    return  # the connection is shut
                except Exception as e:  # noqa: BLE001 - a request the broker cannot serve ends this connection only
                    self.reject("cannot serve Kafka request", error=repr(e)[:300])
                    return
                if data:
                    async with self._write_lock:
                        self.writer.write(data)
                        await self.writer.drain()
                    self.last_active = hostenv.monotonic_s()
            except (ConnectionError, OSError):
                return  # the client went away
            finally:
                self._release(n, answered=True)


def log_loop_exceptions(loop: asyncio.AbstractEventLoop, log: Log) -> None:
    """Anything that would reach the event loop's exception handler becomes one JSON line of the node's
    log (event "unhandled_exception"), never a traceback on stderr; the fuzz test looks for it."""
    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        log({"event": "unhandled_exception", "message": str(context.get("message", ""))[:300],
             "error": repr(exc)[:300] if exc is not None else None})

    loop.set_exception_handler(handler)


def event_loop_runner(event_loop: str) -> Callable[[Any], Any]:
    """What runs a node's main coroutine to its end: uvloop.run for "uvloop", asyncio.run for "asyncio",
    and for "auto" uvloop when it is installed. uvloop serves the same asyncio API from libuv in C; on this
    broker it turns about a third more acknowledged sends per CPU second (benchmarks/bench_broker.py), the
    loop's own Python being much of a request's cost. ValueError when uvloop is asked for and missing."""
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                raise ValueError("--event-loop uvloop needs the uvloop package (pip install uvloop); "
                                 "or pass --event-loop asyncio") from None
        else:
            return uvloop.run
    return asyncio.run


def serve(role: str, args: Any, check: Callable[[], None], server: Callable[[bytes], Any]) -> int:
    """A node role's entry point (broker, controller): `check` raises ValueError for a bad flag, the
    limits and the cluster's secret are read, then `server(secret).run()` serves until stopped. Exit 2
    with one sentence for bad flags or a missing secret, 3 when the port cannot be had."""
    try:
        check()
        problem = Limits.from_args(args).problem()
        if problem:
            raise ValueError(problem)
        secret = rpc.node_secret(args.secret_file)
        run = event_loop_runner(getattr(args, "event_loop", "auto"))
    except (ValueError, rpc.SecretError) as e:
        print(f"error: {role} {args.node_id}: {e}", file=sys.stderr)
        return 2
    try:
        return run(server(secret).run())
    except OSError as e:
        print(f"error: {role} {args.node_id} cannot listen on {args.listen} ({e.strerror}); pick a free port.",
              file=sys.stderr)
        return 3


async def start_serving(listener: Listener, host: str, port: int, log: Callable[[dict[str, Any]], None]
                        ) -> tuple[asyncio.AbstractServer, asyncio.Event]:
    """Open the node's port and arm SIGTERM and SIGINT: (the server, the event they set). The loop's own
    exceptions go to the node's log (log_loop_exceptions)."""
    loop = asyncio.get_running_loop()
    log_loop_exceptions(loop, log)
    # Which code this node runs (a mutant's run checks it: studies/mutation.py).
    log({"event": "node_code", "digest": node_code_digest(), "root": str(CODE_ROOT),
         "event_loop": type(loop).__module__.partition(".")[0]})  # "uvloop" or "asyncio"
    server = await listener.start(host, port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return server, stop
