"""The clock-offset preload shifts only the wall clock of the processes that load it, live."""

import json
import subprocess
import sys
import time

from kafkaesque_harness.clusters import clock_preload

PROBE = r"""
import json, sys, threading, time
m0 = time.monotonic()
before = time.time()
time.sleep(0.05)                      # libfaketime made this raise EINVAL
threading.Event().wait(0.05)          # and this hang
ready = sys.stdin.readline()          # the test rewrites the clock file, then says go
time.sleep(0.05)
after = time.time()
print(json.dumps({"before": before, "after": after, "mono_elapsed": time.monotonic() - m0}))
"""


def _run_probe(tmp_path, first_offset_s: float, second_offset_s: float) -> dict:
    lib = clock_preload.build_preload(tmp_path / "cache")
    clock_file = tmp_path / "clock"
    clock_file.write_text(clock_preload.offset_file_text(int(first_offset_s * 1e9)))
    env = {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(lib, clock_file)}
    p = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=env, text=True)
    time.sleep(0.5)
    clock_file.write_text(clock_preload.offset_file_text(int(second_offset_s * 1e9)))
    time.sleep(0.05)
    out, _ = p.communicate("go\n", timeout=20)
    assert p.returncode == 0
    return json.loads(out)


def test_offset_applies_and_changes_live_without_breaking_sleeps(tmp_path):
    real_start = time.time()
    r = _run_probe(tmp_path, 3600, -7200)
    assert abs(r["before"] - real_start - 3600) < 5
    assert abs(r["after"] - time.time() + 7200) < 5
    assert r["mono_elapsed"] < 10  # monotonic time is the real one


def test_date_command_shows_the_offset(tmp_path):
    lib = clock_preload.build_preload(tmp_path / "cache")
    clock_file = tmp_path / "clock"
    clock_file.write_text(clock_preload.offset_file_text(86400 * 10**9))
    env = {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(lib, clock_file)}
    shown = int(subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout)
    assert abs(shown - time.time() - 86400) < 5
    clock_file.unlink()  # no file: no offset
    shown = int(subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout)
    assert abs(shown - time.time()) < 5


def _preloaded_env(tmp_path, control_text: str) -> tuple[dict, object]:
    lib = clock_preload.build_preload(tmp_path / "cache")
    clock_file = tmp_path / "clock"
    clock_file.write_text(control_text)
    return {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(lib, clock_file)}, clock_file


def test_a_jump_back_and_forth_shows_in_time_and_date_while_monotonic_time_runs_on(tmp_path):
    env, clock_file = _preloaded_env(tmp_path, clock_preload.offset_file_text(0))
    # The process sleeps across the jump: its wall clock steps back an hour, its monotonic
    # clock and its sleep do not.
    probe = ("import json, sys, time\n"
             "w0, m0 = time.time(), time.monotonic()\n"
             "print('ready', flush=True)\n"
             "sys.stdin.readline()\n"
             "time.sleep(0.05)\n"
             "print(json.dumps({'wall_step': time.time() - w0, 'mono_step': time.monotonic() - m0}))\n")
    p = subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=env, text=True)
    assert p.stdout.readline().strip() == "ready"  # it has read its clock before the jump
    clock_file.write_text(clock_preload.offset_file_text(-3600 * 10**9))
    time.sleep(0.05)
    out, _ = p.communicate("go\n", timeout=20)
    r = json.loads(out)
    assert 0 < r["mono_step"] < 20
    assert abs(r["wall_step"] - r["mono_step"] + 3600) < 5
    shown = int(subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout)
    assert abs(shown - time.time() + 3600) < 5
    clock_file.write_text(clock_preload.offset_file_text(0))  # the jump back, as the nemesis's stop does
    shown = int(subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout)
    assert abs(shown - time.time()) < 5


STROBE_PROBE = r"""
import json, time
base = time.time() - time.monotonic()
seen = set()
slept_ok = True
deadline = time.monotonic() + 15
while len(seen) < 2 and time.monotonic() < deadline:
    # wall minus monotonic is constant on a real clock; under the strobe it takes two values
    seen.add(round((time.time() - time.monotonic() - base) / 3600))
    t0 = time.monotonic()
    time.sleep(0.01)
    slept_ok = slept_ok and time.monotonic() - t0 >= 0.01
print(json.dumps({"seen": sorted(seen), "slept_ok": slept_ok}))
"""


def test_strobe_makes_the_wall_clock_alternate_and_leaves_sleeps_alone(tmp_path):
    env, _ = _preloaded_env(tmp_path, clock_preload.strobe_file_text(3600 * 10**9, 50 * 10**6))
    out = subprocess.run([sys.executable, "-c", STROBE_PROBE], env=env, capture_output=True, text=True,
                         check=True, timeout=30).stdout
    r = json.loads(out)
    assert len(r["seen"]) == 2 and r["seen"][1] - r["seen"][0] == 1  # real time, and real time + 1 h
    assert r["slept_ok"]


def test_a_running_strobe_ends_when_the_control_file_is_reset(tmp_path):
    env, clock_file = _preloaded_env(tmp_path, clock_preload.strobe_file_text(3600 * 10**9, 20 * 10**6))
    probe = ("import sys, time\n"
             "base = time.time() - time.monotonic()\n"
             "def offsets(n):\n"
             "    vals = set()\n"
             "    for _ in range(n):\n"
             "        vals.add(round((time.time() - time.monotonic() - base) / 3600)); time.sleep(0.005)\n"
             "    return vals\n"
             "while len(offsets(20)) < 2: pass\n"      # strobing: two values seen
             "print('strobing', flush=True)\n"
             "sys.stdin.readline()\n"
             "time.sleep(0.05)\n"                       # past the library's 10 ms re-read
             "print(len(offsets(30)))\n")
    p = subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=env, text=True)
    assert p.stdout.readline().strip() == "strobing"
    clock_file.write_text(clock_preload.offset_file_text(0))  # what the nemesis's stop writes
    out, _ = p.communicate("go\n", timeout=20)
    assert out.strip() == "1"


def test_a_strobe_needs_a_positive_period():
    import pytest

    with pytest.raises(ValueError, match="period must be positive"):
        clock_preload.strobe_file_text(10**9, 0)
