"""The exact iptables/tc commands behind network faults."""

import pytest

from kafkaesque_harness.clusters import netrules


def test_partition_rules_drop_each_peer_once_in_our_chain():
    rules = netrules.drop_from(["10.0.0.3", "10.0.0.2", "10.0.0.3"])
    assert rules == [["iptables", "-w", "-A", "KAFKAESQUE", "-s", "10.0.0.2,10.0.0.3", "-j", "DROP"]]
    assert netrules.drop_from([]) == []


def test_heal_flushes_only_our_chain():
    (argv,) = netrules.heal()
    assert "-F KAFKAESQUE" in argv[-1] and "INPUT" not in argv[-1]


def test_loss_probability_must_be_a_probability():
    with pytest.raises(ValueError, match="must be in"):
        netrules.random_loss_from(["10.0.0.2"], 1.5)
    (rule,) = netrules.random_loss_from(["10.0.0.2"], 0.25)
    assert rule[rule.index("--probability") + 1] == "0.2500"


def test_device_names_are_quoted():
    assert "'eth0; reboot'" in netrules.clear_qdisc("eth0; reboot")[-1]
