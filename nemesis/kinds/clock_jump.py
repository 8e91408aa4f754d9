"""clock-jump: step the targets' wall clock forward or back in one go; the stop steps it back."""

from kafkaesque_harness.nemesis.fault import CLOCK_PRELOAD, FaultKind, Option, lazy

KIND = FaultKind("clock-jump", "step the targets' wall clock clock_jump_s forward or back; the stop steps it back",
                 lazy("kafkaesque_harness.nemesis.faults:ClockJumpNemesis"),
                 options=(Option("clock_jump_s", float, 3600.0, "the size of the step, seconds", low=0),),
                 abilities=(CLOCK_PRELOAD,), on="all")
