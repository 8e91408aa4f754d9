"""Protocol-aware scenarios inside real test runs (issue 8): each on the default broker, which must stay
valid, and on the broker variant the scenario exists to catch, which must be found out. On the local
cluster as root (a network namespace per node), so the scenarios can cut nodes off and power-cut them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusters.netns import netns_available
from tests.integration.test_run_local import kafkaesque

pytestmark = pytest.mark.integration


def run_scenario(tmp_path: Path, scenario: str, variant: str) -> tuple[int, dict, str]:
    if not netns_available():
        pytest.fail("scenario runs need the local cluster as root (network namespaces); CI runs as root")
    r = kafkaesque("run", "--cluster", "local", "--nemesis", f"scenario:{scenario}", "--broker-variant", variant,
                   "--time-limit", "45", "--nemesis-interval", "5", "--recovery-wait", "5",
                   "--store", str(tmp_path / variant), timeout=400)
    run_dir = Path(r.stdout.strip().splitlines()[-1])
    history = (run_dir / "history.jsonl").read_text()
    return r.returncode, json.loads((run_dir / "results.json").read_text()), history


def anomalies(results: dict) -> set[str]:
    return {a["name"] for c in results["checkers"].values() for a in c["anomalies"]}


@pytest.mark.parametrize("scenario,variant,caught_as", [
    ("unclean-election", "unclean-election", "lost-write"),
    ("last-replica-standing", "no-elr", "lost-write"),
])
def test_scenario_finds_its_flaw_and_the_default_broker_stays_valid(tmp_path, scenario, variant, caught_as):
    code, res, history = run_scenario(tmp_path, scenario, "default")
    assert '"scenario-wait"' in history and "not reached" not in history, "the scenario must play to its end"
    assert code == 0 and res["valid"] is True, anomalies(res)
    code, res, history = run_scenario(tmp_path, scenario, variant)
    assert "not reached" not in history
    assert code == 1 and caught_as in anomalies(res), anomalies(res)
