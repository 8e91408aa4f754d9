"""storage-pause: SIGSTOP the object store (the nodes of role storage); the stop resumes it."""

from kafkaesque_harness.nemesis.fault import OBJECT_STORE, PAUSABLE, FaultKind, lazy

KIND = FaultKind("storage-pause", "SIGSTOP the object store every broker keeps its data in; the stop resumes it",
                 lazy("kafkaesque_harness.nemesis.storage:StoragePauseNemesis"), abilities=(OBJECT_STORE, PAUSABLE),
                 capabilities=("sigstop",), on="all")
