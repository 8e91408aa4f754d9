"""storage-slow: a tbf bandwidth limit on the object store's egress; the stop removes it."""

from kafkaesque_harness.nemesis.fault import OBJECT_STORE, OWN_NODES, FaultKind, Option, lazy

KIND = FaultKind(
    "storage-slow", "hold the object store's answers to a bandwidth limit (tbf on its egress); the stop removes it",
    lazy("kafkaesque_harness.nemesis.storage:StorageSlowNemesis"),
    options=(Option("storage_rate", str, "256kbit", "the store's bandwidth limit, in tc's units"),),
    abilities=(OBJECT_STORE, OWN_NODES), capabilities=("tc",), on="all")
