"""Waiting for a condition, once for the whole project: `wait_until(condition, timeout, interval, what)`.

Clusters wait for brokers to register and file systems to mount, faults for a process to stop
or a file system's report, scenarios for the protocol to get somewhere, the runner for a client
to connect. Each of those was a loop of its own around `time.monotonic()`; this is the one loop.
It lives in clusters/ (the lowest room that clusters, nemesis and harness all import) and imports
nothing of the project; the reference broker (clusters/broker/) keeps its own loops, since what
runs on a node must not need the harness.

The condition is asked at once, then every `interval` seconds; it is asked one last time when the
time is up, so a condition met during the last sleep still counts, and a timeout of 0 asks once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """A condition did not hold in time; the message names what was awaited and the timeout."""

    def __init__(self, what: str, timeout: float):
        super().__init__(f"{what} did not happen within {timeout:g} s")
        self.what = what
        self.timeout = timeout


def wait_until(condition: Callable[[], T], timeout: float, interval: float = 0.1, what: str = "the condition",
               *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """The condition's first truthy value, asked every `interval` seconds for up to `timeout` seconds;
    WaitTimeout (a TimeoutError) naming `what` when it never held. An exception the condition raises
    goes through at once: a condition that may fail for a moment catches that itself."""
    deadline = clock() + timeout
    while True:
        value = condition()
        if value:
            return value
        if clock() >= deadline:
            raise WaitTimeout(what, timeout)
        sleep(interval)
