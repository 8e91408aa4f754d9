"""`kafkaesque pipeline standalone down` stops only the Spark daemons `up` started (results/pipeline/standalone.py):
a pid that is now some other process, or the same pid with another start time, is left alone."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.ownership import process_start_time
from kafkaesque_harness.results.pipeline import PipelineError
from kafkaesque_harness.results.pipeline.standalone import STATE_FILE, stop


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


def write_state(tmp_path, processes):
    (tmp_path / STATE_FILE).write_text(json.dumps({"url": "spark://127.0.0.1:7077", "dir": str(tmp_path),
                                                   "processes": processes}))


def test_a_process_that_is_not_a_spark_daemon_is_never_stopped(tmp_path, sleeper):
    # the recorded pid and start time are right, but the process is not Spark's (its pid was reused)
    write_state(tmp_path, {"master": {"pid": sleeper.pid, "start": process_start_time(sleeper.pid)}})
    assert stop(tmp_path, wait_s=0.5) == []
    assert sleeper.poll() is None
    assert not (tmp_path / STATE_FILE).exists()  # nothing of ours is left: the state goes


def test_a_pid_with_another_start_time_is_not_ours(tmp_path, sleeper):
    write_state(tmp_path, {"master": {"pid": sleeper.pid, "start": process_start_time(sleeper.pid) - 1}})
    assert stop(tmp_path, wait_s=0.5) == []
    assert sleeper.poll() is None


def test_a_spark_daemon_recorded_here_is_stopped(tmp_path):
    # a stand-in whose command line names a Spark daemon class, as spark-class's JVM does
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "org.apache.spark.deploy.master.Master"],
                         start_new_session=True)
    try:
        # recorded once its command line shows the class, as `start` records a daemon that is up (right after
        # the fork the stand-in could still be found without it: this test failed 2 runs in 4 on a loaded machine)
        deadline = time.monotonic() + 10
        while b"org.apache.spark.deploy." not in Path(f"/proc/{p.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        write_state(tmp_path, {"master": {"pid": p.pid, "start": process_start_time(p.pid)}})
        assert stop(tmp_path, wait_s=10) == ["master"]
        assert p.wait(10) is not None
    finally:
        p.kill()
        p.wait()


def test_no_state_means_nothing_to_stop_and_a_bad_state_file_says_so(tmp_path):
    assert stop(tmp_path) == []
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(PipelineError, match="cannot be read"):
        stop(tmp_path)


@pytest.mark.parametrize("master, cores", [
    ("local", 1), ("local[2]", 2), ("local[4,3]", 4), ("local[*]", os.cpu_count() or 1), ("local[x]", 1),
    ("spark://127.0.0.1:7077", 2),
])
def test_a_jobs_cores_follow_its_master(master, cores):
    from kafkaesque_harness.results.pipeline.session import _cores

    assert _cores(master) == cores
