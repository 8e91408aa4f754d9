"""The disk fault: a stopped broker's segment gets a flipped bit or a cut tail; the broker finds the
damage itself at start-up (CRC and length checks), says so in its log, and recovers from the leader."""

import time

import pytest

from kafkaesque_harness.clusters.base import ClusterSpec
from kafkaesque_harness.clusters.local import LocalCluster
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.faults import DiskNemesis
from tests.integration.conftest import fill_partition, replica_view, set_up_nemesis

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_corrupt_segment_is_detected_at_start_up_and_repaired(tmp_path, mode):
    c = LocalCluster(ClusterSpec(brokers=3), str(tmp_path))
    c.up()
    try:
        c.create_topic("d", 1, 3, 2)
        fill_partition(c, "d", 300, prefix=b"v")
        nem = DiskNemesis({"disk_mode": mode, "seed": 4})
        faults = set_up_nemesis(nem, c)
        done = nem.invoke(c, Op(INVOKE, "start-disk", "nemesis", None))
        (node,) = done.value["disk"]
        assert done.value["mode"] == mode
        (rec,) = faults.ledger.records()  # the damage read back from the file, then healed by the restart
        assert rec.applied and rec.observed and rec.evidence["verified"] and rec.healed

        def repaired() -> bool:
            view = replica_view(c, node, "d")
            return bool(view) and view["leo"] == 300 and node in [c.node_name(r) for r in c.partitions("d")[0].isr]

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not repaired():
            time.sleep(0.3)
        assert repaired()
        log = open(c.log_path(node)).read()
        assert '"event": "log-recovery-truncated"' in log
        nem.teardown(c)
    finally:
        c.down()
