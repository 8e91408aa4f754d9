"""storage-partition: cut one broker or every broker off from the object store; the stop reconnects them."""

from kafkaesque_harness.nemesis.fault import OBJECT_STORE, OWN_NODES, FaultKind, Option, lazy
from kafkaesque_harness.nemesis.grudge import STORAGE_PARTITION_TARGETS

KIND = FaultKind(
    "storage-partition", "cut one broker, or every broker, off from the object store (both ways); the stop "
                         "reconnects them",
    lazy("kafkaesque_harness.nemesis.storage:StoragePartitionNemesis"),
    options=(Option("storage_partition_target", str, "mixed", "whom the cut separates from the store",
                    choices=STORAGE_PARTITION_TARGETS),),
    abilities=(OBJECT_STORE, OWN_NODES), capabilities=("iptables",), on="all")
