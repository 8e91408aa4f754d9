"""Protocol-aware scenarios inside real test runs (issue 8): each on the default broker, which must stay
valid, and on the broker variant the scenario exists to catch, which must be found out. On the local
cluster as root (a network namespace per node), so the scenarios can cut nodes off and power-cut them.
The runs go through the pytest plugin (harness/pytest_plugin.py), which asserts each verdict."""

from __future__ import annotations

import pytest

from kafkaesque_harness.clusters.netns import netns_available

# nightly: five-to-nine-minute runs (each scenario against its variant and the default broker), kept out
# of `make test` (30-minute budget); `make nightly` runs them, and docs/DETECTION.md measures the same
pytestmark = [pytest.mark.integration, pytest.mark.nightly]


def anomalies(results: dict) -> set[str]:
    return {a["name"] for c in results["checkers"].values() for a in c["anomalies"]}


def scenario_finds_its_flaw_and_the_default_stays_valid(kafkaesque_run, scenario, variant, caught_as):
    if not netns_available():
        pytest.fail("scenario runs need the local cluster as root (network namespaces); CI runs as root")
    nemesis = [f"scenario:{scenario}"]
    run = kafkaesque_run(nemesis=nemesis, broker_variant="default", expect=True)
    history = (run.run_dir / "history.jsonl").read_text()
    assert '"scenario-wait"' in history and "not reached" not in history, "the scenario must play to its end"
    assert run.code == 0
    run = kafkaesque_run(nemesis=nemesis, broker_variant=variant, expect=False)
    assert "not reached" not in (run.run_dir / "history.jsonl").read_text()
    assert run.code == 1 and caught_as in anomalies(run.results), anomalies(run.results)


@pytest.mark.kafkaesque(cluster="local", time_limit=45, nemesis_interval=5, recovery_wait=5)
@pytest.mark.parametrize("scenario,variant,caught_as", [
    ("unclean-election", "unclean-election", "lost-write"),
    ("last-replica-standing", "no-elr", "lost-write"),
])
def test_scenario_finds_its_flaw_and_the_default_broker_stays_valid(kafkaesque_run, scenario, variant, caught_as):
    scenario_finds_its_flaw_and_the_default_stays_valid(kafkaesque_run, scenario, variant, caught_as)


@pytest.mark.kafkaesque(cluster="local", time_limit=70, recovery_wait=5)
def test_zombie_follower_finds_a_follower_without_epoch_fencing(kafkaesque_run):
    """KAFKA-6880: its steps take about 30 s after the 10 s delay, so a longer run than the others."""
    scenario_finds_its_flaw_and_the_default_stays_valid(kafkaesque_run, "zombie-follower", "no-epoch-fencing",
                                                        "log-divergence")
