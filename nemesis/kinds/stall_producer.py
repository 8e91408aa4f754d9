"""stall-producer: one of the workload's client processes stops inside an open transaction past its
transaction timeout, as a GC pause would stop it (a fault on the harness's own clients: workloads/stalls.py)."""

from kafkaesque_harness.nemesis.fault import FaultKind, Option, lazy

KIND = FaultKind(
    "stall-producer", "a txn client process stops mid-transaction (a send delivered, one to a new partition to come) past its "
                      "transaction timeout, then goes on with it; the stop records whether it was fenced (needs "
                      "--workload txn)",
    lazy("kafkaesque_harness.nemesis.process:StallProducerNemesis"),
    options=(Option("stall_past_timeout_s", float, 3.0, "how long past the transaction timeout the stall lasts, "
                                                         "seconds", low=0),))
