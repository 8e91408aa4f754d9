"""Reached states: which of the protocol's states a run actually went through (Antithesis's
"sometimes" assertions: a test must show it reached what it meant to test).

A run under kill and partition that never saw a leader change proved little about leader
changes. Two sources, each placed on the run's timeline (seconds since the main phase began):

- the cluster's own metadata, polled every 2 s by the runner on any Kafka-protocol cluster
  (metadata.jsonl: each partition's leader and ISR whenever they change);
- the brokers' and controllers' state logs where the cluster is ours (protocol-events.jsonl,
  normalised from the node logs by clusters/protocol_events.py): exact, and they show what
  metadata cannot (ELR elections, unclean recoveries, fencing, truncations, fail-overs).

A state the logs cover is counted from the logs only; the metadata fills in the rest. The
result is results.json "reached": state -> {count, first_s, times_s, source}; the report
marks the times on its timeline, and a campaign may `require` states (harness/campaign.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATES: dict[str, str] = {
    "leader-change": "a partition's leader changed (a new leader, or none)",
    "no-leader": "a partition had no leader",
    "isr-shrunk-to-one": "a partition's ISR shrank to a single replica",
    "elr-election": "a leader was elected from the ELR: a replica out of the ISR but still complete (001 5.2)",
    "unclean-recovery": "the controller recovered a leaderless partition from an unclean replica (001 5.3)",
    "broker-fenced": "the controller fenced a broker (missed heartbeats, or a shutdown)",
    "follower-truncation": "a replica truncated its log to its leader's (a divergence found and repaired)",
    "controller-failover": "another controller of the quorum became the active one",
}
MAX_TIMES = 100  # per state in results.json; the count is exact
SAME_HOST_CLUSTERS = ("local", "local-netns", "docker")  # nodes whose monotonic clock is the harness's


class MetadataObservations:
    """Appends the partitions' leaders and ISRs to a JSON-lines file whenever they change."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._last: Any = None

    def record(self, t_ns: int, partitions: list[dict[str, Any]]) -> None:
        state = sorted((p["partition"], p["leader"], tuple(p["isr"])) for p in partitions)
        if state == self._last or not partitions:
            return
        self._last = state
        with open(self.path, "a") as f:
            f.write(json.dumps({"t_ns": t_ns, "partitions": partitions}) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file; none if it is missing; a torn last line is skipped."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        return []
    return out


def _from_metadata(observations: list[dict[str, Any]]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    last: dict[int, dict[str, Any]] = {}
    for obs in observations:
        t = obs.get("t_ns", 0) / 1e9
        for p in obs.get("partitions", []):
            before = last.get(p["partition"])
            last[p["partition"]] = p
            if before is None:
                continue
            if p["leader"] != before["leader"]:
                times.setdefault("leader-change", []).append(t)
                if p["leader"] < 0:
                    times.setdefault("no-leader", []).append(t)
            if len(p["isr"]) == 1 and len(before["isr"]) != 1:
                times.setdefault("isr-shrunk-to-one", []).append(t)
    return times


def _event_time(event: dict[str, Any], clock: dict[str, Any]) -> float | None:
    """Seconds on the run's timeline: from the host's monotonic clock where the nodes share it, else from
    the node's wall clock (which a clock fault may have shifted)."""
    if clock.get("same_host") and isinstance(event.get("mono"), int | float) and "monotonic_start_ns" in clock:
        return round(event["mono"] - clock["monotonic_start_ns"] / 1e9, 3)
    if isinstance(event.get("ts"), int | float) and "wall_start_s" in clock:
        return round(event["ts"] - clock["wall_start_s"], 3)
    return None


def _from_events(events: list[dict[str, Any]], clock: dict[str, Any]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    activations = 0
    for e in sorted(events, key=lambda e: (e.get("mono") or 0, e.get("ts") or 0)):
        t = _event_time(e, clock)
        if t is None:
            continue
        kind = e.get("event")
        if kind == "partition_change":
            old, new = e.get("from") or {}, e.get("to") or {}
            if old.get("leader") != new.get("leader"):
                times.setdefault("leader-change", []).append(t)
                if new.get("leader", -1) < 0:
                    times.setdefault("no-leader", []).append(t)
                elif new.get("leader") in (old.get("elr") or []) and new.get("leader") not in (old.get("isr") or []):
                    times.setdefault("elr-election", []).append(t)
            if len(new.get("isr") or []) == 1 and len(old.get("isr") or []) != 1:
                times.setdefault("isr-shrunk-to-one", []).append(t)
        elif kind == "unclean_recovery":
            times.setdefault("unclean-recovery", []).append(t)
        elif kind == "broker_fenced":
            times.setdefault("broker-fenced", []).append(t)
        elif kind in ("truncated_on_divergence", "truncated_to_leader_leo_variant") and \
                (e.get("to") is None or e.get("from") is None or e["to"] < e["from"]):
            times.setdefault("follower-truncation", []).append(t)
        elif kind == "truncate_to_hw_variant":
            times.setdefault("follower-truncation", []).append(t)
        elif kind == "controller_activated":
            activations += 1
            if activations > 1:  # the first activation is the quorum's start, not a fail-over
                times.setdefault("controller-failover", []).append(t)
    return times


# The node-log events the states above are read from (the reference broker's JSON state-change log).
LOG_EVENTS = ("partition_change", "unclean_recovery", "broker_fenced", "truncated_on_divergence",
              "truncated_to_leader_leo_variant", "truncate_to_hw_variant", "controller_activated")


def log_events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of a node's JSON log that bear on a state (any other line, or a foreign log, gives none)."""
    return [e for e in lines if e.get("event") in LOG_EVENTS]


# The states only the logs can show; the others the metadata shows as well (less exactly).
LOG_STATES = ("elr-election", "unclean-recovery", "broker-fenced", "follower-truncation", "controller-failover")


def reached_states(observations: list[dict[str, Any]], events: list[dict[str, Any]], clock: dict[str, Any]
                   ) -> dict[str, dict[str, Any]]:
    """State -> {count, first_s, times_s, source} for every state of STATES the run went through."""
    from_logs = _from_events(events, clock) if events else {}
    from_metadata = _from_metadata(observations)
    out: dict[str, dict[str, Any]] = {}
    for state in STATES:
        if events:
            times, source = from_logs.get(state, []), "node logs"
        else:
            times, source = from_metadata.get(state, []), "metadata"
        if state not in LOG_STATES and not times and from_metadata.get(state):
            times, source = from_metadata[state], "metadata"
        if times:
            times = sorted(times)
            out[state] = {"count": len(times), "first_s": times[0], "times_s": times[:MAX_TIMES], "source": source}
    return out
