"""Command lines of the reference broker's nodes: a broker variant reaches both roles (issue 4)."""

import pytest

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.broker.__main__ import build_parser
from kafkaesque_harness.clusters.reference import CONTROLLER, ReferenceCluster


class PathsOnly(ReferenceCluster):
    def address(self, node):
        return ("10.0.0.1", 9000 + self.node_id(node) % 1000)

    def listen(self, node):
        return "0.0.0.0:9000"

    def node_dir(self, node):
        return f"/n/{node}"


def parsed(cluster, node):
    argv = cluster.node_argv(node)
    return build_parser().parse_args(argv[argv.index("kafkaesque_harness.clusters.broker") + 1:])


@pytest.mark.parametrize("variant", ["truncate-to-hw", "no-elr", "unclean-election", "no-epoch-fencing",
                                     "txn-markers-no-epoch-bump", "read-committed-to-hwm", "offsets-commit-acks-1",
                                     "zombie-not-fenced"])
def test_a_variant_is_passed_to_the_controller_and_every_broker(tmp_path, variant):
    c = PathsOnly(ClusterSpec(brokers=3, broker_variant=variant), str(tmp_path))
    for node in c.nodes():
        assert parsed(c, node).variant == [variant]


def test_default_broker_has_no_variant_and_the_balanced_strategy(tmp_path):
    c = PathsOnly(ClusterSpec(brokers=3), str(tmp_path))
    assert all(parsed(c, n).variant == [] for n in c.nodes())
    assert parsed(c, CONTROLLER).unclean_recovery_strategy == "balanced"


def test_recovery_strategy_reaches_the_controller(tmp_path):
    c = PathsOnly(ClusterSpec(brokers=3, broker_config={"unclean_recovery_strategy": "manual"}), str(tmp_path))
    assert parsed(c, CONTROLLER).unclean_recovery_strategy == "manual"


def test_replica_fetch_size_and_hwm_checkpoint_interval_reach_the_brokers_only_when_set(tmp_path):
    c = PathsOnly(ClusterSpec(brokers=3, broker_config={"replica_fetch_max_bytes": 1024,
                                                        "hwm_checkpoint_interval_ms": 100}), str(tmp_path))
    args = parsed(c, "broker-1")
    assert (args.replica_fetch_max_bytes, args.hwm_checkpoint_interval_ms) == (1024, 100)
    plain = parsed(PathsOnly(ClusterSpec(brokers=3, broker_config={"replica_fetch_max_bytes": 0}), str(tmp_path)),
                   "broker-1")
    assert (plain.replica_fetch_max_bytes, plain.hwm_checkpoint_interval_ms) == (4 * 1024 * 1024, 1000)


def test_a_negative_fetch_size_or_one_for_a_foreign_cluster_is_one_sentence(tmp_path):
    from kafkaesque_harness.harness.spec import TestSpec

    assert TestSpec.make(replica_fetch_max_bytes=1024, cluster="local").problems() == []
    (bad,) = TestSpec.make(replica_fetch_max_bytes=-1, cluster="local").problems()
    assert "replica_fetch_max_bytes=-1 is below 0" in bad
    cluster_file = tmp_path / "c.toml"
    cluster_file.write_text('bootstrap = "10.0.0.1:9092"\n')
    problems = TestSpec.make(hwm_checkpoint_interval_ms=100, cluster=str(cluster_file)).problems(only={
        "hwm_checkpoint_interval_ms", "cluster"})
    assert any("needs our own broker" in p for p in problems)


def test_unknown_variant_is_one_sentence(tmp_path):
    with pytest.raises(ClusterError, match="unknown broker variant 'x'; valid: default, truncate-to-hw"):
        PathsOnly(ClusterSpec(brokers=3, broker_variant="x"), str(tmp_path))


def test_two_runs_started_in_the_same_second_by_two_processes_get_different_owners(tmp_path):
    """The owner names containers, networks and namespaces: a timestamp alone collides."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "20261122T200649"
    mine = PathsOnly(ClusterSpec(brokers=1), str(run_dir)).owner
    other = subprocess.run([sys.executable, "-c", "from kafkaesque_harness.clusters.base import ClusterSpec;"
                            "from tests.unit.test_reference_argv import PathsOnly;"
                            f"print(PathsOnly(ClusterSpec(brokers=1), {str(run_dir)!r}).owner)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert mine.startswith(run_dir.name) and other.startswith(run_dir.name) and mine != other
    assert str(os.getpid()) in mine


def test_three_controllers_form_a_quorum_the_brokers_know_all_of(tmp_path):
    c = PathsOnly(ClusterSpec(brokers=3, controllers=3), str(tmp_path))
    assert c.controller_nodes() == ["controller-0", "controller-1", "controller-2"]
    assert [c.node_name(c.node_id(n)) for n in c.nodes()] == c.nodes()
    quorum = "1000@10.0.0.1:9000,1001@10.0.0.1:9001,1002@10.0.0.1:9002"
    assert {parsed(c, n).quorum for n in c.controller_nodes()} == {quorum}
    assert parsed(c, "controller-2").node_id == 1002
    assert parsed(c, "broker-1").controller == "10.0.0.1:9000,10.0.0.1:9001,10.0.0.1:9002"


def test_one_controller_has_no_quorum_flag(tmp_path):
    c = PathsOnly(ClusterSpec(brokers=3), str(tmp_path))
    assert parsed(c, CONTROLLER).quorum is None
    assert parsed(c, "broker-1").controller == "10.0.0.1:9000"


def test_ports_asked_for_together_are_distinct_and_bindable():
    """CI once gave two brokers of one test cluster the same port: asked one at a time, the kernel may hand a
    just-closed port out again. free_ports keeps every socket bound until all are chosen."""
    import socket

    from kafkaesque_harness.clusters.ports import free_ports

    ports = free_ports(40)
    assert len(set(ports)) == 40
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # each is free again once chosen
