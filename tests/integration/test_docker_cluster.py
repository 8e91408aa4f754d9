"""The docker backend and its faults, measured from outside the broker (issue 6's must-show).

These tests need the Docker engine: on CI they fail, never skip, when it is missing.
"""

from __future__ import annotations

import json
import time

import pytest

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.base import ClusterSpec
from kafkaesque_harness.clusters.docker import LABEL, cleanup_docker, docker_client
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.faults import ClockNemesis, PartitionNemesis
from tests.integration.conftest import docker_cluster_up, fill_partition, replica_view, set_up_nemesis

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with docker_cluster_up(ClusterSpec(brokers=3), tmp_path_factory, "docker") as c:
        yield c


def tcp_ok(cluster, src: str, dst: str) -> bool:
    host, port = cluster.address(dst)
    r = cluster.remote(src).run(["python3", "-c", f"import socket;socket.create_connection(('{host}',{port}),timeout=1)"],
                                timeout=10)
    return r.ok


def test_partition_cuts_tcp_between_nodes_and_heal_restores_it(cluster):
    nem = PartitionNemesis({"target": "random-node", "seed": 3})
    faults = set_up_nemesis(nem, cluster)
    assert tcp_ok(cluster, "broker-1", "broker-2")
    done = nem.invoke(cluster, Op(INVOKE, "start-partition", "nemesis", None))
    (isolated,) = [n for n, drops in done.value["partition"].items() if len(drops) == 3]
    others = [n for n in cluster.nodes() if n != isolated]
    assert not tcp_ok(cluster, isolated, others[0])
    assert not tcp_ok(cluster, others[1], isolated)
    assert tcp_ok(cluster, others[0], others[1])
    (rec,) = faults.ledger.records()  # the ledger saw it too: its own probe across the cut timed out
    assert rec.observed and set(rec.evidence["probes"].values()) == {"timeout"}
    nem.invoke(cluster, Op(INVOKE, "stop-partition", "nemesis", None))
    assert tcp_ok(cluster, isolated, others[0]) and tcp_ok(cluster, others[1], isolated)
    assert rec.healed and "timeout" not in rec.heal_evidence["probes"].values()
    nem.teardown(cluster)
    assert faults.heal_everything() == []  # the run's final heal: our chain off every node
    for node in cluster.nodes():
        assert netrules.CHAIN not in cluster.remote(node).run(["iptables", "-S"]).out


def test_clock_offset_shows_in_date_and_in_the_brokers_own_time(cluster):
    nem = ClockNemesis({"seed": 1})
    faults = set_up_nemesis(nem, cluster)
    nem.set_offset(cluster, "broker-2", 3600)
    (rec,) = faults.ledger.records()  # observed: the broker's own clock, from its state dump
    assert rec.observed and abs(rec.evidence["clock_offset_s"][0] - 3600) < 1
    time.sleep(0.1)
    env = cluster.node_env("broker-2")
    shown = int(cluster.remote("broker-2").run(["env", f"LD_PRELOAD={env['LD_PRELOAD']}",
                                                f"KAFKAESQUE_CLOCK_FILE={env['KAFKAESQUE_CLOCK_FILE']}",
                                                "date", "+%s"]).out)
    assert abs(shown - time.time() - 3600) < 10
    broker_time = cluster.dump_state("broker-2", include_log=False)["time_ms"] / 1000
    assert abs(broker_time - time.time() - 3600) < 10
    assert abs(cluster.dump_state("broker-1", include_log=False)["time_ms"] / 1000 - time.time()) < 10
    nem.teardown(cluster)
    assert abs(cluster.dump_state("broker-2", include_log=False)["time_ms"] / 1000 - time.time()) < 10
    # the broker kept serving while skewed
    cluster.wait_ready(cluster.broker_nodes(), 10)


