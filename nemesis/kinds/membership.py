"""membership: the cluster changes shape under load (decommission, reassignment, preferred election)."""

from kafkaesque_harness.nemesis.fault import CONTROLLER_ADMIN, FaultKind, lazy

KIND = FaultKind("membership", "decommission a broker, reassign a partition or move leaders to the preferred "
                               "replicas; the stop grows the cluster back",
                 lazy("kafkaesque_harness.nemesis.membership:MembershipNemesis"), abilities=(CONTROLLER_ADMIN,),
                 capabilities=("sigstop",))
