"""An in-memory network behind asyncio's streams API, for the simulated cluster (loop.py).

Nodes call `open_connection(host, port)` and `start_server(cb, host, port)` exactly as asyncio's
(through the broker's seam, clusters/broker/hostenv.py; clients call them directly) and get real
asyncio StreamReader/StreamWriter objects over `SimTransport`, a transport whose bytes travel through
`SimNetwork`: in order within a connection, each write after its own latency drawn from the run's seed,
delivered as the receiving process (so a paused node's kernel buffers them, in effect, and a dead one's
are dropped). The sender never blocks: there is no window to fill.

Faults, by node name (they outlive restarts):
- `block(a, b)`: a one-way partition. Bytes a writes to b are dropped, as iptables DROP would; TCP can
  never deliver what follows a lost segment, so the connection is doomed and resets on both ends after
  `NetConfig.reset_after_drop_s` unless the application closes it first. A connection cannot be opened
  while either direction is blocked: it hangs until the caller's timeout, or `syn_timeout_s`.
- `partition(grudge)`: block every pair the grudge names ({node: nodes it cannot reach}), as
  nemesis/grudge.py shapes them; `heal()` lifts every block.
- `slow(a, b, extra_s)`: extra latency on a's bytes to b.
- `reset(a, b)`: every connection between a and b is reset now (a lost connection); `loss(a, b, p)`:
  each write from a to b resets its connection with probability p.
- `close_process(proc)`: what the OS does when a process dies: its listener goes, its connections close
  (their peers read EOF).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafkaesque_harness.clusters.sim.loop import NODE, Process, SimLoop

EOF = None  # in a half-connection's stream: the peer's FIN
NETWORK_CONTEXT = contextvars.Context()  # the network's own timers run in it: no process (loop.py NODE unset)


@dataclass(frozen=True)
class NetConfig:
    latency_s: tuple[float, float] = (0.0002, 0.002)  # one way, per write, uniform between these
    reset_after_drop_s: float = 15.0  # TCP gives up on a dropped segment (far shorter than Linux's ~15 min)
    syn_timeout_s: float = 127.0  # Linux's connect timeout with default SYN retries


class SimTransport(asyncio.Transport):
    """One end of a simulated TCP connection, owned by one process."""

    def __init__(self, net: SimNetwork, proc: Process, sockname: tuple[str, int], peername: tuple[str, int]):
        super().__init__()
        self.net, self.proc = net, proc
        self.peer: SimTransport | None = None
        self.protocol: asyncio.BaseProtocol | None = None
        self.sockname, self.peername = sockname, peername
        self.closing = False  # this end closed or aborted: nothing more is written or read
        self.lost = False  # the protocol was told (connection_lost)
        self.eof_sent = False
        self.doomed = False  # a byte to the peer was dropped: the stream can never go on
        self.next_arrival = 0.0  # in-order delivery of this end's writes
        self.reading_paused = False
        self.backlog: list[bytes | None] = []  # delivered while reading was paused

    # --- asyncio.Transport ------------------------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peername, "sockname": self.sockname}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol | None:
        return self.protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.eof_sent or not data:
            return
        self.net.send(self, bytes(data))

    def writelines(self, list_of_data: Iterable[bytes]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not self.closing and not self.eof_sent:
            self.eof_sent = True
            self.net.send(self, EOF)

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return 0, 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_reading(self) -> bool:
        return not self.reading_paused

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False
        backlog, self.backlog = self.backlog, []
        for item in backlog:
            self.receive(item)

    def close(self) -> None:
        """A FIN after everything written, then this end is gone."""
        if self.closing:
            return
        self.write_eof()
        self.closing = True
        self.net.loop.call_soon(self.connection_lost, None, context=self.proc.context)

    def abort(self) -> None:
        """An RST: the peer's reads fail with ConnectionResetError."""
        if self.closing:
            return
        self.closing = True
        self.net.send_reset(self)
        self.net.loop.call_soon(self.connection_lost, None, context=self.proc.context)

    # --- from the network -------------------------------------------------------------------------------
    def receive(self, data: bytes | None) -> None:
        if self.closing or self.lost:
            return
        if self.reading_paused or self.protocol is None:  # not yet accepted, or the reader is full
            self.backlog.append(data)
        elif data is EOF:
            keep_open = self.protocol.eof_received()  # type: ignore[union-attr]
            if not keep_open:
                self.close()
        else:
            self.protocol.data_received(data)  # type: ignore[union-attr]

    def receive_reset(self) -> None:
        if self.lost:
            return
        self.closing = True
        self.connection_lost(ConnectionResetError(f"connection reset by {self.peername[0]}:{self.peername[1]}"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost:
            return
        self.lost = True
        self.net.forget(self)
        if self.protocol is not None:
            self.protocol.connection_lost(exc)


class SimServer(asyncio.AbstractServer):
    """What `start_server` returns: the listener's face for the node (close, is_serving)."""

    def __init__(self, net: SimNetwork, address: tuple[str, int], proc: Process):
        self.net, self.address, self.proc = net, address, proc
        self.serving = True

    def close(self) -> None:
        if self.serving:
            self.serving = False
            if self.net.listeners.get(self.address) is self:
                del self.net.listeners[self.address]

    def is_serving(self) -> bool:
        return self.serving

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.net.loop

    async def start_serving(self) -> None:
        pass

    async def serve_forever(self) -> None:
        raise NotImplementedError("the simulated server serves from start_server on")

    async def wait_closed(self) -> None:
        pass

    @property
    def sockets(self) -> tuple[Any, ...]:
        return ()


@dataclass
class _Listening:
    server: SimServer
    on_connect: Callable[..., Any]
    limit: int


class SimNetwork:
    def __init__(self, loop: SimLoop, rng: random.Random, config: NetConfig | None = None):
        self.loop, self.rng, self.config = loop, rng, config or NetConfig()
        self.listeners: dict[tuple[str, int], SimServer] = {}
        self._on_connect: dict[tuple[str, int], _Listening] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.extra_latency: dict[tuple[str, str], float] = {}
        self.loss_probability: dict[tuple[str, str], float] = {}
        self.open: dict[int, SimTransport] = {}  # id -> end; a dict keeps the order ends were made in
        self._ephemeral = itertools.count(40000)
        self.addresses: dict[str, str] = {}  # process name -> its host, for peernames
        self.bytes_sent = 0
        self.writes = 0

    # --- the streams API ---------------------------------------------------------------------------------
    async def start_server(self, client_connected_cb: Callable[..., Any], host: str | None = None,
                           port: int | None = None, *, limit: int = 2 ** 16, **_: Any) -> SimServer:
        proc = _calling_process("start_server")
        address = (host or "0.0.0.0", int(port or 0))
        old = self.listeners.get(address)
        if old is not None and not old.proc.dead:
            raise OSError(98, f"[Errno 98] address already in use: {address[0]}:{address[1]}")
        server = SimServer(self, address, proc)
        self.listeners[address] = server
        self._on_connect[address] = _Listening(server, client_connected_cb, limit)
        self.addresses.setdefault(proc.name, address[0])
        return server

    async def open_connection(self, host: str, port: int, *, limit: int = 2 ** 16, **_: Any
                              ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        proc = _calling_process("open_connection")
        address = (host, int(port))
        server = self.listeners.get(address)
        if server is not None and server.proc.dead:
            server = None
        if server is not None and self._cut(proc.name, server.proc.name):
            # The SYN (or its answer) is dropped: the caller's own timeout ends this, else the kernel's.
            await asyncio.sleep(self.config.syn_timeout_s)
            raise TimeoutError(f"connect to {host}:{port} timed out")
        await asyncio.sleep(2 * self._latency(proc.name, server.proc.name if server else proc.name))
        listening = self._on_connect.get(address)
        if server is None or not server.serving or listening is None or listening.server is not server:
            raise ConnectionRefusedError(111, f"[Errno 111] connect to {host}:{port} refused")
        mine = (self.addresses.get(proc.name, "127.0.0.1"), next(self._ephemeral))
        client = SimTransport(self, proc, mine, address)
        accepted = SimTransport(self, server.proc, address, mine)
        client.peer, accepted.peer = accepted, client
        self.open[id(client)], self.open[id(accepted)] = client, accepted
        loop = self.loop
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        client.set_protocol(protocol)
        protocol.connection_made(client)
        writer = asyncio.StreamWriter(client, protocol, reader, loop)
        # The server side: accepted by the listening process when it next runs (held while it is paused).
        loop.call_soon(self._accept, accepted, listening, context=server.proc.context)
        return reader, writer

    def _accept(self, end: SimTransport, listening: _Listening) -> None:
        if end.closing or not listening.server.serving:
            end.abort()
            return
        reader = asyncio.StreamReader(limit=listening.limit, loop=self.loop)
        protocol = asyncio.StreamReaderProtocol(reader, listening.on_connect, loop=self.loop)
        end.set_protocol(protocol)
        protocol.connection_made(end)
        backlog, end.backlog = end.backlog, []
        for item in backlog:  # bytes that arrived before the accept
            end.receive(item)

    # --- moving bytes ------------------------------------------------------------------------------------
    def _cut(self, a: str, b: str) -> bool:
        return (a, b) in self.blocked or (b, a) in self.blocked

    def _latency(self, src: str, dst: str) -> float:
        lo, hi = self.config.latency_s
        return self.rng.uniform(lo, hi) + self.extra_latency.get((src, dst), 0.0)

    def send(self, end: SimTransport, data: bytes | None) -> None:
        peer = end.peer
        if peer is None or end.doomed:
            return
        src, dst = end.proc.name, peer.proc.name
        if (src, dst) in self.blocked:
            self._doom(end)
            return
        p = self.loss_probability.get((src, dst))
        if p and self.rng.random() < p:
            self.reset_connection(end)
            return
        self.writes += 1
        self.bytes_sent += len(data) if data else 0
        at = max(self.loop.time() + self._latency(src, dst), end.next_arrival)
        end.next_arrival = at
        self.loop.call_at(at, _deliver, peer, data, context=peer.proc.context)

    def send_reset(self, end: SimTransport) -> None:
        peer = end.peer
        if peer is not None and not end.doomed and (end.proc.name, peer.proc.name) not in self.blocked:
            at = max(self.loop.time() + self._latency(end.proc.name, peer.proc.name), end.next_arrival)
            self.loop.call_at(at, peer.receive_reset, context=peer.proc.context)

    def _doom(self, end: SimTransport) -> None:
        if end.doomed:
            return
        end.doomed = True
        # as the network, in no process's context: the sender being paused or dead by then must not hold it
        self.loop.call_at(self.loop.time() + self.config.reset_after_drop_s, self.reset_connection, end,
                          context=NETWORK_CONTEXT)

    def reset_connection(self, end: SimTransport) -> None:
        """Both ends of `end`'s connection fail with a reset, each as its own process."""
        for side in (end, end.peer):
            if side is not None and not side.lost:
                side.doomed = True
                self.loop.call_soon(side.receive_reset, context=side.proc.context)

    def forget(self, end: SimTransport) -> None:
        self.open.pop(id(end), None)

    # --- faults ------------------------------------------------------------------------------------------
    def block(self, src: str, dst: str) -> None:
        self.blocked.add((src, dst))

    def partition(self, grudge: dict[str, Iterable[str]]) -> None:
        """{node: the nodes whose bytes it no longer receives} (Jepsen's grudge): each pair blocked one way."""
        for dst, srcs in grudge.items():
            for src in srcs:
                self.block(src, dst)

    def heal(self) -> None:
        self.blocked.clear()
        self.extra_latency.clear()
        self.loss_probability.clear()

    def slow(self, src: str, dst: str, extra_s: float) -> None:
        self.extra_latency[(src, dst)] = extra_s

    def loss(self, src: str, dst: str, probability: float) -> None:
        self.loss_probability[(src, dst)] = probability

    def reset(self, a: str, b: str) -> int:
        """Reset every open connection between a and b now; how many."""
        ends = [e for e in self.open.values()
                if e.peer is not None and {e.proc.name, e.peer.proc.name} == {a, b} and not e.lost]
        seen: set[int] = set()
        for e in ends:
            if id(e) not in seen and id(e.peer) not in seen:
                seen.add(id(e))
                self.reset_connection(e)
        return len(seen)

    def close_process(self, proc: Process) -> None:
        """The process died: its listener is gone and the OS closes its sockets (its peers read EOF)."""
        for address, server in list(self.listeners.items()):
            if server.proc is proc:
                server.serving = False
                del self.listeners[address]
                self._on_connect.pop(address, None)
        for end in [e for e in self.open.values() if e.proc is proc]:
            end.write_eof()
            end.closing = end.lost = True
            self.forget(end)


def _deliver(end: SimTransport, data: bytes | None) -> None:
    end.receive(data)


def _calling_process(what: str) -> Process:
    proc = NODE.get()
    if proc is None:
        raise RuntimeError(f"the simulated network's {what} is called from a node's process (clusters/sim/loop.py)")
    return proc
