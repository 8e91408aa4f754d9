"""The simulated run's client side: the queue or txn workload's logical processes as asyncio tasks, writing the
history a real run writes (DESIGN.md "Operations and histories"; harness/runner.py's worker and final reads).

Entry point (what `kafkaesque sim` calls, on the simulator's loop):

    run = SimWorkloadRun(workload="queue" | "txn", options={...workload options...}, open_connection=...,
                         rng=random.Random(seed), bootstrap="host:port,...", history=HistoryWriter(path,
                         clock_ns=virtual_clock_ns()), concurrency=10, time_limit_s=60.0, rate=100.0,
                         spawn=None)
    await run.main_phase()      # the processes until the virtual time limit (then the ops in flight end)
    ...                         # the caller heals the cluster and waits for recovery
    await run.final_reads()     # each partition drained to its HWM on a fresh process
    run.workload                # the real workload object: .checkers(run.test) judge the history
    run.test                    # the test fields the clients used (concurrency, acks, time_limit, workload,
                                # workload_options, partitions); the caller adds the run's own (nemesis,
                                # run_dir, state_dumps, protocol_trace) before checking, as test.json has them

or `await run_workload(...)` with the same arguments, which does both (with an optional `between` coroutine
function run between them). Options are the workloads' own (workloads/queue.py QUEUE_OPTIONS, workloads/txn.py
TXN_OPTIONS, plus "topic", "partitions"; "acks" for the queue); the op mixes and final reads are the real
workloads' (QueueWorkload.op_mix/final_ops, TxnWorkload's TxnOpMix), timed by the loop's clock.

`open_connection` is asyncio's (a real cluster on loopback) or the simulator's network's
(`SimCluster.net.open_connection`). `spawn(name, coroutine) -> task` starts each worker's coroutine (name
"client-<worker>") and the final reads ("client-final") where the caller wants them: on the simulator, as a
client node of its own (`sim.spawn(sim.add_client(name), coroutine)`), so that partitions and pauses reach
each client; by default a task of the calling context.

The rules of the real runner: worker w starts as process w; an op that ends info retires its process (Jepsen:
it may still be in flight) and the worker goes on as process + concurrency with a new client; a client error
the client did not classify ends the op info. Ops start at a shared rate (exponential gaps, harness/generator.py
RateLimiter's rule) until the time limit; an op still running MAIN_PHASE_GRACE_S after it ends info ("abandoned").
Final reads: one fresh process each, numbered after the highest process, tried again on a new process until
FINAL_READ_RETRY_S while they do not end ok. Nothing reads the wall clock: times come from the running loop
(`virtual_clock_ns`), randomness from `rng` (each process's client gets an RNG drawn from it).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from kafkaesque_harness.history import INFO, INVOKE, OK, HistoryWriter, Op
from kafkaesque_harness.workloads.queue import QueueWorkload
from kafkaesque_harness.workloads.sim.queue import SimQueueClient
from kafkaesque_harness.workloads.sim.txn import SimTxnClient
from kafkaesque_harness.workloads.sim.wire import OpenConnection
from kafkaesque_harness.workloads.txn import TxnWorkload

MAIN_PHASE_GRACE_S = 30.0   # harness/runner.py's: how long past the time limit ops in flight may take
FINAL_READ_RETRY_S = 60.0   # harness/runner.py's: how long one final read is tried again
ABANDONED = ("no completion by the end of the main phase: the client call never returned, so its process "
             "was abandoned")  # harness/runner.py's words
WORKLOADS = ("queue", "txn")
ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
Spawn = Callable[[str, Coroutine[Any, Any, Any]], "asyncio.Future[Any]"]  # (client node name, coroutine) -> task


def virtual_clock_ns() -> Callable[[], int]:
    """The running loop's clock in ns: a HistoryWriter's `clock_ns` for a simulated run."""
    loop = asyncio.get_running_loop()
    return lambda: int(round(loop.time() * 1e9))


class SimWorkloadRun:
    """One run's clients (module docstring)."""

    def __init__(self, workload: str, options: dict[str, Any], open_connection: OpenConnection, rng: random.Random,
                 bootstrap: str, history: HistoryWriter, concurrency: int = 10, time_limit_s: float = 60.0,
                 rate: float = 100.0, spawn: Spawn | None = None):
        if workload not in WORKLOADS:
            raise ValueError(f"workload {workload!r} has no simulated client; valid: {', '.join(WORKLOADS)}")
        self.kind, self.options = workload, dict(options)
        self.open_connection, self.rng, self.bootstrap, self.history = open_connection, rng, bootstrap, history
        self.concurrency, self.time_limit_s, self.rate = max(1, concurrency), time_limit_s, rate
        self.spawn: Spawn = spawn if spawn is not None else (lambda name, coro: asyncio.ensure_future(coro))
        self.test = {"concurrency": self.concurrency, "acks": str(self.options.get("acks", "all")),
                     "time_limit": time_limit_s, "workload": workload, "workload_options": self.options,
                     "partitions": int(self.options.get("partitions", 4))}
        self.workload = _make_workload(workload, self.options)
        self.processes = list(range(self.concurrency))  # worker -> its current process
        self._mix_rng = random.Random(rng.getrandbits(64))
        self._rate_rng = random.Random(rng.getrandbits(64))
        self._next_start = 0.0
        self._started_at = 0.0
        self._in_flight: dict[int, Op] = {}

    def _now(self) -> float:
        return asyncio.get_running_loop().time() - self._started_at

    def _client(self, process: int) -> Any:
        """A new client of `process` (its own RNG, drawn from the run's)."""
        rng = random.Random(self.rng.getrandbits(64))
        w = self.workload
        if self.kind == "queue":
            return SimQueueClient(self.open_connection, self.bootstrap, rng, w.topic, w.partitions,
                                  ACKS[self.test["acks"]], w.idempotent, w.group, process)
        return SimTxnClient(self.open_connection, self.bootstrap, rng, w.topic, w.partitions, self.concurrency, w.o,
                            w.tracker, process)

    # --- main phase ------------------------------------------------------------------------------------------
    async def main_phase(self) -> None:
        loop = asyncio.get_running_loop()
        self._started_at = loop.time()
        self._next_start = 0.0
        op_mix = self.workload.op_mix(self.test, clock=loop.time)
        workers = [self.spawn(f"client-{w}", self._worker(w, op_mix)) for w in range(self.concurrency)]
        done, pending = await asyncio.wait(workers, timeout=self.time_limit_s + MAIN_PHASE_GRACE_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()  # a bug in the driver itself is not hidden
        for _, op in sorted(self._in_flight.items()):
            self.history.append(Op(INFO, op.f, op.process, None, error=ABANDONED, extra=op.extra))
        self._in_flight.clear()

    def _reserve(self) -> float | None:
        """The start time of the next op (RateLimiter's rule), None past the time limit."""
        now = self._now()
        if now >= self.time_limit_s:
            return None
        start = max(now, self._next_start)
        if self.rate > 0:
            self._next_start = start + self._rate_rng.expovariate(self.rate)
        return start if start < self.time_limit_s else None

    async def _worker(self, worker: int, op_mix: Callable[[random.Random, int], tuple]) -> None:
        client = None
        try:
            while True:
                at = self._reserve()
                if at is None:
                    return
                if at > self._now():
                    await asyncio.sleep(at - self._now())
                process = self.processes[worker]
                f, value, *extra = op_mix(self._mix_rng, process)
                if client is None:
                    client = self._client(process)
                op = self.history.append(Op(INVOKE, f, process, value, extra=extra[0] if extra else None))
                self._in_flight[worker] = op
                comp = await _invoke(client, op)
                del self._in_flight[worker]
                self.history.append(comp)
                if comp.type == INFO:  # Jepsen's info rule: the process may have an op in flight forever
                    self.processes[worker] += self.concurrency
                    await _close_quietly(client)
                    client = None
        finally:
            if client is not None:
                client.crash()  # cancelled at the end of the grace: dropped, as the runner leaves its thread

    # --- final reads -----------------------------------------------------------------------------------------
    async def final_reads(self) -> None:
        loop = asyncio.get_running_loop()
        process = max(self.processes) + 1
        for final in self.workload.final_ops(self.test):
            f, value, extra = final[0], final[1], final[2] if len(final) > 2 else None
            deadline = loop.time() + FINAL_READ_RETRY_S
            while True:
                done = await self.spawn("client-final", self._final_read(process, f, value, extra))
                process += 1
                if done.type == OK or loop.time() >= deadline:
                    break
                await asyncio.sleep(1.0)


    async def _final_read(self, process: int, f: str, value: Any, extra: dict | None) -> Op:
        client = self._client(process)
        op = self.history.append(Op(INVOKE, f, process, value, extra=extra))
        done = self.history.append(await _invoke(client, op))
        await _close_quietly(client)
        return done


async def run_workload(workload: str, options: dict[str, Any], open_connection: OpenConnection, rng: random.Random,
                       bootstrap: str, history: HistoryWriter, concurrency: int = 10, time_limit_s: float = 60.0,
                       rate: float = 100.0, between: Callable[[], Awaitable[None]] | None = None,
                       spawn: Spawn | None = None) -> SimWorkloadRun:
    """The main phase, then `between` (the caller's heal and recovery wait), then the final reads."""
    run = SimWorkloadRun(workload, options, open_connection, rng, bootstrap, history, concurrency, time_limit_s, rate,
                         spawn)
    await run.main_phase()
    if between is not None:
        await between()
    await run.final_reads()
    return run


async def _invoke(client: Any, op: Op) -> Op:
    """harness/runner.py's _invoke: a client bug must not lose the op: it is indeterminate."""
    try:
        comp = await client.invoke(op)
    except Exception as e:  # noqa: BLE001
        comp = Op(INFO, op.f, op.process, None, error=f"{type(e).__name__}: {e}"[:300], extra=op.extra)
    comp.process, comp.f = op.process, op.f
    return comp


async def _close_quietly(client: Any) -> None:
    try:
        await client.close()
    except Exception:  # noqa: BLE001 - closing a client to a dead broker must not stop the run
        pass


def _make_workload(kind: str, options: dict[str, Any]) -> Any:
    return QueueWorkload(options) if kind == "queue" else TxnWorkload(options)
