"""client-partition: cut the harness's clients off from one broker; the stop reconnects them."""

from kafkaesque_harness.nemesis.fault import CLIENT_CUTS, OWN_NODES, FaultKind, lazy

KIND = FaultKind(
    "client-partition", "one random broker drops every packet from the workload's clients (it still reaches "
                        "the rest of the cluster); the stop reconnects them",
    lazy("kafkaesque_harness.nemesis.storage:ClientPartitionNemesis"),
    abilities=(CLIENT_CUTS, OWN_NODES), capabilities=("iptables",))
