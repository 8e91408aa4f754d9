"""clusters/sim/loop.py and network.py: virtual time, processes (pause, kill) and the in-memory streams."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from kafkaesque_harness.clusters.sim.loop import Process, SimDeadlock, SimLoop
from kafkaesque_harness.clusters.sim.network import NetConfig, SimNetwork


@pytest.fixture
def loop():
    lp = SimLoop()
    yield lp
    lp.discard_processes()
    lp.close()


def test_sleeping_an_hour_takes_no_wall_time(loop):
    t0 = time.monotonic()
    loop.run_until_complete(asyncio.sleep(3600))
    assert loop.time() == 3600
    assert time.monotonic() - t0 < 1


def test_timers_fire_in_due_order_and_ties_in_scheduling_order(loop):
    fired = []
    for name, delay in [("b", 2.0), ("a", 1.0), ("c", 2.0)]:
        loop.call_later(delay, fired.append, name)
    loop.run_until_complete(asyncio.sleep(3))
    assert fired == ["a", "b", "c"]


def test_a_paused_process_runs_nothing_until_resumed_then_catches_up(loop):
    ticks: list[float] = []
    proc = Process("n", 1, host=None)

    async def ticker():
        while True:
            ticks.append(loop.time())
            await asyncio.sleep(1)

    loop.start_process(proc, ticker())
    loop.run_until_complete(asyncio.sleep(2.5))
    assert ticks == [0, 1, 2]
    loop.pause(proc)
    loop.run_until_complete(asyncio.sleep(5))
    assert ticks == [0, 1, 2]  # SIGSTOP: nothing of it ran
    loop.resume(proc)
    loop.run_until_complete(asyncio.sleep(0.5))
    assert ticks[3] == 7.5  # the held timer ran at once on resume
    assert len(ticks) == 4


def test_a_killed_process_never_runs_again(loop):
    ran = []
    proc = Process("n", 1, host=None)

    async def body():
        await asyncio.sleep(1)
        ran.append("after")

    loop.start_process(proc, body())
    loop.run_until_complete(asyncio.sleep(0.5))
    loop.kill(proc)
    loop.run_until_complete(asyncio.sleep(2))
    assert ran == []


def test_a_run_that_can_never_progress_says_so(loop):
    with pytest.raises(SimDeadlock):
        loop.run_until_complete(loop.create_future())


def _echo_pair(loop, config=None):
    net = SimNetwork(loop, random.Random(1), config or NetConfig())
    server_proc, client_proc = Process("server", 1, None), Process("client", 1, None)

    async def echo(reader, writer):
        while data := await reader.read(100):
            writer.write(data)
        writer.close()

    async def listen():
        await net.start_server(echo, "10.0.0.1", 9000)

    loop.run_until_complete(loop.start_process(server_proc, listen()))
    return net, server_proc, client_proc


def test_bytes_arrive_in_order_after_a_seeded_latency(loop):
    net, _, client = _echo_pair(loop)

    async def talk():
        reader, writer = await net.open_connection("10.0.0.1", 9000)
        t0 = loop.time()
        for i in range(50):
            writer.write(b"%03d" % i)
        got = await reader.readexactly(150)
        return got, loop.time() - t0

    got, took = loop.run_until_complete(loop.start_process(client, talk()))
    assert got == b"".join(b"%03d" % i for i in range(50))
    assert 0.0004 <= took <= 0.004 * 2  # one round trip of 0.2-2 ms each way


def test_connecting_where_nothing_listens_is_refused(loop):
    net, _, client = _echo_pair(loop)
    with pytest.raises(ConnectionRefusedError):
        loop.run_until_complete(loop.start_process(client, net.open_connection("10.0.0.1", 9001)))


def test_a_one_way_partition_drops_bytes_then_resets_the_connection(loop):
    net, _, client = _echo_pair(loop, NetConfig(reset_after_drop_s=5.0))

    async def talk():
        reader, writer = await net.open_connection("10.0.0.1", 9000)
        net.block("client", "server")
        writer.write(b"lost")
        t0 = loop.time()
        try:
            await reader.read(100)
        except ConnectionResetError:
            return "reset", loop.time() - t0
        return "eof", loop.time() - t0

    assert loop.run_until_complete(loop.start_process(client, talk())) == ("reset", 5.0)


def test_a_partitioned_connect_hangs_until_the_callers_timeout(loop):
    net, _, client = _echo_pair(loop)
    net.block("server", "client")  # one way is enough: the SYN's answer is lost

    async def connect():
        await asyncio.wait_for(net.open_connection("10.0.0.1", 9000), 1.0)

    with pytest.raises(TimeoutError):
        loop.run_until_complete(loop.start_process(client, connect()))
    assert loop.time() == pytest.approx(1.0)


def _round_trip(loop, net, client) -> float:
    async def talk():
        reader, writer = await net.open_connection("10.0.0.1", 9000)
        t0 = loop.time()
        writer.write(b"ping")
        await reader.readexactly(4)
        writer.close()
        return loop.time() - t0

    return loop.run_until_complete(loop.start_process(client, talk()))


def test_a_slow_link_adds_its_latency_one_way(loop):
    net, _, client = _echo_pair(loop)
    fast = _round_trip(loop, net, client)
    net.slow("client", "server", 0.25)
    slow = _round_trip(loop, net, client)
    assert fast < 0.005 and 0.25 < slow < 0.26


def test_a_lossy_link_resets_the_connection_a_write_is_lost_on(loop):
    net, _, client = _echo_pair(loop)
    net.loss("client", "server", 1.0)

    async def talk():
        reader, writer = await net.open_connection("10.0.0.1", 9000)
        writer.write(b"ping")
        try:
            await reader.read(100)
        except ConnectionResetError:
            return "reset"
        return "answered"

    assert loop.run_until_complete(loop.start_process(client, talk())) == "reset"
    net.heal()
    assert _round_trip(loop, net, client) < 0.005


def test_a_doomed_connection_resets_even_when_its_sender_is_paused(loop):
    net, server, client = _echo_pair(loop, NetConfig(reset_after_drop_s=2.0))
    got = {}

    async def talk():
        reader, writer = await net.open_connection("10.0.0.1", 9000)
        net.block("client", "server")
        writer.write(b"lost")
        got["server_end"] = next(e for e in net.open.values() if e.proc is server)

    loop.run_until_complete(loop.start_process(client, talk()))
    loop.pause(client)
    loop.run_until_complete(asyncio.sleep(3))
    assert got["server_end"].lost  # reset on the server's side, the paused client notwithstanding
