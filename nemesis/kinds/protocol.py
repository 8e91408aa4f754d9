"""protocol: role-aware random moves and the flaw sequences, timed against the cluster's state."""

from kafkaesque_harness.nemesis.fault import FaultKind, Option, lazy

KIND = FaultKind("protocol", "random role-aware moves (kill the leader, power-cut the last ISR member, ...) and "
                             "the flaw sequences of the scenarios; times its own faults", lazy("kafkaesque_harness.nemesis.protocol:ProtocolNemesis"),
                 self_driven=True,
                 options=(Option("protocol_moves", str, "all", "all, or coordinator: only the moves and sequences "
                                 "aimed at the workload's transaction or group coordinator (and heal)",
                                 choices=("all", "coordinator")),))
