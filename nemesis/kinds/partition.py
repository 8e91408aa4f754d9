"""partition: iptables DROP rules in one of nemesis/grudge.py's shapes; the stop removes them."""

from kafkaesque_harness.nemesis.fault import OWN_NODES, FaultKind, Option, lazy

KIND = FaultKind(
    "partition", "cut the network in a shape (a node, halves, a ring, a bridge, the leader, the controller, "
                 "one way); the stop reconnects it",
    lazy("kafkaesque_harness.nemesis.faults:PartitionNemesis"),
    options=(Option("partition_target", str, "", "the shape, when it differs from --nemesis-target"),),
    abilities=(OWN_NODES,), capabilities=("iptables",), on="all")
