"""The node's one door to its host: clocks, randomness, its process id and environment, fsync and the network's
two calls.

Every module of the broker asks this module, never `time`, `uuid`, `random`, `os.fsync`, `os.environ` or
`asyncio.open_connection` / `asyncio.start_server` directly. On a real node the answers are the host's
own (RealHost). The deterministic simulator (clusters/sim/) runs every node of a cluster in one
process on one event loop with virtual time; it gives each node its own Host in the context variable
below, set in the node's root context, which every task and callback of the node inherits (asyncio
copies the context into each Task and Handle). So one line of the broker serves both worlds, and the
protocol code a real run tests is the code the simulator tests.

BUGGIFY points (FoundationDB's name): named places in the broker's shell where the simulator may make the code
take a rare path (a fetch answered late, a heartbeat skipped, a purgatory timer stretched), one line each there,
listed in BUGGIFY_POINTS. buggify(point) asks the node's host whether the point fires now; the real host never
says yes, so a real node runs as if the points were not there. The simulator switches points on per seed
(`kafkaesque sim --swarm`, harness/sim_swarm.py) and records which.

What a Host must answer is the Host protocol; a simulated one reads the simulator's virtual clock
(plus the node's skew), draws from the run's seed, fsyncs into its page-cache model and connects
through the in-memory network.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Host(Protocol):
    def wall_s(self) -> float: ...  # the node's wall clock (a clock fault moves it)

    def monotonic_s(self) -> float: ...  # never jumps; timers and timeouts

    def new_uuid(self) -> uuid.UUID: ...

    def rng(self) -> random.Random: ...  # a generator of its own (Raft's election timeouts)

    def pid(self) -> int: ...

    def getenv(self, name: str) -> str | None: ...  # the node's environment (a backend sets some for it)

    def fsync(self, fd: int) -> None: ...

    def buggify(self, point: str) -> bool: ...  # does this BUGGIFY point fire now (never on a real host)

    def open_connection(self, host: str, port: int, **kw: Any
                        ) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]: ...

    def start_server(self, client_connected_cb: Callable[..., Any], host: str, port: int, **kw: Any
                     ) -> Awaitable[asyncio.AbstractServer]: ...


class RealHost:
    """The host the process runs on."""

    wall_s = staticmethod(time.time)
    monotonic_s = staticmethod(time.monotonic)
    new_uuid = staticmethod(uuid.uuid4)
    pid = staticmethod(os.getpid)
    getenv = staticmethod(os.environ.get)
    fsync = staticmethod(os.fsync)
    open_connection = staticmethod(asyncio.open_connection)
    start_server = staticmethod(asyncio.start_server)

    @staticmethod
    def rng() -> random.Random:
        return random.Random()

    @staticmethod
    def buggify(point: str) -> bool:
        return False  # a real node takes no deliberately rare path


REAL_HOST = RealHost()
# The node's Host; unset (a real node, or the harness): the real one.
NODE_HOST: contextvars.ContextVar[Host] = contextvars.ContextVar("kafkaesque_node_host")


def wall_s() -> float:
    return NODE_HOST.get(REAL_HOST).wall_s()


def monotonic_s() -> float:
    return NODE_HOST.get(REAL_HOST).monotonic_s()


def monotonic_ms() -> int:
    return int(NODE_HOST.get(REAL_HOST).monotonic_s() * 1000)


def new_uuid() -> uuid.UUID:
    return NODE_HOST.get(REAL_HOST).new_uuid()


def rng() -> random.Random:
    return NODE_HOST.get(REAL_HOST).rng()


def pid() -> int:
    return NODE_HOST.get(REAL_HOST).pid()


def getenv(name: str) -> str | None:
    return NODE_HOST.get(REAL_HOST).getenv(name)


def fsync(fd: int) -> None:
    NODE_HOST.get(REAL_HOST).fsync(fd)


# --- BUGGIFY points: name -> where it is and what it does when it fires (each one line in the shell) ---------------
BUGGIFY_POINTS = {
    "fetch-answered-late": "server.py replica_fetch: a follower's fetch is answered FETCH_LATE_S late",
    "heartbeat-skipped": "server.py heartbeat_loop: a heartbeat to the controller is skipped (the next goes one "
                         "interval late)",
    "purgatory-timer-stretched": "server.py _await_commit: an acks=all produce waits PURGATORY_STRETCH times its "
                                 "timeout in the purgatory (its client has given up by then)",
}
FETCH_LATE_S = 0.5
PURGATORY_STRETCH = 3.0


def buggify(point: str) -> bool:
    return NODE_HOST.get(REAL_HOST).buggify(point)


async def buggify_delay(point: str, seconds: float) -> None:
    """Wait `seconds` when the point fires, else go on at once."""
    if buggify(point):
        await asyncio.sleep(seconds)


def buggify_stretch(point: str, seconds: float, factor: float) -> float:
    """`seconds` times `factor` when the point fires, else `seconds`."""
    return seconds * factor if buggify(point) else seconds


def open_connection(host: str, port: int, **kw: Any) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return NODE_HOST.get(REAL_HOST).open_connection(host, port, **kw)


def start_server(client_connected_cb: Callable[..., Any], host: str, port: int, **kw: Any
                 ) -> Awaitable[asyncio.AbstractServer]:
    return NODE_HOST.get(REAL_HOST).start_server(client_connected_cb, host, port, **kw)
