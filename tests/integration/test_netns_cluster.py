"""The local backend as root: a network namespace per node (issue 6 item 5), its faults measured
from outside the broker, as for the docker backend. CI runs as root: these fail, never skip,
when namespaces cannot be made."""

from __future__ import annotations

import random
import subprocess

import pytest

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.base import ClusterSpec
from kafkaesque_harness.clusters.netns import NetnsCluster, cleanup_netns, netns_available
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.faults import LossyCrashNemesis, PartitionNemesis
from tests.integration.conftest import set_up_nemesis
from tests.integration.test_docker_cluster import tcp_ok
from tests.integration.test_docker_cluster import (
    test_lossy_crash_drops_unsynced_bytes_and_the_broker_recovers as lossy_crash_recovers,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not netns_available():
        pytest.fail("the namespace backend needs root, iproute2 and iptables (make setup installs them)")
    c = NetnsCluster(ClusterSpec(brokers=3), str(tmp_path_factory.mktemp("netns")),
                     owner=f"test{random.randrange(10**6)}")
    c.up()
    try:
        yield c
    finally:
        c.down()


def test_every_node_has_its_own_namespace_and_address(cluster):
    addrs = {n: cluster.address(n)[0] for n in cluster.nodes()}
    assert len(set(addrs.values())) == len(addrs)
    for node, addr in addrs.items():
        shown = cluster.remote(node).run(["ip", "-o", "-4", "addr", "show"]).out
        assert addr in shown and all(a not in shown for n, a in addrs.items() if n != node)


def test_partition_cuts_tcp_between_namespaces_and_heal_restores_it(cluster):
    nem = PartitionNemesis({"target": "random-node", "seed": 5})
    faults = set_up_nemesis(nem, cluster)
    done = nem.invoke(cluster, Op(INVOKE, "start-partition", "nemesis", None))
    (isolated,) = [n for n, drops in done.value["partition"].items() if len(drops) == 3]
    others = [n for n in cluster.nodes() if n != isolated]
    assert not tcp_ok(cluster, isolated, others[0]) and not tcp_ok(cluster, others[1], isolated)
    assert tcp_ok(cluster, others[0], others[1])
    nem.invoke(cluster, Op(INVOKE, "stop-partition", "nemesis", None))
    assert tcp_ok(cluster, isolated, others[0]) and tcp_ok(cluster, others[1], isolated)
    (rec,) = faults.ledger.records()  # the ledger's own probes saw the cut, and saw it healed
    assert rec.observed and rec.healed
    nem.teardown(cluster)
    assert faults.heal_everything() == []
    for node in cluster.nodes():
        assert netrules.CHAIN not in cluster.remote(node).run(["iptables", "-S"]).out
    # the rules lived in the nodes' namespaces: the host's own tables never had our chain
    assert netrules.CHAIN not in subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout


def test_a_broker_cut_off_from_the_harness_alone_still_hears_its_peers_and_the_heal_reconnects(cluster):
    """client-partition (and the cut-clients step, through the same FaultActions.cut_clients): the broker's
    rules drop the bridge address the harness's connects come from, and nothing else."""
    from kafkaesque_harness.nemesis.observe import probe_from_harness
    from kafkaesque_harness.nemesis.storage import ClientPartitionNemesis

    cluster.wait_ready(cluster.broker_nodes(), 30)  # the isolated broker of the partition test is back
    nem = ClientPartitionNemesis({"seed": 4})
    faults = set_up_nemesis(nem, cluster)
    done = nem.invoke(cluster, Op(INVOKE, "start-client-partition", "nemesis", None))
    (node,) = done.value["client-partition"]
    assert done.value["clients"] == f"{cluster.subnet}.1"
    assert probe_from_harness(cluster, node) == "timeout"
    assert all(probe_from_harness(cluster, b) == "open" for b in cluster.broker_nodes() if b != node)
    peer = next(n for n in cluster.nodes() if n != node)
    assert tcp_ok(cluster, node, peer) and tcp_ok(cluster, peer, node)
    nem.invoke(cluster, Op(INVOKE, "stop-client-partition", "nemesis", None))
    assert probe_from_harness(cluster, node) == "open"
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.observed, rec.healed) == ("client-partition", True, True)
    assert rec.evidence["probes"] == {f"clients->{node}": "timeout"}
    nem.teardown(cluster)
    assert faults.heal_everything() == []


def test_net_fault_shapes_the_nodes_own_veth_and_the_probe_sees_tc_there(cluster):
    from kafkaesque_harness.clusters.capabilities import probe_node
    from kafkaesque_harness.nemesis.faults import NetNemesis

    assert probe_node(cluster, "broker-1")["tc"].ok  # tc on the node's own device, not the host's eth0
    nem = NetNemesis({"seed": 2})
    faults = set_up_nemesis(nem, cluster)
    done = nem.invoke(cluster, Op(INVOKE, "start-net", "nemesis", None))
    (node,) = done.value["net"]
    shown = cluster.remote(node).run(["tc", "qdisc", "show", "dev", cluster.net_device(node)]).out
    assert "tbf" in shown and "statistic" in cluster.remote(node).run(["iptables", "-S"]).out
    nem.invoke(cluster, Op(INVOKE, "stop-net", "nemesis", None))
    assert "tbf" not in cluster.remote(node).run(["tc", "qdisc", "show", "dev", cluster.net_device(node)]).out
    (rec,) = faults.ledger.records()  # read back from the node: the qdisc and the loss rules, then neither
    assert rec.observed and "tbf" in rec.evidence["qdisc"] and rec.healed and rec.heal_evidence["loss_rules"] == 0
    nem.teardown(cluster)
    assert faults.heal_everything() == []


def test_lossy_crash_in_a_namespace_drops_unsynced_bytes_and_the_broker_recovers(cluster):
    cluster.wait_ready(cluster.broker_nodes(), 30)  # the isolated broker of the partition test is back
    lossy_crash_recovers(cluster)


def test_down_and_cleanup_leave_no_namespace_bridge_rule_or_mount(cluster):
    set_up_nemesis(LossyCrashNemesis({"min_isr": 2}), cluster)  # accepted: isolated nodes, a lossy file system
    tag = cluster.tag
    cluster.down()
    assert tag not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"kqbr{tag}" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert f"kqbr{tag}" not in subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    with open("/proc/mounts") as f:
        assert cluster.run_dir.as_posix() not in f.read()
    assert cleanup_netns(tag) == []  # scoped to this run: other runs on the machine keep their networks
