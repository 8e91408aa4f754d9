"""The yardstick a benchmark prints before and after its figures: how fast this machine runs fixed CPython work.

These machines are shared and their speed moves: the same code's bench_broker.py gave 2,991 acked sends/s
one day and 1,707 the next, and on one quiet afternoon the yardstick itself read 68 ms and, minutes later,
131 ms (the load average near 0 both times, no steal time in /proc/stat). The work is fixed (a loop of
integer additions, and orjson parsing queue-workload lines: the two kinds of work our checkers and brokers
spend their time on), so the yardstick moves only with the machine. A figure compares with another only
where the yardsticks around both agree; where those before and after a run differ, so did the machine
during it. A comparison of two trees is sound only alternated, round by round, in one sitting.

    .venv/bin/python benchmarks/yardstick.py
"""

from __future__ import annotations

import atexit
import os
import time

LOOP = 2_000_000
LINE = (b'{"time":10246855,"process":7,"type":"ok","f":"poll","value":{"49":[[0,2],[1,5],[2,9]],'
        b'"57":[[0,1],[1,3]]},"index":7}\n')
LINES = 100_000


def _best_of(rounds: int, work) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t0)
    return best


def _loop() -> None:
    s = 0
    for i in range(LOOP):
        s += i


def _parse() -> None:
    from orjson import loads

    for _ in range(LINES):
        loads(LINE)


def yardstick() -> str:
    """One line: the best of 3 timings of each fixed piece of work on one core, and the load average now."""
    loop_ms, parse_ms = _best_of(3, _loop) * 1e3, _best_of(3, _parse) * 1e3
    return (f"yardstick: {LOOP / 1e6:.0f}M CPython additions {loop_ms:.0f} ms, orjson {LINES // 1000}k history "
            f"lines {parse_ms:.0f} ms (best of 3; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")


def bracket() -> None:
    """Print the yardstick now, and again when the benchmark's process exits."""
    print(yardstick(), flush=True)
    atexit.register(lambda: print("after: " + yardstick(), flush=True))


if __name__ == "__main__":
    print(yardstick())
