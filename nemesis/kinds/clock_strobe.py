"""clock-strobe: make the targets' wall clock flip between two values every few ms."""

from kafkaesque_harness.nemesis.fault import CLOCK_PRELOAD, FaultKind, Option, lazy

KIND = FaultKind(
    "clock-strobe", "make the targets' wall clock flip between now and now + clock_strobe_delta_s every "
                    "clock_strobe_period_ms; the stop resets it",
    lazy("kafkaesque_harness.nemesis.faults:ClockStrobeNemesis"),
    options=(Option("clock_strobe_delta_s", float, 60.0, "how far the clock flips, seconds", low=0),
             Option("clock_strobe_period_ms", float, 50.0, "how often it flips, ms", low=1)),
    abilities=(CLOCK_PRELOAD,), on="all")
