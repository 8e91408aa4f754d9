"""User errors at the CLI: one sentence naming the cause and the fix, exit 3, nothing started."""

import json

from typer.testing import CliRunner

from kafkaesque_harness.harness.cli import app

runner = CliRunner()


def test_unknown_workload_lists_the_valid_ones():
    r = runner.invoke(app, ["run", "--workload", "bank"])
    assert r.exit_code == 3
    assert "unknown workload 'bank'; valid: queue" in r.output


def test_unknown_nemesis_lists_the_valid_ones():
    r = runner.invoke(app, ["run", "--nemesis", "kill,meteor"])
    assert r.exit_code == 3 and "unknown nemesis 'meteor'; valid: client-partition, clock, clock-jump" in r.output


def test_unknown_broker_variant_lists_the_historic_flaws():
    r = runner.invoke(app, ["run", "--broker-variant", "no-fsync"])
    assert r.exit_code == 3
    assert ("unknown --broker-variant 'no-fsync'; valid: default, truncate-to-hw, no-elr, unclean-election, "
            "no-epoch-fencing, txn-markers-no-epoch-bump, read-committed-to-hwm, offsets-commit-acks-1, "
            "zombie-not-fenced.") in r.output


def test_unknown_unclean_recovery_strategy_is_refused():
    r = runner.invoke(app, ["run", "--unclean-recovery-strategy", "yolo"])
    assert r.exit_code == 3 and "valid: proactive, balanced, manual" in r.output


def test_impossible_replication_settings_are_refused():
    r = runner.invoke(app, ["run", "--min-isr", "4"])
    assert r.exit_code == 3 and "--min-isr" in r.output


def test_unwritable_store_is_one_sentence_and_exit_3(tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    r = runner.invoke(app, ["run", "--store", str(blocker), "--time-limit", "1"])
    assert r.exit_code == 3 and "pass a writable --store directory" in r.output
    assert "Traceback" not in r.output


def test_analyze_refuses_a_directory_that_is_not_a_run(tmp_path):
    r = runner.invoke(app, ["analyze", str(tmp_path)])
    assert r.exit_code == 3 and "is not a run directory" in r.output


def test_ls_shows_runs(tmp_path):
    run = tmp_path / "queue" / "20260101T000000"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": []}))
    (run / "results.json").write_text(json.dumps({"valid": False, "checkers": {}}))
    r = runner.invoke(app, ["ls", "--store", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "20260101T000000" in r.output and "False" in r.output


def test_report_command_rewrites_the_report(tmp_path):
    run = tmp_path / "queue" / "20260101T000000"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": []}))
    (run / "history.jsonl").write_text("")
    (run / "results.json").write_text(json.dumps({"valid": True, "checkers": {}}))
    r = runner.invoke(app, ["report", str(run)])
    assert r.exit_code == 0 and (run / "report.html").exists() and "VALID" in (run / "report.html").read_text()


def test_unknown_nemesis_target_lists_the_valid_ones():
    r = runner.invoke(app, ["run", "--nemesis", "kill", "--nemesis-target", "the-boss"])
    assert r.exit_code == 3 and "unknown --nemesis-target 'the-boss'; valid: random-node" in r.output


def test_unknown_nemesis_schedule_and_an_even_or_foreign_controller_quorum_are_one_sentence():
    r = runner.invoke(app, ["run", "--nemesis", "kill", "--nemesis-schedule", "chaos"])
    assert r.exit_code == 3 and "unknown --nemesis-schedule 'chaos'; valid: mix, sequential" in r.output
    r = runner.invoke(app, ["run", "--controllers", "2"])
    assert r.exit_code == 3 and "--controllers 2 is not an odd number" in r.output
    r = runner.invoke(app, ["run", "--controllers", "3", "--cluster", "ssh:nodes.toml"])
    assert r.exit_code == 3 and "needs our own cluster" in r.output


def test_the_verdict_is_followed_by_every_reason_it_is_unknown(tmp_path, capsys):
    from kafkaesque_harness.harness.cli import _print_verdict

    (tmp_path / "results.json").write_text(json.dumps({
        "valid": "unknown", "checkers": {},
        "unknown_reasons": ["queue: partition 2 was never read", "replicas: the dump of broker-1 [x] is missing"]}))
    _print_verdict(tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["valid: unknown", "  unknown: queue: partition 2 was never read",
                       "  unknown: replicas: the dump of broker-1 [x] is missing"]


def test_a_reader_that_closes_the_pipe_early_ends_in_exit_3_not_1():
    """`kafkaesque faults | head -c 10`: the broken pipe is the harness's own failure to deliver its
    output (exit 3, one sentence), never exit 1, which means "invalid" (rich and typer both exit 1)."""
    import subprocess
    import sys

    for args in (["faults"], ["--help"]):
        proc = subprocess.Popen([sys.executable, "-m", "kafkaesque_harness.harness.cli", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader goes away before a byte is read
        _, err_text = proc.communicate(timeout=60)
        assert proc.returncode == 3, (args, proc.returncode, err_text)
        assert b"closed the pipe" in err_text and b"Traceback" not in err_text
