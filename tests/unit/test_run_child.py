"""A campaign's run in a child process (harness/run_child.py): the spec crosses as JSON unchanged, a run whose
harness fails says so in one sentence (as run_test's exception did in the campaign's own process), and every
SIGINT, SIGTERM or SIGHUP the campaign gets while a child runs goes on to the child, once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaesque_harness.harness.campaign import run_campaign
from kafkaesque_harness.harness.campaign_file import load_campaign
from kafkaesque_harness.harness.run_child import RunChildError, _note_status, _signals_handed_on, run_in_child
from kafkaesque_harness.harness.spec import TestSpec


def test_every_planned_spec_crosses_to_the_child_unchanged():
    plan = load_campaign(Path("campaigns/nightly.toml"), store="/tmp/unused-store")
    for planned in plan.runs:
        assert TestSpec.from_dict(json.loads(json.dumps(planned.spec.to_dict(), default=str))) == planned.spec


def test_a_run_whose_harness_fails_is_one_sentence_and_the_campaign_records_it(tmp_path):
    missing = tmp_path / "no-such-nodes.toml"
    spec = TestSpec.make(store=str(tmp_path / "store"), cluster=f"ssh:{missing}", time_limit=1.0)

    with pytest.raises(RunChildError) as caught:
        run_in_child(spec, log=lambda m: None)

    assert str(caught.value).startswith("HarnessError: ") and str(missing) in str(caught.value)


def test_a_campaign_goes_on_past_a_run_whose_harness_failed(tmp_path):
    (tmp_path / "c.toml").write_text('[campaign]\nname = "ci"\ncluster = "local"\ntime_limit = 1\n'
                                     'repetitions = 2\n')
    plan = load_campaign(tmp_path / "c.toml", store=str(tmp_path / "store"))
    for planned in plan.runs:
        planned.spec.cluster = f"ssh:{tmp_path / 'no-such-nodes.toml'}"

    code, cdir = run_campaign(plan, log=lambda m: None)  # the default: each run in a child process

    runs = json.loads((cdir / "campaign.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["unknown", "unknown"] and code == 2
    assert all(r["error"].startswith("HarnessError: ") and r["exit_code"] == 3 for r in runs)


TRAPPING_CHILD = r"""
import signal, sys, time
got = []
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda n, f: got.append(n))
print("ready", flush=True)
deadline = time.monotonic() + 10
while len(got) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
print(" ".join(map(str, got)), flush=True)
"""


def test_signals_the_campaign_gets_while_a_child_runs_go_on_to_the_child_once_each(foreground_signals):
    with _signals_handed_on() as hand_on:
        child = subprocess.Popen([sys.executable, "-c", TRAPPING_CHILD], stdout=subprocess.PIPE, text=True,
                                 process_group=0)
        hand_on.child = child
        assert child.stdout.readline().strip() == "ready"
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), s)  # would end pytest, were it not handed on
            time.sleep(0.1)
        out, _ = child.communicate(timeout=15)
    assert out.split() == [str(int(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    assert hand_on.received == [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    assert all(signal.getsignal(s) is h for s, h in foreground_signals.items())  # put back


def test_a_signal_the_campaign_ignores_is_not_handed_on(foreground_signals):
    """`nohup kafkaesque campaign ...`: a hangup reaches neither the campaign nor its run."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with _signals_handed_on() as hand_on:
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)  # handed on (no child yet: only noted)
        time.sleep(0.1)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert hand_on.received == [signal.SIGTERM]


def test_a_run_the_campaign_was_signalled_during_keeps_its_results_and_stops_the_campaign(tmp_path):
    from kafkaesque_harness.harness.run_child import RunInterrupted
    from kafkaesque_harness.results.store import create_run_dir

    (tmp_path / "c.toml").write_text('[campaign]\nname = "ci"\ncluster = "local"\ntime_limit = 1\n'
                                     'repetitions = 3\n')
    plan = load_campaign(tmp_path / "c.toml", store=str(tmp_path / "store"))

    def healed_after_ctrl_c(spec, log=print, panel=False):
        run_dir = create_run_dir(spec.store, spec.name)
        (run_dir / "results.json").write_text(json.dumps({"valid": "unknown", "interrupted":
                                                          "interrupted by the user (Ctrl-C)"}))
        raise RunInterrupted(run_dir, 2)

    code, cdir = run_campaign(plan, run=healed_after_ctrl_c, log=lambda m: None)

    runs = json.loads((cdir / "campaign.json").read_text())["runs"]
    assert runs[0]["status"] == "unknown" and runs[0]["run_dir"] and runs[0]["exit_code"] == 2
    assert runs[0]["error"] == "interrupted by the user (Ctrl-C)"
    assert [r["skipped"] for r in runs[1:]] == ["interrupted", "interrupted"] and code == 130


def test_what_ended_a_dead_harness_goes_beside_its_watchdogs_note(tmp_path):
    (tmp_path / "harness-died.txt").write_text("the harness died before the end of its run\n")
    _note_status(tmp_path, -signal.SIGSEGV)
    assert (tmp_path / "harness-died.txt").read_text().splitlines()[-1] == \
        "the run's process ended with status -11 (killed by SIGSEGV)"
    assert not (tmp_path / "harness-frozen.txt").exists()
