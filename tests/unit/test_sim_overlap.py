"""Overlapping faults in the simulator (harness/simulate.py SimNemesis, nemesis/sim_schedule.py): a schedule may
hold several faults at once, including cuts from the controllers and the protocol moves' faults; it round-trips,
plays its starts and stops in time order, becomes a scenario, and a drawn run of mix and protocol faults holds
faults together within the real nemesis's bounds and replays byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kafkaesque_harness.nemesis.protocol import MAX_DOWN
from kafkaesque_harness.nemesis.sim_schedule import (
    SCHEDULE_FILE,
    FaultSchedule,
    FaultStep,
    ScheduleError,
    to_scenario,
)

KAFKAESQUE = [sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import main; "
              "sys.argv[0] = 'kafkaesque'; main()"]

# 004's unclean election as a schedule: a follower cut off, the leader and the other follower killed while it is
# out, it healed before they restart; and a zombie's cut from the controllers beside them.
OVERLAPPING = FaultSchedule([FaultStep(1.0, "partition", "broker-3", 6.0, by="protocol"),
                             FaultStep(2.0, "cut", "broker-2", 9.0, peer="controllers", by="protocol"),
                             FaultStep(4.0, "kill", "broker-1", 5.0, by="protocol"),
                             FaultStep(4.0, "kill", "broker-2", 5.0),
                             FaultStep(9.0, "pause", "broker-3", 0.0)], end_s=12.0)


def test_an_overlapping_schedule_round_trips_with_its_peers_and_nemeses(tmp_path):
    OVERLAPPING.write(tmp_path / "s.json")
    assert FaultSchedule.read(tmp_path / "s.json") == OVERLAPPING
    steps = json.loads((tmp_path / "s.json").read_text())["steps"]
    assert steps[1]["peer"] == "controllers" and "peer" not in steps[0] and "by" not in steps[3]
    assert OVERLAPPING.kinds() == ["kill", "pause", "protocol"]  # the nemeses a replay plans (`--nemesis`)


def test_the_events_come_in_time_order_stops_before_starts_at_one_time_and_a_zero_hold_after_its_start():
    got = [(t, "start" if starts else "stop", s.fault, s.node) for t, starts, s in OVERLAPPING.events()]
    assert got == [(1.0, "start", "partition", "broker-3"), (2.0, "start", "cut", "broker-2"),
                   (4.0, "start", "kill", "broker-1"), (4.0, "start", "kill", "broker-2"),
                   (7.0, "stop", "partition", "broker-3"),
                   (9.0, "stop", "kill", "broker-1"), (9.0, "stop", "kill", "broker-2"),
                   (9.0, "start", "pause", "broker-3"), (9.0, "stop", "pause", "broker-3"),
                   (11.0, "stop", "cut", "broker-2")]


def test_an_overlapping_schedule_becomes_a_scenario_holding_the_same_faults_together():
    text = to_scenario(OVERLAPPING, "x", "y", start_s=1.0)
    acts = [(s.do, s.node, s.peer) for s in text.scenario.steps if s.do != "sleep"]
    assert acts[:4] == [("isolate", "broker-3", ""), ("cut", "broker-2", "controllers"), ("kill", "broker-1", ""),
                        ("kill", "broker-2", "")]
    assert [s.seconds for s in text.scenario.steps if s.do == "sleep"][:3] == [1.0, 2.0, 3.0]
    assert text.dropped == [] and text.span_s == 10.0 and 'peer = "controllers"' in text.toml


@pytest.mark.parametrize("peer", ["", "L"])
def test_a_cut_needs_a_node_or_the_controllers_as_its_peer(peer):
    with pytest.raises(ScheduleError, match="a cut names its peer"):
        FaultSchedule.from_dict({"steps": [{"at_s": 1, "fault": "cut", "node": "broker-1", "duration_s": 1,
                                            "peer": peer}]})


def _held_at_once(schedule: FaultSchedule) -> tuple[int, int]:
    """The most faults held at one time, and the most brokers down or paused at one time."""
    most = most_down = 0
    held: list[FaultStep] = []
    for _, starts, s in schedule.events():
        held = [*held, s] if starts else [h for h in held if h is not s]
        most = max(most, len(held))
        most_down = max(most_down, len({h.node for h in held if h.fault in ("kill", "lossy-crash", "pause")
                                        and h.node.startswith("broker")}))
    return most, most_down


def sim(store: Path, name: str, *flags: str) -> tuple[Path | None, str]:
    out = subprocess.run([*KAFKAESQUE, "sim", "--store", str(store), "--name", name, *flags],
                         capture_output=True, text=True, timeout=900)
    lines = out.stdout.strip().splitlines()
    return (Path(lines[-1]) if lines else None), out.stderr


RUN = ["--seed", "2", "--time-limit", "40", "--concurrency", "5", "--rate", "40", "--partitions", "2",
       "--recovery-wait", "10", "--nemesis-interval", "3"]


def test_mix_holds_faults_together_within_the_bounds_and_replays_byte_for_byte(tmp_path):
    drawn, err = sim(tmp_path, "mix", *RUN, "--nemesis", "kill,pause,partition,cut", "--nemesis-schedule", "mix")
    assert drawn is not None, err
    schedule = FaultSchedule.read(drawn / SCHEDULE_FILE)
    most, most_down = _held_at_once(schedule)
    assert most >= 2 and most_down <= MAX_DOWN, schedule.describe()
    kinds = [s.fault for s in schedule.steps]
    assert set(kinds) == {"kill", "pause", "partition", "cut"}  # every planned fault had its turn
    for kind in set(kinds):  # one fault of a kind at a time, as nemesis/schedule.py's mix toggles them
        assert _held_at_once(FaultSchedule([s for s in schedule.steps if s.fault == kind]))[0] == 1
    replayed, err = sim(tmp_path, "replayed", *RUN, "--nemesis-schedule", "mix", "--schedule",
                        str(drawn / SCHEDULE_FILE))
    assert replayed is not None, err
    for name in ["history.jsonl", "data/broker-1/trace.jsonl"]:
        assert (drawn / name).read_bytes() == (replayed / name).read_bytes(), name
    # the same steps; a held fault's duration may differ in its last binary digit (virtual start + duration, then
    # the stop's time minus the start's), not in any time the run acted at (the history is the same)
    again = FaultSchedule.read(replayed / SCHEDULE_FILE)
    assert [replace(s, duration_s=0.0) for s in again.steps] == [replace(s, duration_s=0.0) for s in schedule.steps]
    assert all(abs(a.duration_s - b.duration_s) < 1e-9 for a, b in zip(again.steps, schedule.steps, strict=True))


def test_the_protocol_moves_find_the_unclean_election_and_the_default_broker_stays_valid_under_them(tmp_path):
    # seed 2: the unclean-election sequence (a follower cut off, the leader and the other follower killed)
    flags = [*RUN, "--nemesis", "protocol", "--nemesis-schedule", "mix"]
    flawed, err = sim(tmp_path, "unclean", *flags, "--broker-variant", "unclean-election")
    assert flawed is not None, err
    schedule = FaultSchedule.read(flawed / SCHEDULE_FILE)
    assert {s.by for s in schedule.steps} == {"protocol"} and _held_at_once(schedule)[0] >= 3
    assert json.loads((flawed / "results.json").read_text())["valid"] is False
    default, err = sim(tmp_path, "default", *flags)
    assert default is not None, err
    assert json.loads((default / "results.json").read_text())["valid"] is True


def test_a_swarm_runs_shrink_keeps_its_draw_and_buggify_points_in_every_candidate(tmp_path):
    from kafkaesque_harness.harness.sim_shrink import shrink_run
    from kafkaesque_harness.harness.sim_swarm import swarm_spec
    from kafkaesque_harness.harness.spec import TestSpec

    spec, drawn = swarm_spec(TestSpec.make(store=str(tmp_path), seed=9, workload="queue"))
    culprit = FaultStep(4.0, "kill", "broker-1", 5.0)
    seen: list[object] = []

    def run_sim(spec, log, schedule, swarm=None):  # fails while the culprit is in the schedule
        seen.append(swarm)
        run_dir = tmp_path / f"run-{len(seen)}"
        run_dir.mkdir()
        fails = culprit in schedule.steps
        (run_dir / "results.json").write_text(json.dumps({"valid": not fails, "checkers": {
            "queue": {"valid": not fails, "anomaly_types": ["lost-write"] if fails else []}}}))
        return (1 if fails else 0), run_dir
    original = tmp_path / "original"
    original.mkdir()
    FaultSchedule([FaultStep(1.0, "partition", "broker-3", 6.0), culprit], 12.0).write(original / SCHEDULE_FILE)
    (original / "results.json").write_text(json.dumps({"valid": False, "checkers": {"queue": {"anomaly_types":
                                                                                             ["lost-write"]}}}))
    lines: list[str] = []
    assert shrink_run(spec, original, budget=3, log=lines.append, run_sim=run_sim, swarm=drawn) is not None
    assert seen and all(s == drawn for s in seen)
    replay = next(line for line in lines if line.startswith("replay: "))
    assert replay.endswith("--swarm") and "--brokers" not in replay  # the seed redraws its cluster itself
