"""pause: SIGSTOP the targets (a GC pause, a frozen VM); the stop resumes them."""

from kafkaesque_harness.nemesis.fault import PAUSABLE, FaultKind, lazy

KIND = FaultKind("pause", "SIGSTOP the --nemesis-target brokers (a long GC pause); the stop resumes them",
                 lazy("kafkaesque_harness.nemesis.process:PauseNemesis"), abilities=(PAUSABLE,), capabilities=("sigstop",))
