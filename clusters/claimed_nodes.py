"""What the two backends whose nodes are machines of their own reached by a Remote share about those nodes
(ssh.py: our broker over SSH; external.py: the nodes of a cluster file): a step taken on every node at once,
the claim of each node's dir for this run (clusters/ownership.py), and, at down(), the stop and release of
the nodes it claimed and of no other; and for `kafkaesque cleanup`, the healing of the nodes a run whose
harness died left marked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.netrules import CHAIN
from kafkaesque_harness.clusters.ownership import Leftover, claim_node_dir, pick, release_node_dir, root_qdisc
from kafkaesque_harness.clusters.remote import RemoteError


class ClaimedNodes:
    """Nodes a run holds one by one: a node's dir is this run's once claimed, and only then does the run
    stop, wipe or mark anything there. The cluster gives nodes(), remote(node), net_device(node),
    node_dir(node), `owner`, `_claimed` (a set, empty at start) and `dirs_named_in` (where the user names
    the dirs, for the sentence that refuses one)."""

    legacy_dirs_ok = False  # a dir laid out as the SSH backend left it before it wrote markers is ours too

    @contextmanager
    def _down_if_up_fails(self) -> Iterator[None]:
        """up()'s guard: whatever fails, the cluster is taken down before the error goes on (down touches only
        the nodes claimed so far), and a node that could not be reached is one ClusterError sentence."""
        try:
            yield
        except RemoteError as e:
            self.down()
            raise ClusterError(str(e)) from None
        except BaseException:
            self.down()
            raise

    def _each(self, fn: Callable[[str], Any], nodes: list[str] | None = None) -> list[Any]:
        """fn(node) on every node in parallel (remote round trips dominate set-up); the first error is raised."""
        nodes = self.nodes() if nodes is None else nodes
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            return [f.result() for f in [pool.submit(fn, n) for n in nodes]]

    def _claim(self, node: str) -> None:
        """The node's dir is this run's (clusters/ownership.py claim_node_dir); its marker also keeps the
        chain our faults use and the root qdisc the node had, what cleanup needs to undo a dead run's."""
        device = self.net_device(node)
        claim_node_dir(self.remote(node), node, self.node_dir(node), self.owner, self.dirs_named_in,
                       {"chain": CHAIN, "device": device, "qdisc_before": root_qdisc(self.remote(node), device)},
                       legacy_ok=self.legacy_dirs_ok)
        self._claimed.add(node)

    def _release_claimed(self, halt: Callable[[str], None]) -> None:
        """down()'s part on the nodes, all at once: halt(node) stops what runs there, and the node's dir is
        released. Only the nodes this run claimed: a dir it was refused is someone else's, and a pid file
        there names someone else's process. A dead or unreachable node is passed over: down never raises."""
        def release(node: str) -> None:
            try:
                halt(node)
                release_node_dir(self.remote(node), self.node_dir(node), self.owner)
            except Exception:  # noqa: BLE001 - down never raises for a dead or unreachable node
                pass

        claimed = [n for n in self.nodes() if n in self._claimed]
        if claimed:
            self._each(release, claimed)


# --- leftovers: the run's marker on this machine, which `kafkaesque cleanup` finds if its harness died -------
def heal_marked(marker: Path, kind: str, cluster_of: Callable[[dict[str, Any]], Any],
                unreadable: type[Exception]) -> list[str]:
    """Heal the nodes a run's marker names, through the cluster `cluster_of` makes again from the marker
    (its heal_leftovers); "KIND:node" for each node healed. The marker goes once they are healed, or at once,
    with a line saying so, when the cluster cannot be made again (`unreadable`): nothing can reach those
    nodes any more."""
    try:
        cluster = cluster_of(json.loads(marker.read_text()))
    except (OSError, ValueError, KeyError, unreadable) as e:
        marker.unlink(missing_ok=True)
        return [f"{kind} marker {marker.name} dropped ({type(e).__name__}: {e})"]
    out = [f"{kind}:{n}" for n in cluster.heal_leftovers()]
    marker.unlink(missing_ok=True)
    return out


def heal_runs(found: list[Leftover], owner: str = "") -> list[str]:
    """Heal the nodes of one run's cluster (`owner`), or, without an owner, of every one of the `found`
    clusters whose harness is gone; what each healing said (heal_marked)."""
    out: list[str] = []
    for item in pick(found, owner):
        out += item.remove()
    return out
