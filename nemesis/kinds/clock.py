"""clock: skew the wall clock of random nodes (the clock preload); the stop resets it."""

from kafkaesque_harness.nemesis.fault import CLOCK_PRELOAD, FaultKind, Option, lazy

KIND = FaultKind("clock", "skew the wall clock of random nodes by up to clock_max_skew_s either way; the stop "
                          "resets it", lazy("kafkaesque_harness.nemesis.faults:ClockNemesis"),
                 options=(Option("clock_max_skew_s", float, 300.0, "the largest skew, seconds", low=0),),
                 abilities=(CLOCK_PRELOAD,), on="all")
