"""controller: faults of the metadata quorum's members, by role (nemesis/controller.py)."""

from kafkaesque_harness.nemesis.fault import FaultKind, lazy

KIND = FaultKind("controller", "kill, pause or isolate the active controller, or kill a minority or a majority of "
                               "the quorum; the stop undoes it", lazy("kafkaesque_harness.nemesis.controller:ControllerNemesis"), on="all")
