"""`kafkaesque cleanup`: what runs left behind, and which of it may go (issue 20 item 1).

Every backend finds the things of its kind that carry a run id (clusters/ownership.py): node
processes, lossy mounts, namespaces, bridges and FORWARD rules on this host, containers and
networks on the Docker engine, and the markers of SSH and external clusters whose nodes may
still hold faults. A plan sorts them by their run: a run whose harness is provably gone is
dead and its things are removed (then its registration); a live run is skipped and named;
a thing whose run is not registered here (an older kafkaesque, another user, another host)
is left alone unless the user names that run with `--run`, which is refused while it lives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.ownership import Leftover, RunRecord, owner_tag, registered_runs, run_state


class RunIsLive(ClusterError):
    """--run names a run that is still live (or cannot be checked from here)."""


@dataclass
class CleanupPlan:
    remove: list[Leftover] = field(default_factory=list)                   # of dead runs, in removal order
    live: list[RunRecord] = field(default_factory=list)                    # skipped, every one named
    skipped_live: dict[str, list[Leftover]] = field(default_factory=dict)  # what each live run holds
    unverified: dict[str, list[Leftover]] = field(default_factory=dict)    # "run X" -> what nothing proves dead


def find_leftovers(owners: tuple[str, ...] = ()) -> list[Leftover]:
    """Everything of ours every backend finds, each with the run it belongs to where anything names it.
    `owners`: run ids to recognise by their tag too (namespaces and bridges carry only the tag)."""
    from kafkaesque_harness.clusters.code_copy import find_code_copies
    from kafkaesque_harness.clusters.docker import find_docker
    from kafkaesque_harness.clusters.external import find_external
    from kafkaesque_harness.clusters.local import find_processes
    from kafkaesque_harness.clusters.netns import find_network
    from kafkaesque_harness.clusters.ssh import find_ssh

    processes = find_processes()
    network = find_network((*owners, *(p.owner for p in processes)))
    return processes + network + find_docker() + find_ssh() + find_external() + find_code_copies()


def plan_cleanup(run: str = "", found: list[Leftover] | None = None) -> CleanupPlan:
    """What `kafkaesque cleanup` removes: the leftovers of `run` alone (refused while it is live), or of
    every dead run. `found` replaces the search (tests)."""
    records = registered_runs()
    by_owner = {r.owner: r for r in records}
    if run:
        state = run_state(run, records)
        if state == "live":
            raise RunIsLive(f"Run {run} is live ({by_owner[run].details()}), so nothing of it is a leftover; wait "
                            "for it to end or stop its harness, then clean up.")
        if state == "elsewhere":
            raise RunIsLive(f"Run {run} was registered on {by_owner[run].harness.host}, where its harness may still "
                            f"run; run `kafkaesque cleanup --run {run}` on that machine.")
    items = find_leftovers((run,) if run else ()) if found is None else found
    plan = CleanupPlan(live=[r for r in records if r.state() == "live"])
    for item in items:
        owner = item.owner or ""
        if run:
            if owner == run or (not owner and item.tag == owner_tag(run)):
                plan.remove.append(item)
            continue
        state = run_state(owner, records) if owner else "unregistered"
        if state == "dead":
            plan.remove.append(item)
        elif state == "live":
            plan.skipped_live.setdefault(owner, []).append(item)
        else:
            key = f"run {owner}" if owner else f"the run tagged {item.tag}" if item.tag else "no run named"
            plan.unverified.setdefault(key, []).append(item)
    dead = {i.owner for i in plan.remove} | ({run} if run else {r.owner for r in records if r.state() == "dead"})
    for owner in sorted(dead):
        record = by_owner.get(owner)
        if record is not None and record.path is not None:
            plan.remove.append(Leftover(owner, f"registration of run {owner}", record.path.unlink, rank=99))
    plan.remove.sort(key=lambda i: i.rank)
    return plan


def carry_out(plan: CleanupPlan, say: Callable[[str], None]) -> tuple[int, int]:
    """Remove the plan's leftovers in order, saying each; a run's registration goes only when all of its
    other leftovers did. Returns (removed, failed)."""
    removed = failed = 0
    failed_owners: set[str] = set()
    for item in plan.remove:
        if item.rank == 99 and item.owner in failed_owners:
            say(f"kept registration of run {item.owner}: some of its leftovers are still there")
            continue
        try:
            result = item.remove()
        except Exception as e:  # noqa: BLE001 - one stuck leftover must not keep the others
            failed += 1
            failed_owners.add(item.owner)
            say(f"could not remove {item.what} ({type(e).__name__}: {e})")
            continue
        removed += 1
        reached = f": {', '.join(result)}" if isinstance(result, list) and result else ""
        say(f"removed {item.what}{reached}")
    return removed, failed