def test_clock_jump_and_strobe_show_in_the_brokers_own_time_and_are_reset(cluster):
    from kafkaesque_harness.nemesis.registry import make_nemesis

    def broker_offset_s(node: str) -> float:
        return cluster.dump_state(node, include_log=False)["time_ms"] / 1000 - time.time()

    nem = make_nemesis(["clock-jump", "clock-strobe"], {"seed": 5, "target": "random-node"})
    set_up_nemesis(nem, cluster)
    done = nem.invoke(cluster, Op(INVOKE, "start-clock-jump", "nemesis", None))
    ((node, jump),) = done.value["clock-jump-s"].items()
    time.sleep(0.1)  # past the preload's 10 ms re-read
    assert abs(broker_offset_s(node) - jump) < 10
    nem.invoke(cluster, Op(INVOKE, "stop-clock-jump", "nemesis", None))
    time.sleep(0.1)
    assert abs(broker_offset_s(node)) < 10
    done = nem.invoke(cluster, Op(INVOKE, "start-clock-strobe", "nemesis", None))
    (node,) = done.value["clock-strobe"]["nodes"]
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(round(broker_offset_s(node) / 60))  # 0 or 1: the real time, or 60 s ahead
    assert seen == {0, 1}
    assert nem.teardown(cluster) == []
    assert cluster.remote(node).run(["cat", cluster.clock_file(node)]).out == "0\n"
    cluster.wait_ready(cluster.broker_nodes(), 10)


def test_drop_caches_is_refused_by_name_in_containers(cluster):
    from kafkaesque_harness.nemesis.faults import DropCachesNemesis

    with pytest.raises(NemesisRefused, match="read-only in the containers"):  # it could never act there
        set_up_nemesis(DropCachesNemesis({}), cluster)
    assert not cluster.remote("broker-1").run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"]).ok


def test_lossy_crash_drops_unsynced_bytes_and_the_broker_recovers(cluster):
    cluster.create_topic("lossy", 1, 3, 2)
    fill_partition(cluster, "lossy", 200)
    node = cluster.node_name(cluster.partitions("lossy")[0].leader)
    from kafkaesque_harness.nemesis.actions import FaultActions
    from kafkaesque_harness.nemesis.ledger import FaultLedger

    rec = FaultActions(cluster, FaultLedger()).lossy_crash(node, by="test")
    report = rec.evidence["lossyfs"]
    assert rec.observed and rec.evidence["process"] == "down"
    assert report["event"] == "dropped" and report["bytes"] > 0  # flush policy "never": data was unsynced
    cluster.start(node)

    def caught_up() -> bool:
        view = replica_view(cluster, node, "lossy")
        return bool(view) and view["leo"] == 200 and view["role"] == "follower"

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not caught_up():
        time.sleep(0.3)
    assert caught_up()  # recovered, and fetched back from the new leader what power loss took
    log = cluster.remote(node).get(cluster.log_path(node)).decode()
    assert '"event": "registered"' in log.split('"event": "broker_started"')[-1]


def test_collect_and_cleanup_leave_nothing_behind(cluster, tmp_path):
    cluster.collect(str(tmp_path / "nodes"))
    for node in cluster.nodes():
        state = json.loads((tmp_path / "nodes" / node / "state.json").read_text())
        assert state.get("node_id") == cluster.node_id(node)
    assert (tmp_path / "nodes" / "broker-1" / "broker.log").stat().st_size > 0
    replicas = json.loads((tmp_path / "replicas.json").read_text())  # normalised beside nodes/
    assert {n: e["state"]["node_id"] for n, e in replicas["nodes"].items()} == \
        {n: cluster.node_id(n) for n in cluster.nodes()}
    owner = cluster.owner
    cluster.down()
    client = docker_client()
    assert not client.containers.list(all=True, filters={"label": f"{LABEL}={owner}"})
    assert not client.networks.list(filters={"label": f"{LABEL}={owner}"})
    assert cleanup_docker(owner) == []  # scoped: other clusters on this engine are left alone
