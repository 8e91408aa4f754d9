"""net: degrade a broker's network (tbf bandwidth limit, random loss); the stop restores it."""

from kafkaesque_harness.nemesis.fault import OWN_NODES, FaultKind, Option, lazy

KIND = FaultKind(
    "net", "limit a random broker's bandwidth (tbf) and drop a share of what it receives; the stop restores it",
    lazy("kafkaesque_harness.nemesis.faults:NetNemesis"),
    options=(Option("net_rate", str, "1mbit", "the bandwidth limit, in tc's units"),
             Option("net_loss", float, 0.2, "the share of packets dropped", low=0, high=1),
             Option("net_netem", bool, False, "refuse the run when netem (delay, reordering) is missing")),
    abilities=(OWN_NODES,), capabilities=("iptables", "tc"))
