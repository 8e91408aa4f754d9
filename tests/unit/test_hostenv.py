"""clusters/broker/hostenv.py: the broker's one door to its host answers with the real host unless a
context gives the node a Host of its own (the simulator's), and tasks inherit that Host."""

from __future__ import annotations

import asyncio
import contextvars
import os
import random
import time
import uuid

from kafkaesque_harness.clusters.broker import hostenv


class FixedHost(hostenv.RealHost):
    """A host whose clocks stand still: what a simulated node sees between two events."""

    @staticmethod
    def wall_s() -> float:
        return 1_700_000_000.25

    @staticmethod
    def monotonic_s() -> float:
        return 42.5

    @staticmethod
    def new_uuid() -> uuid.UUID:
        return uuid.UUID(int=7)

    @staticmethod
    def rng() -> random.Random:
        return random.Random(3)

    @staticmethod
    def pid() -> int:
        return 1001


def test_without_a_node_host_the_answers_are_the_real_hosts():
    before = time.time()
    assert before - 1 <= hostenv.wall_s() <= time.time() + 1
    assert hostenv.new_uuid() != hostenv.new_uuid()
    assert hostenv.monotonic_ms() >= int(time.monotonic() * 1000) - 1000
    assert hostenv.getenv("PATH") == os.environ.get("PATH")


def test_a_context_with_a_host_answers_from_it():
    ctx = contextvars.copy_context()
    ctx.run(hostenv.NODE_HOST.set, FixedHost())
    assert ctx.run(hostenv.wall_s) == 1_700_000_000.25
    assert ctx.run(hostenv.monotonic_ms) == 42_500
    assert ctx.run(hostenv.new_uuid) == uuid.UUID(int=7)
    assert ctx.run(hostenv.rng).random() == random.Random(3).random()
    assert ctx.run(hostenv.pid) == 1001
    assert hostenv.monotonic_s() != 42.5  # outside that context: the real host


def test_tasks_created_in_a_node_context_inherit_its_host():
    async def node_root() -> float:
        inner = asyncio.create_task(asyncio.sleep(0, result=None))
        await inner
        return await asyncio.create_task(_read_monotonic())

    async def _read_monotonic() -> float:
        return hostenv.monotonic_s()

    async def main() -> float:
        ctx = contextvars.copy_context()
        ctx.run(hostenv.NODE_HOST.set, FixedHost())
        return await asyncio.get_running_loop().create_task(node_root(), context=ctx)

    assert asyncio.run(main()) == 42.5
