"""SIGTERM (what a CI timeout sends) during a partition of a local run (as root: a namespace per node)
heals, tears down and writes the results (issue 20 item 2, harness/runner.py `_signals_handled`): no
rule, paused process, lossy mount or namespace of the run is left, and results.json says valid
"unknown", interrupted "interrupted by SIGTERM"; the exit code is 130. The helpers are test_cleanup_live.py's."""

from __future__ import annotations

import json
import signal

import pytest

from tests.integration.test_cleanup_live import (  # noqa: F401 - env is a fixture
    env,
    nothing_left,
    start_partition_and_pause_run,
    wait_for_partition_and_pause,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sigterm_during_a_partition_heals_tears_down_and_writes_unknown_results(tmp_path, env):  # noqa: F811
    run = start_partition_and_pause_run(tmp_path, env, "sigterm")
    try:
        wait_for_partition_and_pause(run)
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait(240)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(30)
    assert nothing_left(run.owner, run.run_dir) == {}
    assert any(op["f"] == "heal" and op["type"] == "info" for op in run.ops())
    results = json.loads((run.run_dir / "results.json").read_text())
    assert results["interrupted"] == "interrupted by SIGTERM"
    assert results["valid"] == "unknown", run.output()[-3000:]  # a run cut short cannot be valid, nor show a loss
    assert code == 130  # interrupted, whenever the signal comes (harness/console.py EXIT_INTERRUPTED)
