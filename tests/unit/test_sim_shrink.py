"""A simulated run's fault schedule (nemesis/sim_schedule.py) and `kafkaesque sim --shrink` (harness/sim_shrink.py):
the schedule round-trips and replays the run it came from; a failing run shrinks to fewer faults that fail the
same way, written as a scenario file nemesis/scenario.py reads; a passing run is not shrunk."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kafkaesque_harness.harness.sim_shrink import (
    SHRUNK_SCENARIO,
    SHRUNK_SCHEDULE,
    Candidate,
    Shrinker,
    anomaly_kinds,
    read_given_schedule,
    shrink_run,
)
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.nemesis.scenario import ScenarioNemesis
from kafkaesque_harness.nemesis.scenario_steps import load_scenario_file
from kafkaesque_harness.nemesis.sim_schedule import (
    SCHEDULE_FILE,
    FaultSchedule,
    FaultStep,
    ScheduleError,
    ScheduleRecorder,
    to_scenario,
)

KAFKAESQUE = [sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import main; "
              "sys.argv[0] = 'kafkaesque'; main()"]

SCHEDULE = FaultSchedule([FaultStep(0.5, "clock", "broker-1", 0.25, delta_s=-62.7),
                          FaultStep(1.5, "kill", "broker-2", 4.0),
                          FaultStep(9.25, "pause", "controller-0", 2.0),
                          FaultStep(12.0, "partition", "broker-3", 1.5),
                          FaultStep(14.0, "lossy-crash", "broker-1", 0.75)], end_s=16.5)


def sim(store: Path, name: str, *flags: str) -> tuple[int, Path | None, str]:
    out = subprocess.run([*KAFKAESQUE, "sim", "--store", str(store), "--name", name, *flags],
                         capture_output=True, text=True, timeout=900)
    lines = out.stdout.strip().splitlines()
    return out.returncode, (Path(lines[-1]) if lines else None), out.stderr


# --- the schedule as data ------------------------------------------------------------------------------------
def test_a_schedule_round_trips_through_its_file(tmp_path):
    SCHEDULE.write(tmp_path / "s.json")
    assert FaultSchedule.read(tmp_path / "s.json") == SCHEDULE
    assert "delta_s" not in json.loads((tmp_path / "s.json").read_text())["steps"][1]  # only a clock jump has one


@pytest.mark.parametrize("doc, says", [
    ({"steps": [{"at_s": 1, "fault": "disk", "node": "broker-1", "duration_s": 1}]}, "has fault 'disk'"),
    ({"steps": [{"at_s": 1, "fault": "kill", "node": "L", "duration_s": 1}]}, "names node 'L'"),
    ({"steps": [{"at_s": 1, "fault": "kill", "node": "broker-1", "duration_s": -1}]}, "duration_s is -1"),
    ({"steps": [{"at_s": 1, "fault": "kill", "node": "broker-1", "duration_s": 5},
                {"at_s": 2, "fault": "kill", "node": "broker-1", "duration_s": 1}]}, "holds two kill faults of broker-1"),
    ({"steps": [{"at_s": 3, "fault": "kill", "node": "broker-1", "duration_s": 1},
                {"at_s": 2, "fault": "pause", "node": "broker-2", "duration_s": 1}]}, "before step 1"),
    ({"steps": [{"at_s": 1, "fault": "cut", "node": "broker-1", "duration_s": 1}]}, "has peer ''"),
    ({"steps": [{"at_s": 1, "fault": "kill", "node": "broker-1", "duration_s": 1, "peer": "broker-2"}]},
     "no other fault has one"),
    ({"steps": [{"at": 1}]}, "unknown key 'at'"),
    ({"faults": []}, "is not a schedule"),
])
def test_a_schedule_file_that_cannot_run_is_refused_with_a_sentence(tmp_path, doc, says):
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(ScheduleError, match=says):
        FaultSchedule.read(tmp_path / "s.json")


def test_a_schedule_naming_a_node_the_cluster_lacks_is_refused(tmp_path):
    FaultSchedule([FaultStep(1, "kill", "broker-5", 1)], 3).write(tmp_path / "s.json")
    _, given, problems = read_given_schedule(TestSpec.make(brokers=3), str(tmp_path / "s.json"))
    assert given is None and "broker-5" in problems[0]
    spec, given, problems = read_given_schedule(TestSpec.make(brokers=5, nemesis=["pause"]), str(tmp_path / "s.json"))
    assert not problems and given is not None and spec.nemesis == ["kill"]  # the schedule's faults replace --nemesis


def test_the_recorder_keeps_each_fault_with_its_start_and_how_long_it_held():
    clock = [100.0]
    rec = ScheduleRecorder(lambda: clock[0], t0=100.0)
    clock[0] = 101.0
    rec.started("kill", "broker-1")
    clock[0] = 103.5
    rec.stopped("kill", "broker-1")
    clock[0] = 104.0
    rec.started("clock", "broker-2", -3.0)
    clock[0] = 110.0
    got = rec.finished()  # the clock jump never stopped: it holds until the nemesis is done
    assert got == FaultSchedule([FaultStep(1.0, "kill", "broker-1", 2.5), FaultStep(4.0, "clock", "broker-2", 6.0, -3.0)],
                                end_s=10.0)


# --- as a scenario ----------------------------------------------------------------------------------------------
def test_the_schedule_becomes_a_scenario_of_fixed_nodes_and_sleeps_and_a_clock_jump_is_dropped_by_name(tmp_path):
    text = to_scenario(SCHEDULE, "shrunk", 'a "test", shifted ±0.25 s', targets=("truncate-to-hw",), start_s=1.0)
    assert [line.split(":")[0] for line in text.dropped] == ["clock on broker-1 at 0.50 s"]
    assert [(s.do, s.node, s.seconds) for s in text.scenario.steps if s.do != "sleep"] == [
        ("kill", "broker-2", 30.0), ("start", "broker-2", 30.0), ("pause", "controller-0", 30.0),
        ("resume", "controller-0", 30.0), ("isolate", "broker-3", 30.0), ("heal", "broker-3", 30.0),
        ("lossy-crash", "broker-1", 30.0), ("start", "broker-1", 30.0)]
    # the faults keep their times: the scenario starts 1 s in, the kill at 1.5 s, held 4 s; the pause at 9.25 s
    assert [s.seconds for s in text.scenario.steps if s.do == "sleep"][:4] == [0.5, 4.0, 3.75, 2.0]
    (tmp_path / "shrunk.toml").write_text(text.toml)
    parsed = load_scenario_file(tmp_path / "shrunk.toml")
    assert parsed.steps == text.scenario.steps and parsed.targets == ("truncate-to-hw",)
    assert parsed.doc == 'a "test", shifted ±0.25 s' and "±" in text.toml  # written as UTF-8, not escaped
    assert parsed.needs_isolated_nodes
    # the scenario nemesis takes it: a node name needs no bind (ScenarioNemesis.node())
    nemesis = ScenarioNemesis(str(tmp_path / "shrunk.toml"), {})
    assert nemesis.node("broker-2") == "broker-2" and "scenario-kill" in nemesis.fs()


def test_a_schedule_of_clock_jumps_only_has_no_scenario():
    with pytest.raises(ScheduleError, match="the scenario vocabulary has no clock step"):
        to_scenario(FaultSchedule([FaultStep(1, "clock", "broker-1", 1, 5.0)], 3), "x", "y")


# --- the shrinker's search, on runs decided by a stand-in for the simulator ----------------------------------------
def stand_in(culprit: FaultStep, needs_clients: int = 1):
    """A simulator stand-in: the run fails with queue:lost-write while the culprit fault (on its node, at its time,
    held at least 1 s) is in the schedule and at least `needs_clients` processes run; each run's dir as simulate's."""
    runs: list[Path] = []

    def run_sim(spec: TestSpec, log, schedule: FaultSchedule) -> tuple[int, Path]:
        run_dir = Path(spec.store) / f"run-{len(runs)}"
        run_dir.mkdir(parents=True)
        runs.append(run_dir)
        fails = spec.concurrency >= needs_clients and any(
            s.fault == culprit.fault and s.node == culprit.node and s.at_s == culprit.at_s and s.duration_s >= 1.0
            for s in schedule.steps)
        checkers = {"queue": {"valid": not fails, "anomaly_types": ["lost-write"] if fails else []}}
        (run_dir / "results.json").write_text(json.dumps({"valid": not fails, "checkers": checkers}))
        return (1 if fails else 0), run_dir
    return run_sim, runs


def test_the_shrinker_keeps_only_the_fault_that_fails_and_shortens_the_rest(tmp_path):
    culprit = SCHEDULE.steps[2]
    run_sim, runs = stand_in(culprit, needs_clients=2)
    spec = TestSpec.make(store=str(tmp_path), seed=4, time_limit=60, concurrency=8, rate=80)
    shrinker = Shrinker(spec, {"queue:lost-write"}, budget=40, log=lambda _m: None, run_sim=run_sim)
    smallest = shrinker.shrink(Candidate(SCHEDULE, 60.0, 8, 80.0))
    assert [(s.fault, s.node, s.at_s) for s in smallest.schedule.steps] == [("pause", "controller-0", 9.25)]
    assert smallest.schedule.steps[0].duration_s == 1.0      # 2 s halved once; 0.5 s no longer fails
    # the time limit: halved down to a second past the fault's stop (9.25 + 1.0, rounded up)
    assert smallest.time_limit == 12 and smallest.concurrency == 2 and smallest.rate == 20
    assert shrinker.best_dir is not None and shrinker.best_dir.is_dir()
    assert [p for p in runs if p.is_dir()] == [shrinker.best_dir]  # every other candidate's run removed


def test_the_shrinker_stops_at_its_budget_with_the_smallest_so_far(tmp_path):
    run_sim, runs = stand_in(SCHEDULE.steps[1])
    spec = TestSpec.make(store=str(tmp_path))
    smallest = Shrinker(spec, {"queue:lost-write"}, budget=2, log=lambda _m: None, run_sim=run_sim).shrink(
        Candidate(SCHEDULE, 60.0, 8, 80.0))
    assert len(runs) == 2 and 0 < len(smallest.schedule.steps) < len(SCHEDULE.steps)


def test_a_candidate_failing_with_another_kind_is_not_kept(tmp_path):
    def run_sim(spec, log, schedule):
        run_dir = tmp_path / f"run-{len(schedule.steps)}"
        run_dir.mkdir()
        (run_dir / "results.json").write_text(json.dumps(
            {"valid": False, "checkers": {"trace": {"anomaly_types": ["log-shorter-after-restart"]}}}))
        return 1, run_dir
    shrinker = Shrinker(TestSpec.make(store=str(tmp_path)), {"queue:lost-write"}, 1, lambda _m: None, run_sim)
    assert not shrinker.reproduces(Candidate(SCHEDULE.without({0}), 60.0, 8, 80.0))
    assert anomaly_kinds({"checkers": {"queue": {"anomaly_types": ["lost-write"]}, "faults": {}}}) == {
        "queue:lost-write"}


# --- with the simulator ----------------------------------------------------------------------------------------
RUN = ("--seed", "5", "--time-limit", "12", "--nemesis", "kill,pause,clock", "--nemesis-interval", "2",
       "--concurrency", "4", "--rate", "50", "--recovery-wait", "5")


def test_a_simulated_run_records_its_schedule_and_replays_it_byte_for_byte(tmp_path):
    _, drawn, err = sim(tmp_path, "drawn", *RUN)
    assert drawn is not None, err
    schedule = FaultSchedule.read(drawn / SCHEDULE_FILE)
    assert len(schedule.steps) >= 2 and schedule.kinds() <= ["clock", "kill", "pause"]
    assert json.loads((drawn / "test.json").read_text())["fault_schedule"] == schedule.to_dict()
    _, replayed, err = sim(tmp_path, "replayed", *RUN, "--schedule", str(drawn / SCHEDULE_FILE))
    assert replayed is not None, err
    nodes = json.loads((drawn / "test.json").read_text())["nodes"]
    for name in [SCHEDULE_FILE, "history.jsonl", *(f"data/{n}/trace.jsonl" for n in nodes)]:
        assert (drawn / name).read_bytes() == (replayed / name).read_bytes(), name


def test_a_passing_run_is_not_shrunk_and_says_so(tmp_path):
    code, run_dir, err = sim(tmp_path, "passing", *RUN, "--shrink")
    assert code == 0 and run_dir is not None, err
    assert "the run is valid: nothing to shrink" in err
    assert not (run_dir / SHRUNK_SCENARIO).exists() and not (tmp_path / "passing-shrink").exists()


# truncate-to-hw (a restarted broker truncates its log to its checkpointed high watermark) loses acknowledged
# records under kill alone on seed 4: 7 kills in 15 virtual s (found by trying seeds 1-4)
FLAW_RUN = ("--seed", "4", "--time-limit", "15", "--nemesis", "kill", "--nemesis-interval", "2", "--concurrency", "4",
            "--rate", "50", "--recovery-wait", "5", "--broker-variant", "truncate-to-hw")


def test_a_flaw_variants_failing_run_shrinks_to_fewer_faults_and_a_scenario_file(tmp_path):
    code, run_dir, err = sim(tmp_path, "flaw", *FLAW_RUN, "--shrink", "--shrink-budget", "4")
    assert run_dir is not None, err
    assert code == 1, ("seed 4 of truncate-to-hw no longer fails in the simulator: the simulator or the broker "
                       "changed; pick another failing seed (docs/SIMULATION.md, Shrink and replay)\n" + err)
    before = FaultSchedule.read(run_dir / SCHEDULE_FILE)
    after = FaultSchedule.read(run_dir / SHRUNK_SCHEDULE)
    assert 0 < len(after.steps) < len(before.steps), err
    assert "before: " in err and "after " in err and "fails the same way: kept" in err
    scenario = load_scenario_file(run_dir / SHRUNK_SCENARIO)
    assert scenario.targets == ("truncate-to-hw",)
    assert [s.node for s in scenario.steps if s.do == "kill"] == [s.node for s in after.steps]
    # the smallest candidate's run is kept, and it fails with a kind the original had
    kept = [p for p in (tmp_path / "flaw-shrink").iterdir() if p.name != "latest"]
    assert len(kept) == 1
    original = anomaly_kinds(json.loads((run_dir / "results.json").read_text()))
    assert anomaly_kinds(json.loads((kept[0] / "results.json").read_text())) & original


def test_with_a_jitter_a_candidate_is_kept_only_when_its_shifted_schedules_fail_too(tmp_path):
    exact, _ = stand_in(SCHEDULE.steps[1])  # fails only with the kill at its exact time: no shift fails

    def anywhen(spec, log, schedule):  # fails while broker-2 is killed at any time
        return exact(spec, log, FaultSchedule([replace(s, at_s=1.5) if s.node == "broker-2" else s
                                               for s in schedule.steps], schedule.end_s))
    lines: list[str] = []
    original = Candidate(SCHEDULE, 60.0, 8, 80.0)
    strict = Shrinker(TestSpec.make(store=str(tmp_path / "a")), {"queue:lost-write"}, 30, lines.append, exact,
                      jitter_s=0.5)
    assert strict.shrink(original) == original and strict.best is None
    assert "shifted +0.5 s: passes: dropped" in lines[1]  # the first kept-looking candidate failed shifted
    tolerant = Shrinker(TestSpec.make(store=str(tmp_path / "b")), {"queue:lost-write"}, 30, lambda _m: None,
                        anywhen, jitter_s=0.5)
    assert [s.node for s in tolerant.shrink(original).schedule.steps] == ["broker-2"]
    kept = [line for line in tolerant.trail if line.endswith("kept")]
    assert kept and all("also shifted by ±0.5 s" in line for line in kept)
    assert tolerant.best_dir is not None and [p.name for p in (tmp_path / "b").rglob("run-*")] == [
        tolerant.best_dir.name]  # the shifted runs' dirs are removed


def test_a_shifted_schedule_keeps_its_gaps_and_starts_no_fault_before_the_main_phase():
    later = SCHEDULE.shifted(2.0)
    assert [s.at_s for s in later.steps] == [2.5, 3.5, 11.25, 14.0, 16.0] and later.end_s == 18.5
    earlier = SCHEDULE.shifted(-3.0)  # the first fault is at 0.5 s: shifted 0.5 s only
    assert [s.at_s for s in earlier.steps] == [0.0, 1.0, 8.75, 11.5, 13.5]
    assert [s.duration_s for s in earlier.steps] == [s.duration_s for s in SCHEDULE.steps]


def test_the_printed_commands_carry_every_setting_that_differs_from_the_default():
    from kafkaesque_harness.harness.sim_shrink import real_run_command, replay_command

    spec = TestSpec.make(seed=9, brokers=5, min_isr=3, broker_variant="no-elr", workload_options={"topic": "t"})
    cand = Candidate(SCHEDULE, 20.0, 2, 25.0)
    sim_cmd = replay_command(spec, cand, Path("s.json"))
    assert sim_cmd.startswith("kafkaesque sim --seed 9 --workload queue --schedule s.json --time-limit 20 "
                              "--concurrency 2 --rate 25 ")
    for flag in ("--brokers 5", "--min-isr 3", "--broker-variant no-elr", "--workload-option topic=t"):
        assert flag in sim_cmd and flag in real_run_command(spec, cand, Path("x.toml"), 1.5)
    assert "--partitions" not in sim_cmd and "--acks" not in sim_cmd  # defaults are left out
    assert "--nemesis scenario:x.toml --nemesis-interval 1.5" in real_run_command(spec, cand, Path("x.toml"), 1.5)


def test_a_bad_schedule_file_or_keep_mode_is_refused_before_any_run(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"steps": [{"at_s": 1, "fault": "disk", "node": "broker-1",
                                                              "duration_s": 1}]}))
    code, _, err = sim(tmp_path, "bad", "--schedule", str(tmp_path / "bad.json"))
    assert code == 3 and "has fault 'disk'" in err
    code, _, err = sim(tmp_path, "bad", "--shrink", "--shrink-keep", "most")
    assert code == 3 and "--shrink-keep is 'most'; valid: any, all, or anomaly kinds as checker:kind" in err
    assert not (tmp_path / "bad").exists()  # refused before a run dir was made


def test_a_mutants_run_is_shrunk_with_the_mutant_in_every_candidate(tmp_path):
    run_sim, runs = stand_in(SCHEDULE.steps[1])
    seen: list[object] = []

    def with_mutant(spec, log, schedule, mutant=None):
        seen.append(mutant)
        return run_sim(spec, log, schedule)
    original_dir = tmp_path / "original"
    original_dir.mkdir()
    SCHEDULE.write(original_dir / SCHEDULE_FILE)
    (original_dir / "results.json").write_text(json.dumps(
        {"valid": False, "checkers": {"queue": {"anomaly_types": ["lost-write"]}}}))
    lines: list[str] = []
    mutant = {"mutant": "a-mutant", "digest": "abc"}
    result = shrink_run(TestSpec.make(store=str(tmp_path), seed=3), original_dir, budget=3, log=lines.append,
                        run_sim=with_mutant, mutant=mutant)
    assert result is not None and seen == [mutant] * 3
    assert any(line.startswith("replay: ") and line.endswith("--mutant a-mutant") for line in lines)


def test_shrink_keep_may_name_the_kinds_to_follow_and_only_kinds_the_run_showed(tmp_path):
    original_dir = tmp_path / "original"
    original_dir.mkdir()
    SCHEDULE.write(original_dir / SCHEDULE_FILE)
    (original_dir / "results.json").write_text(json.dumps({"valid": False, "checkers": {
        "queue": {"anomaly_types": ["lost-write"]}, "trace": {"anomaly_types": ["log-shorter-after-restart"]}}}))
    run_sim, runs = stand_in(SCHEDULE.steps[1])  # its runs show queue:lost-write alone
    lines: list[str] = []
    spec = TestSpec.make(store=str(tmp_path))
    assert shrink_run(spec, original_dir, 5, lines.append, run_sim, keep="queue:stale-read") is None
    assert "not queue:stale-read" in lines[-1] and not runs
    result = shrink_run(spec, original_dir, 5, lines.append, run_sim, keep="queue:lost-write")
    assert result is not None and result.target == {"queue:lost-write"} and result.run_dir is not None
    # "all" would keep none of them: the candidates never show the trace kind
    assert shrink_run(spec, original_dir, 5, lines.append, run_sim, keep="all").run_dir is None
