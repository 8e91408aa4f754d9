"""kill: SIGKILL the targets (kill -9, a crash); the stop restarts them."""

from kafkaesque_harness.nemesis.fault import FaultKind, lazy

KIND = FaultKind("kill", "SIGKILL the --nemesis-target brokers (a crash); the stop restarts them",
                 lazy("kafkaesque_harness.nemesis.process:KillNemesis"), capabilities=("sigstop",))
