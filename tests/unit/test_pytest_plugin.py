"""The pytest plugin (harness/pytest_plugin.py): registered through its entry point, settings checked
before anything starts, and a wrong verdict reported with the anomalies and the report's path.

The real runs it makes are in the integration tests that use it (test_run_local.py,
test_scenario_runs.py, test_ssh_cluster.py, test_external_cluster.py); here pytest runs small test
files in a subprocess, as a user's project would, and the failure message is built from stored
results."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kafkaesque_harness.harness.pytest_plugin import (
    ClusterChoice,
    KafkaesqueRun,
    NemesisChoice,
    build_spec,
    verdict_problem,
)


def run_pytest(tmp_path: Path, test_source: str, *args: str) -> subprocess.CompletedProcess:
    """pytest on one test file in a fresh process and an empty dir: only the entry point can load the plugin."""
    (tmp_path / "test_user.py").write_text(textwrap.dedent(test_source))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_entry_point_registers_the_options_and_fixtures(tmp_path):
    r = run_pytest(tmp_path, "def test_nothing():\n    pass\n", "--help")
    assert "--kafkaesque-cluster" in r.stdout and "--kafkaesque-store" in r.stdout
    r = run_pytest(tmp_path, "def test_nothing():\n    pass\n", "--fixtures")
    for fixture in ("kafkaesque_cluster", "kafkaesque_nemesis", "kafkaesque_run", "kafkaesque_history",
                    "kafkaesque_store"):
        assert fixture in r.stdout, fixture


def test_bad_settings_fail_the_test_with_one_sentence_before_any_run(tmp_path):
    r = run_pytest(tmp_path, """
        import pytest

        @pytest.mark.kafkaesque(cluster="local", time_limt=5)  # the marker wins over the option
        def test_typo(kafkaesque_history):
            pass

        @pytest.mark.kafkaesque(cluster="local", nemesis="kill,meteor")
        def test_unknown_fault(kafkaesque_run):
            kafkaesque_run()

        def test_unknown_cluster(kafkaesque_cluster):
            pass
        """, "--kafkaesque-cluster", "nowhere", "--kafkaesque-store", str(tmp_path / "store"))
    out = r.stdout
    assert r.returncode == 1 and "3 errors" in out, out[-2000:]
    assert "kafkaesque: unknown kafkaesque setting(s) time_limt; valid: any setting of `kafkaesque run`" in out
    assert "kafkaesque nemesis: unknown nemesis 'meteor'" in out
    assert "--kafkaesque-cluster: unknown cluster 'nowhere'; valid: auto, docker, local, FILE.toml" in out
    assert not (tmp_path / "store").exists()  # nothing ran


def test_build_spec_layers_fixtures_marker_and_call(tmp_path):
    cluster, nemesis = ClusterChoice("local"), NemesisChoice(["kill"], "leader", 4.0)
    spec = build_spec({"time_limit": 5, "nemesis": "pause,kill"}, cluster, nemesis, str(tmp_path), "t", seed=9)
    assert (spec.cluster, spec.nemesis, spec.nemesis_target, spec.nemesis_interval) == ("local", ["pause", "kill"],
                                                                                        "leader", 4.0)
    assert (spec.time_limit, spec.seed, spec.store, spec.name) == (5, 9, str(tmp_path), "t")
    with pytest.raises(ValueError, match="unknown workload 'kv2'"):
        build_spec({"workload": "kv2"}, cluster, nemesis, str(tmp_path), "t")
    with pytest.raises(ValueError, match="cannot read the cluster file"):
        build_spec({"cluster": str(tmp_path / "missing.toml")}, cluster, nemesis, str(tmp_path), "t")


def test_build_spec_refuses_what_kafkaesque_run_refuses(tmp_path):
    cluster, nemesis = ClusterChoice("local"), NemesisChoice()
    with pytest.raises(ValueError, match=r"^time_limit=-5 is not a number of seconds above 0; set it above 0"):
        build_spec({"time_limit": -5}, cluster, nemesis, str(tmp_path), "t")
    with pytest.raises(ValueError, match=r"^unknown nemesis_target 'the-boss'; valid: random-node"):
        build_spec({}, cluster, NemesisChoice(["kill"], "the-boss"), str(tmp_path), "t")


def test_a_nemesis_interval_that_is_not_a_number_fails_the_test_with_one_sentence(tmp_path):
    r = run_pytest(tmp_path, """
        import pytest

        @pytest.mark.kafkaesque(cluster="local", nemesis="kill", nemesis_interval="often")
        def test_interval(kafkaesque_run):
            kafkaesque_run()
        """, "--kafkaesque-store", str(tmp_path / "store"))
    out = r.stdout
    assert r.returncode == 1 and "1 error" in out, out[-2000:]
    assert "kafkaesque nemesis: nemesis_interval='often' must be a number; write e.g. nemesis_interval=10." in out
    assert "Traceback" not in out and not (tmp_path / "store").exists()


def stored_run(tmp_path: Path, valid, anomalies: list[dict] | None = None, **extra) -> KafkaesqueRun:
    run_dir = tmp_path / "store" / "t" / "20260101T000000"
    run_dir.mkdir(parents=True)
    results = {"valid": valid, "checkers": {"queue": {"valid": valid, "anomalies": anomalies or []}}, **extra}
    test = {"name": "t", "cluster": "docker", "nemesis": ["kill"], "seed": 3}
    (run_dir / "results.json").write_text(json.dumps(results))
    return KafkaesqueRun(1 if valid is False else 0, run_dir, test, results)


def test_a_wrong_verdict_names_the_anomalies_the_report_and_the_run(tmp_path):
    lost = {"name": "lost-write", "count": 2, "examples": [{"summary": "send 17 to key 0 acked at offset 4, never read"}]}
    run = stored_run(tmp_path, False, [lost])
    message = verdict_problem(run, True)
    assert message.splitlines()[0] == ("kafkaesque run t is valid=false, expected valid=true (cluster docker, nemesis "
                                       "kill, seed 3)")
    assert "  queue: lost-write x2" in message and "    - send 17 to key 0 acked at offset 4, never read" in message
    assert f"  report: {run.run_dir / 'report.html'}" in message and f"  run dir: {run.run_dir}" in message
    assert run.anomalies() == ["queue: lost-write x2"]
    assert verdict_problem(run, False) is None and verdict_problem(run, None) is None


def test_an_unexpectedly_valid_or_failed_run_says_so(tmp_path):
    assert "no anomalies found" in verdict_problem(stored_run(tmp_path / "a", True), False)
    failed = verdict_problem(stored_run(tmp_path / "b", "unknown", error="the partition fault cannot run"), True)
    assert 'valid="unknown"' in failed and "  error: the partition fault cannot run" in failed
