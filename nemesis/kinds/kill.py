"""kill: SIGKILL the targets (kill -9, a crash); the stop restarts them."""

from nemesis.fault import FaultKind, lazy

KIND = FaultKind("kill", "SIGKILL the --nemesis-target brokers (a crash); the stop restarts them",
                 lazy("nemesis.process:KillNemesis"), capabilities=("sigstop",))
