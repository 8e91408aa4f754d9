"""The clock-offset preload shifts only the wall clock of the processes that load it, live."""

import json
import subprocess
import sys
import time

from nemesis import clock_preload

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
