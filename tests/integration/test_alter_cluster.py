"""`python -m kafkaesque_harness.clusters.broker alter-cluster` on a real local cluster (003, "Take brokers offline" and
"Incrementally add brokers online"): under acks=all load, broker 4 is decommissioned (its replicas
move to the others), stopped, unregistered and wiped; it comes back empty and `add` gives it its
share again. Every acknowledged record survives, and the load ends even."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.integration.test_broker import consume_all
from tests.integration.test_reassignment import TOPIC, BackgroundProducer

pytestmark = pytest.mark.integration


def alter_cluster(controller: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaesque_harness.clusters.broker", "alter-cluster", *args, "--controller", controller,
                           "--wait", "90"], capture_output=True, text=True, timeout=150)


def replica_load(state: dict) -> dict[int, int]:
    load = {b["broker_id"]: 0 for b in state["brokers"]}
    for p in state["partitions"]:
        for r in p["replicas"]:
            load[r] = load.get(r, 0) + 1
    return load


def test_decommission_and_re_add_a_broker_under_load(cluster_factory):
    cluster = cluster_factory(brokers=4)
    controller = f"127.0.0.1:{cluster.controller_port}"
    cluster.create_topic(TOPIC, partitions=4, rf=3, min_isr=2)
    prod = BackgroundProducer(cluster.bootstrap)
    prod.thread.start()
    cluster.wait_for(lambda: prod.acked_count() > 300, what="the producer to get going")

    out = alter_cluster(controller, "remove", "--brokers", "4")
    assert out.returncode == 0, out.stderr + cluster.logs()
    state = cluster.controller_state()
    assert all(4 not in p["replicas"] for p in state["partitions"]), state["partitions"]
    assert sorted(replica_load(state).items()) == [(1, 4), (2, 4), (3, 4), (4, 0)]
    # Still registered and running: unregistering is refused until it is stopped.
    refused = alter_cluster(controller, "unregister", "--brokers", "4")
    assert refused.returncode != 0 and "error:" in refused.stderr

    assert cluster.stop(4) == 0
    out = alter_cluster(controller, "unregister", "--brokers", "4")
    assert out.returncode == 0, out.stderr
    assert 4 not in {b["broker_id"] for b in cluster.controller_state()["brokers"]}
    shutil.rmtree(cluster.root / "broker-4")  # a replaced machine: nothing of the old broker is left
    before = prod.acked_count()
    cluster.wait_for(lambda: prod.acked_count() > before + 200, what="acknowledgements on three brokers")

    # Adding a broker that is not running is refused in one sentence.
    refused = alter_cluster(controller, "add", "--brokers", "4")
    assert refused.returncode == 1 and "start it first" in refused.stderr

    cluster.restart(4)
    cluster.wait_unfenced([4])
    out = alter_cluster(controller, "add", "--brokers", "4")
    assert out.returncode == 0, out.stderr + cluster.logs()
    state = cluster.controller_state()
    assert sorted(replica_load(state).values()) == [3, 3, 3, 3], state["partitions"]
    for p in state["partitions"]:
        assert not p["adding"] and not p["removing"] and sorted(p["isr"]) == sorted(p["replicas"]), p
        assert p["leader"] == p["replicas"][0], p  # preferred leaders after the rebalance
    before = prod.acked_count()
    cluster.wait_for(lambda: prod.acked_count() > before + 200, what="acknowledgements after the re-add")

    acked = prod.finish()
    assert prod.failed == 0 and len(acked) > 700
    got = consume_all(cluster.bootstrap, TOPIC, 0, max(acked) + 1, timeout=60)
    values = {int(v) for _, v in got}
    missing = [i for i in acked if i not in values]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
