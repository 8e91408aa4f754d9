"""wait_until (clusters/waiting.py): the condition's value when it holds, one sentence when it never does, and
the interval between asks honoured (a fake clock, then real short times)."""

from __future__ import annotations

import threading
import time

import pytest

from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until


class FakeClock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_it_returns_the_conditions_first_truthy_value():
    answers = iter([None, 0, "", {"leader": 2}, "later"])
    t = FakeClock()
    assert wait_until(lambda: next(answers), 10, 0.5, "a leader", clock=t.clock, sleep=t.sleep) == {"leader": 2}
    assert t.sleeps == [0.5, 0.5, 0.5]  # three misses, one sleep after each


def test_a_condition_that_holds_at_once_is_asked_once_and_never_sleeps():
    t = FakeClock()
    calls = []
    assert wait_until(lambda: calls.append(1) or True, 10, 1.0, clock=t.clock, sleep=t.sleep) is True
    assert calls == [1] and t.sleeps == []


def test_a_timeout_is_a_timeout_error_naming_what_and_how_long():
    t = FakeClock()
    with pytest.raises(WaitTimeout) as e:
        wait_until(lambda: False, 2, 0.5, "broker-2's registration", clock=t.clock, sleep=t.sleep)
    assert isinstance(e.value, TimeoutError)
    assert str(e.value) == "broker-2's registration did not happen within 2 s"
    assert (e.value.what, e.value.timeout) == ("broker-2's registration", 2)


def test_the_interval_is_honoured_and_the_condition_is_asked_once_more_when_time_is_up():
    t = FakeClock()
    asked_at = []

    def never() -> bool:
        asked_at.append(t.now - 100.0)
        return False

    with pytest.raises(WaitTimeout):
        wait_until(never, 1.0, 0.25, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == [0.25] * 4
    assert asked_at == [0.0, 0.25, 0.5, 0.75, 1.0]  # at once, every interval, and at the deadline


def test_a_zero_timeout_asks_once():
    t = FakeClock()
    assert wait_until(lambda: "yes", 0, 1.0, clock=t.clock, sleep=t.sleep) == "yes"
    with pytest.raises(WaitTimeout, match="the condition did not happen within 0 s"):
        wait_until(lambda: None, 0, 1.0, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == []


def test_an_exception_of_the_condition_goes_through_at_once():
    t = FakeClock()

    def broken():
        raise ConnectionError("no controller")

    with pytest.raises(ConnectionError):
        wait_until(broken, 10, 1.0, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == []


def test_with_real_time_it_sees_a_change_within_an_interval_and_gives_up_after_the_timeout():
    flag = threading.Event()
    threading.Timer(0.05, flag.set).start()
    t0 = time.monotonic()
    assert wait_until(flag.is_set, 5, 0.01, "the flag") is True
    assert time.monotonic() - t0 < 1.0
    asks = []
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout):
        wait_until(lambda: asks.append(1), 0.2, 0.05, "nothing")
    took = time.monotonic() - t0
    assert 0.2 <= took < 1.0 and 3 <= len(asks) <= 6  # every 50 ms for 200 ms, and once at the end
