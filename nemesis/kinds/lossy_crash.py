"""lossy-crash: a power cut of one broker (kill -9 and the loss of its unsynced bytes, 001 5)."""

from kafkaesque_harness.nemesis.fault import LOSSY_DISK, OWN_NODES, FaultKind, Option, lazy

KIND = FaultKind(
    "lossy-crash", "SIGKILL a broker and drop every byte it had not fsynced (a power cut), within min ISR - 1 "
                   "at once (a power-cut broker counts until it is back in every ISR); the stop restarts it",
    lazy("kafkaesque_harness.nemesis.faults:LossyCrashNemesis"),
    options=(Option("exceed_fault_budget", bool, False, "power-cut more brokers at once than min ISR - 1"),),
    abilities=(OWN_NODES, LOSSY_DISK), capabilities=("fuse", "sigstop"))
