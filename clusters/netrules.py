"""The commands behind network faults: iptables rules for partitions and loss, tc for bandwidth.

Pure builders of argv lists, so the exact rules are unit-tested and the same commands run
through any Remote (a network namespace, `docker exec`, SSH). All our iptables rules live
in one chain of our own, jumped to from INPUT, so a heal flushes exactly what we added and
`kafkaesque cleanup` removes the chain without touching anybody else's rules.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

CHAIN = "KAFKAESQUE"
Argv = list[str]


def chain_setup() -> list[Argv]:
    """Create our chain and the INPUT jump; safe to run twice (see `ensure_chain_script`)."""
    return [["sh", "-c", ensure_chain_script()]]


def ensure_chain_script() -> str:
    return (
        f"iptables -w -N {CHAIN} 2>/dev/null; "
        f"iptables -w -C INPUT -j {CHAIN} 2>/dev/null || iptables -w -I INPUT 1 -j {CHAIN}"
    )


def drop_from(addresses: Iterable[str]) -> list[Argv]:
    """Drop every inbound packet from these addresses (one side of a partition).

    One iptables call with a comma list (iptables adds one rule per address): one process and
    one table commit instead of one per peer, which is most of a partition's latency after the
    exec itself.
    """
    peers = sorted(set(addresses))
    return [["iptables", "-w", "-A", CHAIN, "-s", ",".join(peers), "-j", "DROP"]] if peers else []


def random_loss_from(addresses: Iterable[str], probability: float) -> list[Argv]:
    """Drop inbound packets from these addresses at random (iptables' statistic match)."""
    if not 0.0 < probability <= 1.0:
        raise ValueError(f"loss probability {probability} must be in (0, 1]")
    return [
        ["iptables", "-w", "-A", CHAIN, "-s", a, "-m", "statistic", "--mode", "random",
         "--probability", f"{probability:.4f}", "-j", "DROP"]
        for a in sorted(set(addresses))
    ]


def heal() -> list[Argv]:
    """Remove every rule we added (the chain stays, empty)."""
    return [["sh", "-c", f"iptables -w -F {CHAIN} 2>/dev/null || true"]]


def remove_chain() -> list[Argv]:
    """Remove the jump and the chain: what cleanup runs on every node it can reach."""
    return [["sh", "-c",
             f"iptables -w -D INPUT -j {CHAIN} 2>/dev/null; iptables -w -F {CHAIN} 2>/dev/null; "
             f"iptables -w -X {CHAIN} 2>/dev/null; true"]]


def list_rules() -> Argv:
    return ["sh", "-c", f"iptables -w -S {CHAIN} 2>/dev/null || true"]


def bandwidth_limit(device: str, rate: str = "1mbit", burst: str = "32kbit", latency: str = "400ms") -> Argv:
    """Token bucket on the node's egress (tbf works on this kernel; netem does not)."""
    return ["tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate, "burst", burst,
            "latency", latency]


def clear_qdisc(device: str) -> Argv:
    return ["sh", "-c", f"tc qdisc del dev {shlex.quote(device)} root 2>/dev/null || true"]


def netem_probe(device: str) -> Argv:
    """Does this kernel have netem? Adds and removes a no-op netem qdisc; exit 0 means yes."""
    d = shlex.quote(device)
    return ["sh", "-c", f"tc qdisc add dev {d} root netem delay 0ms 2>&1 && tc qdisc del dev {d} root"]
