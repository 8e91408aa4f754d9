"""Nightly chaos in the user's own CI, ready to copy (issue 39 item 5): the examples under examples/ci/
parse as what they are (GitHub Actions, GitLab CI, a campaign file), name only kafkaesque commands and
options that exist, and publish the JUnit file where the campaign writes it."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
import yaml

from kafkaesque_harness.harness.campaign_file import load_campaign
from kafkaesque_harness.harness.cli import app

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "examples" / "ci"


def _scripts(doc) -> list[str]:
    """Every shell line of a workflow (GitHub `run:`) or a job (GitLab `script:`)."""
    if isinstance(doc, dict):
        out = []
        for key, value in doc.items():
            if key == "run" and isinstance(value, str):
                out += value.splitlines()
            elif key == "script" and isinstance(value, list):
                out += [str(v) for v in value]
            else:
                out += _scripts(value)
        return out
    if isinstance(doc, list):
        return [line for item in doc for line in _scripts(item)]
    return []


def _kafkaesque_commands(lines: list[str]) -> list[list[str]]:
    return [shlex.split(line)[1:] for line in lines if line.strip().startswith("kafkaesque ")]


def _assert_known(argv: list[str]) -> None:
    """The subcommand exists and every option it is given is one of its own (click parses the line)."""
    root = typer.main.get_command(app)
    command, args = root, list(argv)
    while args and hasattr(command, "commands") and args[0] in command.commands:
        command = command.commands[args.pop(0)]
    assert command is not root, f"no kafkaesque command in {argv}"
    command.make_context(" ".join(argv[: len(argv) - len(args)]), list(args), resilient_parsing=False)


def test_the_github_actions_workflow_runs_the_campaign_and_publishes_its_junit_and_store():
    doc = yaml.safe_load((CI / "github-actions.yml").read_text())
    assert "schedule" in doc[True] or "schedule" in doc.get("on", {})  # YAML 1.1 reads `on:` as True
    steps = doc["jobs"]["chaos"]["steps"]
    commands = _kafkaesque_commands(_scripts(doc))
    assert any(c[0] == "campaign" for c in commands), commands
    for argv in commands:
        _assert_known(argv)
    uses = {s.get("uses", "").split("@")[0]: s for s in steps}
    assert uses["mikepenz/action-junit-report"]["with"]["report_paths"] == \
        "store/campaigns/nightly-chaos/latest/junit.xml"
    assert uses["actions/upload-artifact"]["with"]["path"] == "store/"


def test_the_gitlab_job_runs_the_campaign_and_keeps_its_junit_and_store():
    doc = yaml.safe_load((CI / "gitlab-ci.yml").read_text())
    job = doc["nightly-chaos"]
    commands = _kafkaesque_commands(job["script"])
    assert any(c[0] == "campaign" for c in commands), commands
    for argv in commands:
        _assert_known(argv)
    assert job["artifacts"]["reports"]["junit"] == "store/campaigns/nightly-chaos/latest/junit.xml"
    assert "store/" in job["artifacts"]["paths"] and job["artifacts"]["when"] == "always"


def test_the_examples_campaign_file_loads_and_names_the_campaign_the_junit_paths_expect():
    campaign = load_campaign(str(CI / "nightly-chaos.toml"), store="store", cluster="local")
    assert campaign.name == "nightly-chaos" and len(campaign.runs) >= 4


def test_a_made_up_option_would_be_caught():
    try:
        _assert_known(["campaign", "x.toml", "--no-such-option"])
    except Exception as e:  # noqa: BLE001 - click's NoSuchOption
        assert "no-such-option" in str(e)
    else:
        raise AssertionError("an unknown option passed the check")
