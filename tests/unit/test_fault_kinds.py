"""A fault is one module (nemesis/fault.py, nemesis/kinds/): the registry, the CLI's help and checks, and
the capability needs all come from the kinds' own declarations, so adding a fault is adding one file."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.nemesis import kinds
from kafkaesque_harness.nemesis.fault import FaultKind, Option
from kafkaesque_harness.nemesis.kinds import all_kinds
from kafkaesque_harness.nemesis.registry import make_nemesis, nemesis_help, nemesis_names, nemesis_problem
from kafkaesque_harness.nemesis.requirements import fault_needs

BEFORE = ("kill", "pause", "partition", "lossy-crash", "clock", "clock-jump", "clock-strobe", "net", "disk",
          "protocol", "drop-caches", "controller", "membership")  # the hand-written list the kinds replaced


def test_every_fault_the_hand_list_had_is_a_kind_and_makes_its_nemesis():
    assert set(BEFORE) <= set(nemesis_names())
    for name in BEFORE:
        assert make_nemesis([name], {}).parts[0].name == name


def test_the_help_and_the_valid_names_come_from_the_kinds():
    for name in nemesis_names():
        assert name in nemesis_help()
        assert name in nemesis_problem(["meteor"])
    assert "give one of them" in nemesis_problem(["protocol", "scenario:zombie-leader"])  # both self_driven=True


def test_capability_needs_are_the_kinds_declarations():
    assert fault_needs("partition") == (("iptables",), "all")
    assert fault_needs("lossy-crash") == (("fuse", "sigstop"), "brokers")
    assert fault_needs("clock") == ((), "all")
    assert fault_needs("no-such-fault") == ((), "all")


def test_a_new_module_in_the_package_is_a_fault_with_nothing_else_edited(tmp_path, monkeypatch):
    (tmp_path / "meteor.py").write_text(
        "from kafkaesque_harness.nemesis.fault import FaultKind, Option\n"
        "class Meteor:\n"
        "    name = 'meteor'\n"
        "    def __init__(self, options):\n"
        "        self.size = options['meteor_size']\n"
        "KIND = FaultKind('meteor', 'a meteor strikes', Meteor,\n"
        "                 options=(Option('meteor_size', int, 3, 'how big', low=1),))\n")
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(tmp_path)])
    all_kinds.cache_clear()
    try:
        assert "meteor" in nemesis_names() and nemesis_problem(["meteor", "kill"]) is None
        assert make_nemesis(["meteor"], {}).parts[0].size == 3  # the declared default
        assert TestSpec.make(nemesis=["meteor"], nemesis_options={"meteor_size": 0}).problems() == [
            "nemesis option 'meteor_size' = 0 is below 1; how big."]
    finally:
        monkeypatch.undo()
        all_kinds.cache_clear()
    assert "meteor" not in nemesis_names()


def test_an_unknown_ability_is_a_bug_in_the_declaration():
    with pytest.raises(ValueError, match="ability 'telepathy' is not a Need; declare it as Need"):
        FaultKind("x", "x", dict, abilities=("telepathy",))


@pytest.mark.parametrize("kind,text,value", [(int, "7", 7), (float, "0.5", 0.5), (bool, "no", False), (str, "a", "a")])
def test_an_option_parses_the_command_line_text_by_its_type(kind, text, value):
    assert Option("k", kind, kind(), "h").parse(text) == value


def test_the_faults_command_lists_each_kind_with_its_options():
    r = CliRunner().invoke(app, ["faults"])
    assert r.exit_code == 0
    for k in all_kinds().values():
        assert k.name in r.output and all(f"--nemesis-option {o.key}=" in r.output for o in k.options)
        assert all(f"\n    {n.why}\n" in r.output for n in k.abilities)
    assert "needs on the brokers: iptables, tc" in r.output and "needs on every node: iptables\n" in r.output


def test_a_bad_nemesis_option_stops_the_run_before_it_starts():
    r = CliRunner().invoke(app, ["run", "--nemesis", "disk", "--nemesis-option", "disk_mode=shred", "--cluster", "local"])
    assert r.exit_code == 3 and "'disk_mode' = 'shred' is not one of random, flip, truncate" in r.output
    r = CliRunner().invoke(app, ["run", "--nemesis", "kill", "--nemesis-option", "size"])
    assert r.exit_code == 3 and "is not KEY=VALUE" in r.output
