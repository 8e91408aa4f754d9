"""`kafkaesque sim --swarm`: each seed draws its own configuration (swarm testing, Groce et al. 2012; TigerBeetle's
VOPR), from the seed alone, so `kafkaesque sim --seed N --swarm` replays the same run.

What a seed draws (draw_swarm), from random.Random(f"{seed}/swarm"), a generator of its own (the cluster's,
network's, clients' and nemesis's draws are the same as without --swarm for the settings they get):
- the fault mix: a non-empty subset of SWARM_FAULTS, the schedule (sequential or overlapping mix; either way
  every drawn fault is started once before any repeats) and the mean interval between faults (at most a third
  of the time limit's share per fault, so each gets its turn);
- the cluster: brokers, controllers (1 or a quorum of 3), partitions, replication factor, min ISR;
- the broker's flush policy;
- the clients (queue workload): idempotent producers or not; assign or subscribe mode, and in subscribe mode
  deliberate client crashes or none;
- BUGGIFY points of the broker's shell (clusters/broker/hostenv.py BUGGIFY_POINTS): each switched on or not,
  with its chance of firing per pass.

Only settings whose promise the checkers know are drawn: acks=all and min ISR 2 or more, so that an acknowledged
write is on min ISR replicas before its acknowledgement and a loss is the broker's fault. acks=1 and min ISR 1
promise less (an acknowledged write on the leader alone may be lost when it dies), and the checkers hold such a
loss against the run as a lost-write as they do in real runs (README "Watching the harness catch a bug"), so a
seed drawing them would be called the broker's bug for what the setting allows: they are left out, as is the
lossy crash (a power cut: within the fault budget of min ISR - 1 brokers a correct broker loses nothing, but
the simulator's power cut is not yet reported to the trace rule log-shorter-after-restart, docs/SIMULATION-notes.md).
The consumer's reset policy is not drawn: the queue workload has no such option (its consumers read from the
start, or from the group's committed offsets).

The drawn settings go into the spec of the run (so test.json has them as a real run's), and test.json
"swarm" says what was drawn, BUGGIFY points included.
"""

from __future__ import annotations

import random
from typing import Any

from kafkaesque_harness.clusters.broker import BUGGIFY_POINTS
from kafkaesque_harness.harness.spec import TestSpec

SWARM_FAULTS = ("kill", "pause", "partition", "cut", "clock", "protocol")
SWARM_SCHEDULES = ("sequential", "mix")
SWARM_FLUSH_POLICIES = ("never", "every-write", "every-N-records:10", "every-ms:100")
INTERVAL_S = (1.0, 6.0)        # the mean virtual seconds between faults, drawn uniformly
BUGGIFY_CHANCES = (0.01, 0.05, 0.2)  # a point switched on fires on this share of its passes


def draw_swarm(seed: int, workload: str) -> dict[str, Any]:
    """The settings seed `seed` draws for a run of `workload` (module docstring); the same dict every call."""
    rng = random.Random(f"{seed}/swarm")
    faults = sorted(f for f in SWARM_FAULTS if rng.random() < 0.5) or [rng.choice(SWARM_FAULTS)]
    brokers = rng.randint(3, 5)
    replication_factor = rng.randint(2, min(brokers, 4))
    settings: dict[str, Any] = {
        "nemesis": faults,
        "nemesis_schedule": rng.choice(SWARM_SCHEDULES),
        "nemesis_interval": round(rng.uniform(*INTERVAL_S), 2),
        "brokers": brokers,
        "controllers": rng.choice((1, 1, 3)),
        "partitions": rng.randint(1, 4),
        "replication_factor": replication_factor,
        "min_isr": rng.randint(2, replication_factor),
        "acks": "all",
        "flush_policy": rng.choice(SWARM_FLUSH_POLICIES),
    }
    options: dict[str, Any] = {}
    if workload == "queue":
        options["idempotent"] = rng.random() < 0.5
        if rng.random() < 0.3:
            options["queue_mode"] = "subscribe"
            options["crash_clients_interval_s"] = rng.choice((0, 10))
    settings["workload_options"] = options
    settings["buggify"] = {p: rng.choice(BUGGIFY_CHANCES) for p in sorted(BUGGIFY_POINTS) if rng.random() < 0.5}
    return settings


def swarm_spec(spec: TestSpec) -> tuple[TestSpec, dict[str, Any]]:
    """The spec with the settings its seed draws (the workload's options on top of the spec's own), and the
    draw as test.json "swarm" records it."""
    drawn = draw_swarm(spec.seed, spec.workload)
    # every drawn fault must get its turn within the run (checkers/evidence.py: a planned fault never applied
    # leaves the run unknown): an interval at most a third of the time limit's share per fault
    fair_s = max(1.0, round(spec.time_limit / (3 * len(drawn["nemesis"])), 2))
    drawn["nemesis_interval"] = min(drawn["nemesis_interval"], fair_s)
    settings = {k: v for k, v in drawn.items() if k not in ("buggify", "workload_options")}
    options = {**spec.workload_options, **drawn["workload_options"]}
    return spec.with_settings(**settings, workload_options=options), drawn
