import signal

import pytest

from kafkaesque_harness.nemesis.actions import FaultActions


@pytest.fixture
def foreground_signals():
    """SIGINT, SIGTERM and SIGHUP as a command typed at a terminal has them (Python's Ctrl-C handler, the
    defaults), whatever pytest was started with: under nohup SIGHUP is ignored, started with `&` by a script
    SIGINT is, and the harness leaves a signal ignored at its start ignored (harness/runner.py not_ignored).
    Put back afterwards."""
    foreground = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                  signal.SIGHUP: signal.SIG_DFL}
    before = {s: signal.signal(s, h) for s, h in foreground.items()}
    yield foreground
    for s, h in before.items():
        signal.signal(s, h)


@pytest.fixture
def power_cuts(monkeypatch):
    """A lossy crash (FaultActions' power cut) is a kill that drops nothing: no lossy file system is needed."""
    def crash(self, node):
        self.cluster.kill(node)
        return {"event": "dropped"}

    monkeypatch.setattr(FaultActions, "_crash_and_drop", crash)
