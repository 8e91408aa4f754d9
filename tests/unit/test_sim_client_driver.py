"""The simulated run's driver (workloads/sim/driver.py) with scripted clients, no network: the runner's rules
for processes (Jepsen's info rule), ops that never return, and final reads that must be tried again."""

from __future__ import annotations

import asyncio
import random

import pytest

from kafkaesque_harness.history import FAIL, INFO, INVOKE, OK, Op
from kafkaesque_harness.workloads.sim import driver as driver_module
from kafkaesque_harness.workloads.sim.driver import SimWorkloadRun


class ListHistory:
    """The HistoryWriter's append, kept in memory with the loop's time."""

    def __init__(self):
        self.ops: list[Op] = []

    def append(self, op: Op) -> Op:
        op.index, op.time = len(self.ops), int(asyncio.get_running_loop().time() * 1e9)
        self.ops.append(op)
        return op


class ScriptedClient:
    """Answers each op with the type `answer(op)` gives; "hang" never answers."""

    def __init__(self, answer, opened: list[int], process: int):
        self.answer = answer
        opened.append(process)

    async def invoke(self, op: Op) -> Op:
        kind = self.answer(op)
        if kind == "hang":
            await asyncio.Event().wait()
        return Op(kind, op.f, op.process, op.value)

    async def close(self) -> None:
        return None

    def crash(self) -> None:
        return None


def scripted_run(answer, concurrency: int = 2, time_limit_s: float = 0.3) -> tuple[SimWorkloadRun, ListHistory, list]:
    history, opened = ListHistory(), []
    run = SimWorkloadRun("queue", {"topic": "q", "partitions": 2}, None, random.Random(1), "b:1", history,
                         concurrency=concurrency, time_limit_s=time_limit_s, rate=40)
    run._client = lambda process: ScriptedClient(answer, opened, process)
    return run, history, opened


def test_an_info_op_retires_its_process_and_the_worker_goes_on_as_a_new_one():
    infos = iter([True, False, False, False] + [False] * 1000)
    run, history, opened = scripted_run(lambda op: INFO if op.process == 0 and next(infos) else OK)
    asyncio.run(run.main_phase())
    by_process = {}
    for op in history.ops:
        by_process.setdefault(op.process, []).append(op.type)
    assert by_process[0] == [INVOKE, INFO]  # process 0 issued nothing after its info
    assert 2 in by_process and by_process[2][0] == INVOKE  # worker 0 went on as process 0 + concurrency
    assert opened.count(0) == 1 and 2 in opened  # with a new client


def test_a_fail_op_keeps_its_process():
    run, history, _ = scripted_run(lambda op: FAIL)
    asyncio.run(run.main_phase())
    assert {op.process for op in history.ops} == {0, 1}


def test_an_op_that_never_returns_ends_info_abandoned_after_the_grace(monkeypatch):
    monkeypatch.setattr(driver_module, "MAIN_PHASE_GRACE_S", 0.2)
    run, history, _ = scripted_run(lambda op: "hang" if op.process == 1 else OK)
    asyncio.run(run.main_phase())
    (abandoned,) = [op for op in history.ops if op.process == 1 and op.type != INVOKE]
    assert abandoned.type == INFO and abandoned.error == driver_module.ABANDONED


def test_final_reads_take_fresh_processes_and_a_failed_one_is_tried_again_on_another(monkeypatch):
    monkeypatch.setattr(driver_module, "FINAL_READ_RETRY_S", 5.0)
    tries = {"key0": 0}

    def answer(op):
        if op.f != "final-poll":
            return OK
        if op.value == [0]:
            tries["key0"] += 1
            return INFO if tries["key0"] == 1 else OK
        return OK

    run, history, _ = scripted_run(answer)

    async def both():
        await run.main_phase()
        await run.final_reads()

    asyncio.run(both())
    finals = [op for op in history.ops if op.f == "final-poll"]
    main_processes = {op.process for op in history.ops if op.f != "final-poll"}
    assert [(op.type, op.value) for op in finals if op.type != INVOKE] == [(INFO, [0]), (OK, [0]), (OK, [1])]
    final_processes = [op.process for op in finals if op.type == INVOKE]
    assert len(set(final_processes)) == 3 and min(final_processes) > max(main_processes)


def test_a_workload_without_a_simulated_client_is_refused():
    with pytest.raises(ValueError, match="no simulated client"):
        SimWorkloadRun("register", {}, None, random.Random(1), "b:1", ListHistory())
