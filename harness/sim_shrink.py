"""`kafkaesque sim --shrink`: a failing simulated run made smaller, and written as a scenario a real run replays.

Delta debugging over what a simulated run's settings allow: the fault schedule's steps (ddmin: drop halves,
then quarters, ... of the steps), the time limit (toward the last fault's stop), each fault's duration
(halved), and the client processes (halved, the rate with them, so each process keeps its pace). Every
candidate is a whole simulated run with the same seed (harness/simulate.py, its schedule given), and it is
kept when it still fails with an anomaly of the kinds the original showed (checker and kind, e.g.
queue:lost-write): keep "any" (the default) asks for one of them, and the kinds kept narrow to those the
kept candidate showed, so a shrink never drifts to a kind the original did not have; keep "all" asks for
every one (a run with several kinds shrinks less); keep KIND,... (checker:kind) asks for every one of those
named, which the run must have shown (to follow the anomaly that matters, not a side effect). A candidate that passes, or fails otherwise, is dropped.
With a jitter (`--shrink-jitter S`), a candidate is kept only when its schedule shifted S seconds later and
earlier fails so too (three runs a candidate): the simulator's timings are exact, a real run's are not. At most `budget`
candidates run. The smallest failing candidate's run dir is kept, the others are removed (each holds a whole
cluster's logs).

The result: its schedule (shrunk-schedule.json: `kafkaesque sim --seed N --schedule FILE` with the settings
printed replays it) and the same faults as a scenario file in the vocabulary of nemesis/scenario.py
(shrunk-scenario.toml: `kafkaesque run --nemesis scenario:FILE.toml`), both in the original run's dir. A
fault the scenario vocabulary cannot express is named as dropped (nemesis/sim_schedule.py to_scenario()).
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.reference import FLAW_VARIANTS
from kafkaesque_harness.harness.simulate import simulate
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.nemesis.sim_schedule import (
    SCHEDULE_FILE,
    FaultSchedule,
    ScheduleError,
    to_scenario,
)

SHRUNK_SCHEDULE = "shrunk-schedule.json"
SHRUNK_SCENARIO = "shrunk-scenario.toml"
DEFAULT_BUDGET = 30
KEEP_MODES = ("any", "all")
MIN_DURATION_S = 0.5   # a fault held shorter than this is not tried: a real one takes longer to act
MIN_TIME_LIMIT_S = 5.0


def anomaly_kinds(results: dict[str, Any]) -> set[str]:
    """Every anomaly kind a run's checkers found, as checker:kind."""
    kinds = set()
    for name, c in (results.get("checkers") or {}).items():
        for kind in (c.get("anomaly_types") or []) if isinstance(c, dict) else []:
            kinds.add(f"{name}:{kind}")
    return kinds


def spec_for_schedule(spec: TestSpec, schedule: FaultSchedule) -> TestSpec:
    """The spec a run of `schedule` has: its faults are the schedule's kinds (no fault "planned but never
    applied" for the faults checker to hold against it)."""
    return spec.with_settings(nemesis=schedule.kinds())


def read_given_schedule(spec: TestSpec, path: str) -> tuple[TestSpec, FaultSchedule | None, list[str]]:
    """`--schedule FILE`: the spec with the schedule's faults, the schedule, and one sentence per problem (a file
    that cannot be read, a node this cluster has not)."""
    try:
        schedule = FaultSchedule.read(path)
    except ScheduleError as e:
        return spec, None, [str(e)]
    names = {f"controller-{j}" for j in range(spec.broker.controllers)} | {
        f"broker-{i}" for i in range(1, spec.brokers + 1)}
    missing = [n for n in schedule.nodes() if n not in names]
    if missing:
        return spec, None, [f"the schedule {path} has faults on {', '.join(missing)}, which this cluster of "
                            f"{spec.brokers} brokers and {spec.broker.controllers} controller(s) has not; give "
                            "--brokers/--controllers as the run it came from had"]
    return spec_for_schedule(spec, schedule), schedule, []


@dataclass(frozen=True)
class Candidate:
    schedule: FaultSchedule
    time_limit: float
    concurrency: int
    rate: float

    def describe(self) -> str:
        return (f"{len(self.schedule.steps)} fault(s), {self.time_limit:g} virtual s, {self.concurrency} client "
                f"process(es) at {self.rate:g} ops/s")


class BudgetSpent(Exception):
    pass


