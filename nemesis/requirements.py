"""What a fault needs, asked in one place: of the cluster (its abilities) and of the nodes (their capabilities).

Abilities (clusters/base.py) are what a backend declares it can do: pause a node, cut its
network off, shift its clock, power-cut its disk... `can(subject, Ability)` and
`why_not(subject, Ability)` are the only questions anyone asks a cluster or a nemesis about
what it can do: the subject declares the ability by implementing its protocol, and where the
answer depends on the run (a preload that did not build, nodes that share a host) the
ability's own `*_unavailable()` method says why not. Nothing outside this module looks for
attributes (`hasattr`, `getattr` with a default) on a cluster or a nemesis, nor checks an
ability with `isinstance` (tests/unit/test_abilities.py greps for it).

Capabilities are what each node allows, probed at set-up by clusters/capabilities.py and kept
as `cluster.capabilities`. A fault whose need a node lacks is refused by name, with the node
and the probed reason, before any fault or client op runs (CompositeNemesis.setup calls each
part's `capability_refusal` before setting any of them up), never in the middle.

Each fault's needs are declared by its kind (nemesis/kinds/): the abilities it needs of the
cluster (`ability_refusal`, asked for every part before any is set up, and again by each
nemesis's own setup) and the capabilities it needs of the nodes (`capability_refusal`). A scenario needs what its steps do (`STEP_FAULTS`):
it is refused as a whole when a node lacks it; the protocol nemesis leaves out the moves whose
steps a node cannot do, and says which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafkaesque_harness.clusters.base import (
    ClientCuts,
    ClockControl,
    ControllerAdmin,
    HasRemotes,
    IsolatedNodes,
    LossyControllers,
    LossyDisk,
    NetDevice,
    ObjectStore,
    PageCacheDrop,
    Pausable,
    SegmentFiles,
    SharedIds,
    SpreadClients,
    StateDumps,
)
from kafkaesque_harness.clusters.capabilities import Capability
from kafkaesque_harness.nemesis.kinds import kind


def ability_refusal(fault: str, cluster) -> str | None:
    """One sentence refusing `fault` for an ability the cluster lacks, as its kind declares them
    (nemesis/kinds/, nemesis/fault.py's Need), or None."""
    k = kind(fault)
    for need in k.abilities if k else ():
        why = why_not(cluster, need.ability)
        if why:
            return f"the {fault} fault {need.why}: {why}; drop {fault} from --nemesis"
    return None


ROLE_TARGETS = ("isr-member", "last-isr-member")  # targets picked by the replica ids of ISRs (nemesis/targets.py)


def target_refusal(fault: str, target: str, cluster) -> str | None:
    """One sentence saying that `target` does not apply where the cluster's node ids name no single replica
    (SharedIds), at set-up instead of a fault that waits for an ISR member it cannot tell apart; or None."""
    why = cluster.shared_ids_reason() if target in ROLE_TARGETS and isinstance(cluster, SharedIds) else None
    if why:
        return (f"--nemesis-target {target} is not applicable to the {fault} fault here: {why}, so an ISR's ids "
                "name no single node; pick random-node, leader, minority, majority or all")
    return None


def fault_needs(fault: str) -> tuple[tuple[str, ...], str]:
    """(capabilities the fault needs, on which nodes: "all" or "brokers"), as its kind declares them
    (nemesis/kinds/)."""
    k = kind(fault)
    return (k.capabilities, k.on) if k else ((), "all")

__all__ = ["ClientCuts", "ClockControl", "ControllerAdmin", "HasRemotes", "IsolatedNodes", "LossyControllers", "LossyDisk",
           "NetDevice", "ObjectStore", "PageCacheDrop", "Pausable", "SegmentFiles", "SpreadClients", "StateDumps", "ability_refusal", "can", "capability_refusal", "steps_refusal",
           "why_not"]


# --- abilities ----------------------------------------------------------------------------------------
# Why not, for a subject that does not declare the ability at all (one clause; {name} is its name).
_UNDECLARED: dict[type, str] = {
    Pausable: "the {name} cluster cannot pause processes",
    HasRemotes: "the {name} cluster gives no way to run commands on its nodes",
    NetDevice: "the {name} cluster does not say which network device its nodes use",
    IsolatedNodes: "the {name} cluster does not say its nodes have their own network, disk and clock",
    ClockControl: "{name} nodes are not",
    # Not "started without it": no setting of an undeclaring cluster gives it (a foreign broker's storage, say).
    LossyDisk: "the {name} cluster's brokers do not write through the harness's lossy file system, which only "
               "the docker, netns and SSH clusters of our own broker mount",
    LossyControllers: "the {name} cluster's controllers do not write through the harness's lossy file system, "
                      "which only the netns cluster mounts for them",
    SegmentFiles: "{name} does not say where",
    ControllerAdmin: "the {name} cluster does not have one",
    StateDumps: "the {name} cluster gives no state dumps",
    PageCacheDrop: "the {name} cluster does not say whether its nodes may write /proc/sys/vm/drop_caches",
    ClientCuts: "the {name} cluster does not say from which address the harness's clients reach its nodes",
    ObjectStore: "the {name} cluster has no object store of its own (no node of role storage)",
}
# Why not, for a subject that declares the ability: its own answer of the moment (None: it can).
_ANSWER: dict[type, Callable[[Any], str | None]] = {
    IsolatedNodes: lambda c: c.isolation_unavailable(),
    ClockControl: lambda c: c.clock_unavailable(),
    LossyDisk: lambda c: c.lossy_unavailable(),
    LossyControllers: lambda c: c.lossy_controllers_unavailable(),
    StateDumps: lambda c: c.state_dumps_unavailable(),
    PageCacheDrop: lambda c: c.page_cache_unavailable(),
    ClientCuts: lambda c: c.client_cut_unavailable(),
    # A cluster file without a storage node declares the ability but has no store to fault.
    ObjectStore: lambda c: None if c.storage_nodes() else "the cluster file names no node of role storage",
}


def why_not(subject: Any, ability: type) -> str | None:
    """None when `subject` (a cluster, or a nemesis for nemesis/base.py's SelfDriven) can do what `ability`
    names right now; else why not, one clause: the subject's own answer, or that it does not declare the
    ability at all."""
    if not isinstance(subject, ability):
        return _UNDECLARED.get(ability, "{name} does not declare " + ability.__name__).format(name=subject.name)
    answer = _ANSWER.get(ability)
    return answer(subject) if answer else None


def can(subject: Any, ability: type) -> bool:
    """Whether `subject` can do what `ability` names right now (why_not says why not)."""
    return why_not(subject, ability) is None

# A scenario step's action -> the fault whose needs it shares (bind, wait and sleep need nothing).
STEP_FAULTS = {"kill": "kill", "stop": "kill", "start": "kill", "pause": "pause", "resume": "pause",
               "lossy-crash": "lossy-crash", "isolate": "partition", "cut": "partition", "heal": "partition",
               "cut-clients": "partition"}

FIXES = {
    "iptables": "install iptables there and run the node's commands as root (sudo = true, or NET_ADMIN for a container)",
    "tc": "install iproute2 there and run the node's commands as root (sudo = true, or NET_ADMIN for a container)",
    "fuse": "give the node /dev/fuse and fusermount3 (a container needs the device and SYS_ADMIN)",
    "sigstop": "log in as the user that runs the node's process, or set sudo = true",
    "netem": "load the sch_netem kernel module",
    "cap_sys_time": "grant CAP_SYS_TIME",
}


def steps_refusal(what: str, steps, cluster, capabilities: dict[str, dict[str, Capability]]) -> str | None:
    """One sentence refusing a scenario or protocol move (`what`) whose steps need what a node lacks."""
    for fault in dict.fromkeys(STEP_FAULTS[s.do] for s in steps if s.do in STEP_FAULTS):
        why = capability_refusal(fault, cluster, capabilities, target="controller" if fault == "partition" else "")
        if why:
            return why.replace(f"the {fault} fault cannot run", f"{what} cannot run ({fault} steps)").replace(
                f"or drop {fault} from --nemesis", "or run another plan")
    return None


def capability_refusal(fault: str, cluster, capabilities: dict[str, dict[str, Capability]],
                       target: str = "") -> str | None:
    """One sentence refusing `fault` because a node lacks what it needs, or None when every node has it."""
    needs, where = fault_needs(fault)
    if not needs:
        return None
    nodes = cluster.nodes() if where == "all" or target == "controller" else cluster.broker_nodes()
    for node in nodes:
        for cap in needs:
            have = capabilities.get(node, {}).get(cap) or Capability(False, "not probed")
            if not have.ok:
                return (f"the {fault} fault cannot run on {node}: it needs {cap}, which the set-up probe found "
                        f"unavailable there ({have.detail or 'no reason given'}); {FIXES[cap]}, or drop {fault} "
                        "from --nemesis")
    return None
