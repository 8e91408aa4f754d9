"""storage-kill: SIGKILL the object store, restart it at the stop; refused for a store without persistence."""

from kafkaesque_harness.nemesis.fault import OBJECT_STORE, FaultKind, lazy

KIND = FaultKind("storage-kill", "SIGKILL the object store and start it again at the stop (refused where it keeps "
                                 "its objects only in memory)",
                 lazy("kafkaesque_harness.nemesis.storage:StorageKillNemesis"), abilities=(OBJECT_STORE,),
                 capabilities=("sigstop",), on="all")