@dataclass
class ShrinkResult:
    original: Candidate
    smallest: Candidate
    target: set[str]
    runs: int
    run_dir: Path | None            # the smallest failing candidate's run (None: the original is the smallest)
    trail: list[str] = field(default_factory=list)  # one line per candidate run
    jitter_s: float = 0.0           # each kept candidate also failed with its faults shifted this much


RunSim = Callable[..., tuple[int, Path]]


class Shrinker:
    def __init__(self, spec: TestSpec, target: set[str], budget: int, log: Callable[[str], None],
                 run_sim: RunSim = simulate, keep: str = "any", jitter_s: float = 0.0):
        self.spec, self.target, self.budget, self.log, self.run_sim = spec, set(target), budget, log, run_sim
        self.keep, self.jitter_s = keep, jitter_s
        # Candidates that did not fail the same way: the target only narrows, so they never would (not run again)
        self.rejected: set[str] = set()
        self.runs = 0
        self.best_dir: Path | None = None
        self.best: Candidate | None = None  # the smallest candidate that failed the same way
        self.trail: list[str] = []

    def reproduces(self, cand: Candidate) -> bool:
        """Run the candidate; True when it fails with the target kinds (keep "any": one of them, and the target
        narrows to those it showed; "all": every one); its run dir is then kept as the best. With `jitter_s`,
        its schedule shifted that much later and earlier must fail so too (a schedule that fails only at the
        simulator's exact times is a poor one to replay on real processes, whose timings drift)."""
        key = json.dumps([cand.schedule.to_dict(), cand.time_limit, cand.concurrency, cand.rate])
        if key in self.rejected:
            return False
        shifts = [0.0, self.jitter_s, -self.jitter_s] if self.jitter_s > 0 else [0.0]
        shared, kept_dir, verdict = set(self.target), None, ""
        for shift in shifts:
            if self.runs >= self.budget:
                if kept_dir is not None:
                    shutil.rmtree(kept_dir, ignore_errors=True)
                raise BudgetSpent
            self.runs += 1
            run_dir, results = self._run(cand, cand.schedule.shifted(shift))
            kinds = anomaly_kinds(results)
            shared &= kinds
            ok = results.get("valid") is False and (shared == self.target if self.keep == "all" else bool(shared))
            if shift == 0.0:
                kept_dir = run_dir
            else:
                shutil.rmtree(run_dir, ignore_errors=True)
            if not ok:
                verdict = ("passes" if results.get("valid") is True else "fails otherwise "
                           f"({', '.join(sorted(kinds)) or results.get('valid', 'no verdict')})")
                verdict = (f"shifted {shift:+g} s: " if shift else "") + verdict + ": dropped"
                break
        else:
            verdict = "fails the same way" + (f" (also shifted by ±{self.jitter_s:g} s)" if shifts[1:] else "") + \
                ": kept"
        line = f"candidate run {self.runs}/{self.budget}: {cand.describe()}: {verdict}"
        self.trail.append(line)
        self.log(line)
        if verdict.endswith("kept"):
            self.target, self.best = shared, cand
            if self.best_dir is not None:
                shutil.rmtree(self.best_dir, ignore_errors=True)
            self.best_dir = kept_dir
            return True
        self.rejected.add(key)
        if kept_dir is not None:
            shutil.rmtree(kept_dir, ignore_errors=True)
        return False

    def _run(self, cand: Candidate, schedule: FaultSchedule) -> tuple[Path, dict[str, Any]]:
        spec = spec_for_schedule(self.spec, schedule).with_settings(
            name=f"{self.spec.name}-shrink", time_limit=cand.time_limit, concurrency=cand.concurrency, rate=cand.rate)
        _, run_dir = self.run_sim(spec, log=lambda _m: None, schedule=schedule)
        try:
            return run_dir, json.loads((run_dir / "results.json").read_text())
        except (OSError, json.JSONDecodeError):
            return run_dir, {}

    # --- the passes: each returns the smallest candidate it reached ------------------------------------------
    def drop_steps(self, cur: Candidate) -> Candidate:
        """ddmin over the steps: drop one of n chunks; on success go on from there, else n doubles."""
        n = 2
        while cur.schedule.steps:
            size = len(cur.schedule.steps)
            chunk = math.ceil(size / min(n, size))
            for begin in range(0, size, chunk):
                cand = replace(cur, schedule=cur.schedule.without(set(range(begin, min(begin + chunk, size)))))
                if self.reproduces(cand):
                    cur, n = cand, max(n - 1, 2)
                    break
            else:
                if chunk == 1:
                    return cur
                n = min(2 * n, size)
        return cur

    def shorten_time(self, cur: Candidate) -> Candidate:
        """The time limit halved, but never before the last fault has stopped (plus a second to see it)."""
        floor = max(MIN_TIME_LIMIT_S, math.ceil(max((s.end_s for s in cur.schedule.steps), default=0.0)) + 1.0)
        while cur.time_limit > floor:
            limit = max(floor, math.floor(cur.time_limit / 2))
            cand = replace(cur, time_limit=limit, schedule=cur.schedule.cut_at(limit))
            if not self.reproduces(cand):
                return cur
            cur = cand
        return cur

    def shorten_durations(self, cur: Candidate) -> Candidate:
        for i, step in enumerate(cur.schedule.steps):
            half = round(step.duration_s / 2, 3)
            if half < MIN_DURATION_S:
                continue
            cand = replace(cur, schedule=cur.schedule.with_step(i, replace(step, duration_s=half)))
            if self.reproduces(cand):
                cur = cand
        return cur

    def fewer_clients(self, cur: Candidate) -> Candidate:
        while cur.concurrency > 1:
            fewer = cur.concurrency // 2
            cand = replace(cur, concurrency=fewer, rate=round(cur.rate * fewer / cur.concurrency, 3))
            if not self.reproduces(cand):
                return cur
            cur = cand
        return cur

    def shrink(self, original: Candidate) -> Candidate:
        cur = original
        try:
            while True:
                before = cur
                for shrink_pass in (self.drop_steps, self.shorten_time, self.shorten_durations, self.fewer_clients):
                    cur = shrink_pass(cur)
                if cur == before:
                    return cur
        except BudgetSpent:
            self.log(f"budget of {self.budget} candidate runs spent; the smallest so far is kept")
            return self.best or original


