"""TestSpec.problems(): the one check of a run's settings, one sentence per bad setting, worded for where
the setting came from (a flag of `kafkaesque run`, a campaign file's key, a pytest marker's keyword)."""

from __future__ import annotations

import pytest

from kafkaesque_harness.harness.spec import TestSpec


def test_the_default_spec_has_no_problems():
    assert TestSpec().problems() == []


@pytest.mark.parametrize("setting", [
    {"time_limit": 0.0}, {"time_limit": -5.0}, {"time_limit": float("nan")}, {"time_limit": float("inf")},
    {"nemesis_interval": 0.0}, {"rate": -1.0}, {"recovery_wait": -0.5}, {"concurrency": 0}, {"brokers": 0},
    {"partitions": 0}, {"controllers": 2}, {"controllers": 0}, {"controllers": 3, "cluster": "ssh:nodes.toml"},
    {"min_isr": 0}, {"min_isr": 3, "replication_factor": 2}, {"replication_factor": 4},
    {"workload": "bank"}, {"nemesis": ["meteor"]}, {"nemesis_target": "the-boss"}, {"nemesis_schedule": "chaos"},
    {"acks": "most"}, {"client": "librdkafka"}, {"broker_variant": "no-fsync"}, {"unclean_recovery_strategy": "yolo"},
    {"flush_policy": "sometimes"}, {"cluster": "cloud"}, {"name": "../elsewhere"}, {"name": "campaigns"},
], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_each_bad_setting_is_one_sentence(setting):
    problems = TestSpec.make(**setting).problems()
    assert problems, setting
    for sentence in problems:
        assert sentence.endswith(".") and "\n" not in sentence


@pytest.mark.parametrize("style,sentence", [
    ("flag", "--time-limit -5 is not a number of seconds above 0; set it above 0, e.g. --time-limit 60."),
    ("key", "key 'time_limit' is -5, which is not a number of seconds above 0; set it above 0, e.g. "
            "time_limit = 60."),
    ("setting", "time_limit=-5 is not a number of seconds above 0; set it above 0, e.g. time_limit=60."),
])
def test_a_problem_names_the_setting_as_its_source_spells_it(style, sentence):
    assert TestSpec.make(time_limit=-5).problems(style) == [sentence]


def test_a_value_of_the_wrong_type_is_named_and_not_compared():
    problems = TestSpec.make(time_limit="5", brokers=True).problems()  # type: ignore[arg-type]
    assert problems == ["time_limit='5' must be a number; write e.g. time_limit=60.",
                        "brokers=True must be an integer; write e.g. brokers=3."]


def test_brokers_below_one_is_one_sentence_not_also_a_replication_one():
    assert TestSpec.make(brokers=0, replication_factor=1, min_isr=1).problems() == [
        "brokers=0 is not 1 or more; set it to 1 or more, e.g. brokers=3."]


def test_the_brokers_of_a_cluster_file_are_named_as_the_files(tmp_path):
    spec = TestSpec.make(cluster=str(tmp_path / "c.toml"), brokers=1)
    assert "<= the brokers of " + str(tmp_path / "c.toml") + " (1)" in spec.problems("flag")[-1]


def test_our_own_clusters_have_no_file_brokers():
    assert TestSpec.make(cluster="local").cluster_file_brokers() is None


def test_only_checks_the_settings_named():
    spec = TestSpec.make(time_limit=-5, partitions=0, workload="bank")
    assert spec.problems(only=("partitions",)) == ["partitions=0 is not 1 or more; set it to 1 or more, e.g. "
                                                   "partitions=4."]


NODE_FILE = """
[[nodes]]
name = "controller-0"
host = "10.0.0.10"
[[nodes]]
name = "broker-1"
host = "10.0.0.11"
[[nodes]]
name = "broker-2"
host = "10.0.0.12"
"""


@pytest.mark.parametrize("prefix", ["ssh:", ""])
def test_a_node_file_decides_how_many_brokers_there_are(tmp_path, prefix):
    (tmp_path / "nodes.toml").write_text(NODE_FILE)
    spec = TestSpec.make(cluster=prefix + str(tmp_path / "nodes.toml"), brokers=5)
    assert spec.cluster_file_brokers() == 2
    spec.brokers = spec.cluster_file_brokers()
    assert spec.problems("flag") == [f"need 1 <= --min-isr (2) <= --replication-factor (3) <= the brokers of "
                                     f"{tmp_path / 'nodes.toml'} (2); lower --min-isr or --replication-factor, "
                                     f"or add brokers."]


def test_the_brokers_own_settings_sit_in_one_broker_settings_and_keep_their_flat_names():
    from kafkaesque_harness.harness.spec import BROKER_SETTINGS, BrokerSettings, TestSpec

    spec = TestSpec.make(flush_policy="every-write", broker_variant="no-elr", acks="1")
    assert spec.broker == BrokerSettings(flush_policy="every-write", broker_variant="no-elr") and spec.acks == "1"
    stored = spec.to_dict()  # test.json keeps the flat names every reader of the store knows
    assert stored["flush_policy"] == "every-write" and stored["broker_variant"] == "no-elr" and "broker" not in stored
    assert TestSpec.from_dict(stored) == spec  # and a stored run reads back the same
    assert set(BROKER_SETTINGS) <= set(TestSpec.setting_names()) and "broker" not in TestSpec.setting_names()
    assert spec.with_settings(controllers=3).broker.controllers == 3 and spec.broker.controllers == 1
    with pytest.raises(TypeError, match="unknown setting"):
        TestSpec.make(flush="never")
