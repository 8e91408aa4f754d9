"""stop: a controlled shutdown (SIGTERM) of the targets, which moves their leaderships; the stop restarts them."""

from kafkaesque_harness.nemesis.fault import FaultKind, lazy

KIND = FaultKind("stop", "SIGTERM the --nemesis-target brokers (a controlled shutdown: their leaderships, a "
                         "coordinator's among them, move before they go); the stop restarts them",
                 lazy("kafkaesque_harness.nemesis.process:StopNemesis"), capabilities=("sigstop",))
