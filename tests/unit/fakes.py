"""Test doubles the nemesis unit tests share: a network that obeys the iptables commands our fault code
sends (so the probes that observe a cut see it, or see that it did not happen), and the run's fault
actions over a fresh ledger. The real network is exercised by the integration tests."""

from __future__ import annotations

import re
from collections import defaultdict

from clusters.remote import RemoteResult
from nemesis.actions import FaultActions
from nemesis.ledger import FaultLedger

_PROBE = re.compile(r" (\S+) (\d+) [\d.]+; else timeout")
_DROP = re.compile(r"-A KAFKAESQUE -s (\S+) -j DROP")


class FakeNetwork:
    """Each node's chain as the set of source addresses it drops, kept from the commands the fake remotes
    receive (flush, add, remove the chain); a TCP probe from A to B answers "timeout" when B drops A."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.drops: dict[str, set[str]] = defaultdict(set)
        self.broken: set[str] = set()  # nodes whose rules silently do nothing (a fault that does not take)

    def run(self, node: str, argv: list[str]) -> RemoteResult | None:
        """The answer to a network command on `node`, or None when the command is not about the network."""
        cmd = " ".join(argv)
        m = _PROBE.search(cmd)
        if m:
            dst = next(n for n in self.cluster.nodes() if self.cluster.address(n)[0] == m.group(1))
            cut = self.cluster.address(node)[0] in self.drops[dst]
            return RemoteResult(0, "timeout\n" if cut else "open\n", "")
        if "KAFKAESQUE" not in cmd:
            return None
        for part in cmd.split("&&"):
            if "-F KAFKAESQUE" in part or "-X KAFKAESQUE" in part:
                self.drops[node].clear()
            d = _DROP.search(part)
            if d and node not in self.broken:
                self.drops[node].update(d.group(1).split(","))
        return RemoteResult(0, "", "")

    def cut_between(self, a: str, b: str) -> bool:
        """Does either of the two drop the other's packets?"""
        return (self.cluster.address(a)[0] in self.drops[b]) or (self.cluster.address(b)[0] in self.drops[a])


def fault_actions(cluster, topic: str = "queue") -> FaultActions:
    """The shared fault actions over a fresh ledger, as the runner hands them to a nemesis at setup."""
    return FaultActions(cluster, FaultLedger(), topic)
