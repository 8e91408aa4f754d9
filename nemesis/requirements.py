"""What each fault needs of the nodes, checked against the capability table before the test starts.

The table comes from clusters/capabilities.py (probed at set-up, kept as
`cluster.capabilities`). A fault whose need a node lacks is refused by name, with the node
and the probed reason, before any fault or client op runs (CompositeNemesis.setup calls
`capability_refusal` for every part before setting any of them up), never in the middle.

Each fault's needs are declared by its kind (nemesis/kinds/); faults that declare none need
nothing the probe measures: the clock faults shift a process's clock
through the preload (their own setup refuses where it does not work), and drop-caches is
skipped and noted where /proc/sys is read-only. A scenario needs what its steps do (`STEP_FAULTS`):
it is refused as a whole when a node lacks it; the protocol nemesis leaves out the moves whose
steps a node cannot do, and says which.
"""

from __future__ import annotations

from clusters.capabilities import Capability
from nemesis.kinds import kind


def fault_needs(fault: str) -> tuple[tuple[str, ...], str]:
    """(capabilities the fault needs, on which nodes: "all" or "brokers"), as its kind declares them
    (nemesis/kinds/)."""
    k = kind(fault)
    return (k.capabilities, k.on) if k else ((), "all")


# A scenario step's action -> the fault whose needs it shares (bind, wait and sleep need nothing).
STEP_FAULTS = {"kill": "kill", "stop": "kill", "start": "kill", "pause": "pause", "resume": "pause",
               "lossy-crash": "lossy-crash", "isolate": "partition", "cut": "partition", "heal": "partition"}

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
