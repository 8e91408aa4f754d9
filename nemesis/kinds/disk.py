"""disk: corrupt a stopped broker's segment (a flipped bit or a cut tail), then restart it."""

from kafkaesque_harness.nemesis.fault import DATA_DIRS, FaultKind, Option, lazy

KIND = FaultKind(
    "disk", "stop a broker, flip a bit in or cut the tail of its largest segment, and restart it: it must find "
            "the damage at start-up",
    lazy("kafkaesque_harness.nemesis.faults:DiskNemesis"),
    options=(Option("disk_mode", str, "random", "what to do to the segment", choices=("random", "flip", "truncate")),),
    abilities=(DATA_DIRS,), capabilities=("sigstop",))