def shrink_run(spec: TestSpec, run_dir: Path, budget: int = DEFAULT_BUDGET, log: Callable[[str], None] = print,
               run_sim: RunSim = simulate, keep: str = "any", jitter_s: float = 0.0,
               mutant: dict[str, str] | None = None, swarm: dict[str, Any] | None = None) -> ShrinkResult | None:
    """Shrink the failing simulated run in `run_dir` (of `spec`); None when there is nothing to shrink (said).
    `mutant`: the run's broker was a mutant's copy (simulate()'s), and so is every candidate's. `swarm`: the run
    drew its settings (`--swarm`; already in `spec`): every candidate has its BUGGIFY points too."""
    results = json.loads((run_dir / "results.json").read_text())
    if results.get("valid") is not False:
        log(f"the run is {'valid' if results.get('valid') is True else 'not decided (valid: unknown)'}: "
            "nothing to shrink")
        return None
    target = anomaly_kinds(results)
    if not target:
        log("the run is invalid with no anomaly kind to keep (a harness error?): nothing to shrink")
        return None
    if keep not in KEEP_MODES:
        named = {k.strip() for k in keep.split(",") if k.strip()}
        if not named or not named <= target:
            log(f"--shrink-keep {keep}: the run showed {', '.join(sorted(target))}, not "
                f"{', '.join(sorted(named - target)) or 'a kind'}; name kinds it showed, or any, or all: nothing shrunk")
            return None
        target, keep = named, "all"
    schedule = FaultSchedule.read(run_dir / SCHEDULE_FILE)
    original = Candidate(schedule, spec.time_limit, spec.concurrency, spec.rate)
    log(f"shrinking seed {spec.seed}: keeping {keep} of {', '.join(sorted(target))}"
        + (f", also with the faults shifted ±{jitter_s:g} s" if jitter_s > 0 else "")
        + f"; at most {budget} candidate runs")
    if mutant or swarm:
        plain_run_sim = run_sim
        same = {**({"mutant": mutant} if mutant else {}), **({"swarm": swarm} if swarm else {})}

        def run_sim(*args: Any, **kwargs: Any) -> tuple[int, Path]:
            return plain_run_sim(*args, **same, **kwargs)
    shrinker = Shrinker(spec, target, budget, log, run_sim, keep, jitter_s)
    smallest = shrinker.shrink(original)
    result = ShrinkResult(original, smallest, shrinker.target, shrinker.runs, shrinker.best_dir, shrinker.trail,
                          jitter_s)
    write_shrunk(spec, run_dir, result, log, mutant["mutant"] if mutant else "", swarm is not None)
    return result


# The settings a simulated run shares with a real one, besides those a candidate changes: written as flags when
# they differ from the default, so the printed commands run the same cluster and workload.
SHARED_FLAGS = ("brokers", "controllers", "replication_factor", "min_isr", "partitions", "acks", "flush_policy",
                "broker_variant")


def shared_flags(spec: TestSpec) -> str:
    mine, default = spec.settings(), TestSpec().settings()
    flags = [f"--{name.replace('_', '-')} {mine[name]}" for name in SHARED_FLAGS if mine[name] != default[name]]
    flags += [f"--workload-option {k}={v}" for k, v in sorted(spec.workload_options.items())]
    return "".join(f" {f}" for f in flags)


def replay_command(spec: TestSpec, cand: Candidate, schedule_path: Path, mutant: str = "", swarm: bool = False) -> str:
    """`swarm`: the seed redraws its settings (and BUGGIFY points) itself; the cluster flags would be ignored."""
    return (f"kafkaesque sim --seed {spec.seed} --workload {spec.workload} --schedule {schedule_path} "
            f"--time-limit {cand.time_limit:g} --concurrency {cand.concurrency} --rate {cand.rate:g} "
            f"--recovery-wait {spec.recovery_wait:g}" + (" --swarm" if swarm else shared_flags(spec))
            + (f" --mutant {mutant}" if mutant else ""))


def write_shrunk(spec: TestSpec, run_dir: Path, result: ShrinkResult, log: Callable[[str], None],
                 mutant: str = "", swarm: bool = False) -> None:
    """Print the steps before and after; write the smallest schedule and its scenario next to the original run."""
    log(f"before: {result.original.describe()}")
    for line in result.original.schedule.describe():
        log(f"  {line}")
    if result.run_dir is None:
        log(f"after {result.runs} candidate run(s): no smaller candidate failed the same way; the original is kept")
    else:
        log(f"after {result.runs} candidate run(s): {result.smallest.describe()}, failing with "
            f"{', '.join(sorted(result.target))}")
    for line in result.smallest.schedule.describe():
        log(f"  {line}")
    schedule_path = run_dir / SHRUNK_SCHEDULE
    result.smallest.schedule.write(schedule_path)
    log(f"schedule: {schedule_path}")
    log(f"replay: {replay_command(spec, result.smallest, schedule_path, mutant, swarm)}")
    if result.run_dir is not None:
        log(f"its run: {result.run_dir}")
    variant = spec.broker.broker_variant
    smallest = result.smallest
    try:
        text = to_scenario(smallest.schedule, f"shrunk-seed-{spec.seed}", "",
                           targets=(variant,) if variant in FLAW_VARIANTS else ())
    except ScheduleError as e:
        log(f"no scenario file: {e}")
        return
    for line in text.dropped:
        log(f"dropped from the scenario: {line}")
    scenario_path = run_dir / SHRUNK_SCENARIO
    command = real_run_command(spec, smallest, scenario_path, text.start_s)
    doc = (f"shrunk by kafkaesque sim --shrink from seed {spec.seed} ({spec.workload}, broker variant {variant}, "
           f"{smallest.describe()}); failed in the simulator with {', '.join(sorted(result.target))}"
           + (f" (also with its faults shifted ±{result.jitter_s:g} s)" if result.jitter_s > 0 and result.run_dir else "")
           + f". The first "
           f"fault belongs {text.start_s:g} s into the main phase: run it as "
           f"{real_run_command(spec, smallest, Path('THIS-FILE.toml'), text.start_s)}")
    text = to_scenario(smallest.schedule, f"shrunk-seed-{spec.seed}", doc, text.scenario.targets, text.start_s)
    scenario_path.write_text(text.toml)
    log(f"scenario: {scenario_path} ({len(text.scenario.steps)} steps over {text.span_s:g} s)")
    log(f"real run: {command}" + (f" (with the mutant {mutant}'s node code: --node-code, as kafkaesque mutate "
                                   "runs it)" if mutant else ""))


def real_run_command(spec: TestSpec, cand: Candidate, scenario_path: Path, start_s: float) -> str:
    """`kafkaesque run` of the scenario with the simulated run's settings; its delay (the first fault's time)
    through --nemesis-interval, which the runner passes to the scenario nemesis as its delay."""
    return (f"kafkaesque run --cluster local --workload {spec.workload} --nemesis scenario:{scenario_path} "
            f"--nemesis-interval {max(start_s, 0.001):g} --time-limit {math.ceil(cand.time_limit):d} --concurrency "
            f"{cand.concurrency} --rate {cand.rate:g} --recovery-wait {spec.recovery_wait:g}{shared_flags(spec)}")
