"""A simulated run's fault schedule as data: what `kafkaesque sim` drew (or was given), and the scenario file
that replays it against real processes.

A schedule is a list of steps, each: the virtual second of the main phase it starts at, the fault kind (kill,
pause, partition, lossy-crash, clock, cut), the node, how long it holds (its stop follows), for a clock jump the
jump, for a cut the peer the node is cut off from (a node, or "controllers": every controller), and when the
fault came from another nemesis than its kind's own (the simulated protocol moves: "protocol") that nemesis
(`by`, as the fault ledger records it). Steps may overlap: harness/simulate.py's SimNemesis draws them one at
a time (`--nemesis-schedule sequential`), or overlapping, several held at once (`mix`, and the protocol moves'
sequences: a follower cut off while the leader is killed). It ends
at `end_s`: the virtual second the nemesis was done (a drawn schedule's last wait may run past the time
limit, and the run waits for it, so a replay waits as long). The same seed and the same schedule give the
same run: a replay sleeps to the same virtual times and applies the same faults (play()).

As a file (JSON, the run dir's fault-schedule.json, `kafkaesque sim --schedule FILE`):

    {"steps": [{"at_s": 3.2, "fault": "kill", "node": "broker-2", "duration_s": 1.8},
               {"at_s": 4.0, "fault": "cut", "node": "broker-3", "duration_s": 6.0, "peer": "controllers",
                "by": "protocol"}, ...], "end_s": 61.5}

to_scenario() writes the same faults in the step vocabulary of nemesis/scenario_steps.py with fixed node
names (a node name is a valid target of every act: `{do = "kill", node = "broker-2"}`) and timed `sleep`
steps between them, for `kafkaesque run --nemesis scenario:FILE.toml`. Faults that vocabulary cannot
express (a clock jump) are left out and named in what to_scenario() returns, never dropped silently. One
fault differs in kind: the simulator's partition cuts the node off from the clients too, the scenario's
`isolate` from the other nodes only (nemesis/grudge.py isolate); and the scenario's `heal` of a node ends
every cut of that node, so overlapping cuts of one node end together there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kafkaesque_harness.nemesis.scenario_steps import CONTROLLERS, Scenario, Step, act, cut, sleep

SCHEDULE_FILE = "fault-schedule.json"  # in a simulated run's dir
SCHEDULE_FAULTS = ("kill", "pause", "partition", "lossy-crash", "clock", "cut")
# How each fault the scenario vocabulary has is started and stopped there; a fault kind absent from this
# table has no scenario step and is reported as dropped (to_scenario()).
SCENARIO_STEPS = {"kill": ("kill", "start"), "lossy-crash": ("lossy-crash", "start"), "pause": ("pause", "resume"),
                  "partition": ("isolate", "heal"), "cut": ("cut", "heal")}


class ScheduleError(ValueError):
    """A schedule file that cannot run; one sentence naming the step and the fix."""


@dataclass(frozen=True)
class FaultStep:
    at_s: float          # virtual seconds since the main phase began
    fault: str           # one of SCHEDULE_FAULTS
    node: str            # controller-N or broker-N
    duration_s: float    # until its stop
    delta_s: float = 0.0  # clock: the jump of the node's wall clock
    peer: str = ""        # cut: the node cut off from `node` both ways, or "controllers"
    by: str = ""          # the nemesis that drew it when not its kind's own ("protocol")

    @property
    def end_s(self) -> float:
        return self.at_s + self.duration_s

    def describe(self) -> str:
        jump = f" by {self.delta_s:+.1f} s" if self.fault == "clock" else ""
        peer = f" from {self.peer}" if self.fault == "cut" else ""
        by = f" ({self.by})" if self.by else ""
        return f"{self.at_s:7.2f} s  {self.fault} {self.node}{peer}{jump} for {self.duration_s:.2f} s{by}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key, used in (("delta_s", self.fault == "clock"), ("peer", self.fault == "cut"), ("by", bool(self.by))):
            if not used:
                del d[key]
        return d


@dataclass
class FaultSchedule:
    steps: list[FaultStep] = field(default_factory=list)
    end_s: float = 0.0

    # --- as data ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"steps": [s.to_dict() for s in self.steps], "end_s": self.end_s}

    @classmethod
    def from_dict(cls, d: Any, where: str = "the schedule") -> FaultSchedule:
        if not isinstance(d, dict) or not isinstance(d.get("steps"), list):
            raise ScheduleError(f"{where} is not a schedule; write {{\"steps\": [{{\"at_s\": 3, \"fault\": \"kill\", "
                                "\"node\": \"broker-2\", \"duration_s\": 2}}], \"end_s\": 30}}.")
        steps = [_step(raw, f"step {i} of {where}") for i, raw in enumerate(d["steps"], 1)]
        for i, (a, b) in enumerate(zip(steps, steps[1:], strict=False), 2):
            if b.at_s < a.at_s:
                raise ScheduleError(f"step {i} of {where} starts at {b.at_s} s, before step {i - 1} ({a.at_s} s); "
                                    "list the steps in the order they start.")
        for a, b in _overlaps(steps)[:1]:
            raise ScheduleError(f"{where} holds two {a.fault} faults of {a.node} at once (from {a.at_s} s and from "
                                f"{b.at_s} s); a node has one fault of a kind at a time: move one later.")
        end_s = d.get("end_s", max((s.end_s for s in steps), default=0.0))
        if not isinstance(end_s, int | float) or isinstance(end_s, bool):
            raise ScheduleError(f"end_s of {where} is {end_s!r}; give a number of virtual seconds.")
        return cls(steps, max([float(end_s), *(s.end_s for s in steps)]))

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> FaultSchedule:
        p = Path(path)
        try:
            d = json.loads(p.read_text())
        except FileNotFoundError:
            raise ScheduleError(f"schedule file {p} does not exist; give a run dir's {SCHEDULE_FILE}.") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ScheduleError(f"cannot read schedule file {p} ({e}); fix the file's JSON.") from None
        return cls.from_dict(d, str(p))

    def kinds(self) -> list[str]:
        """The nemeses that drew the steps (a run's `--nemesis`): each step's `by`, or its fault kind."""
        return sorted({s.by or s.fault for s in self.steps})

    def nodes(self) -> list[str]:
        return sorted({s.node for s in self.steps} | {s.peer for s in self.steps if s.peer and s.peer != CONTROLLERS})

    def events(self) -> list[tuple[float, bool, FaultStep]]:
        """(virtual second, start?, step) in the order play() applies them: by time; at one time the stops of
        faults that held before the starts (a sequential schedule's stop and next start), a fault that holds
        no time stopped right after its own start; otherwise in the steps' order."""
        keyed = []
        for i, s in enumerate(self.steps):
            keyed.append(((s.at_s, 1, i), (s.at_s, True, s)))
            keyed.append(((s.end_s, 0 if s.duration_s > 0 else 2, i), (s.end_s, False, s)))
        return [event for _, event in sorted(keyed, key=lambda k: k[0])]

    def describe(self) -> list[str]:
        return [s.describe() for s in self.steps] or ["(no faults)"]

    # --- what a shrinker may change --------------------------------------------------------------------------
    def without(self, drop: set[int]) -> FaultSchedule:
        return FaultSchedule([s for i, s in enumerate(self.steps) if i not in drop], self.end_s)

    def with_step(self, i: int, step: FaultStep) -> FaultSchedule:
        return FaultSchedule([step if j == i else s for j, s in enumerate(self.steps)], self.end_s)

    def shifted(self, by_s: float) -> FaultSchedule:
        """Every fault `by_s` later (earlier when negative, but none before the main phase begins)."""
        by_s = max(by_s, -min((s.at_s for s in self.steps), default=0.0))
        if by_s == 0.0:
            return self
        return FaultSchedule([replace(s, at_s=s.at_s + by_s) for s in self.steps], max(0.0, self.end_s + by_s))

    def cut_at(self, time_limit_s: float) -> FaultSchedule:
        """The steps that start before `time_limit_s`, ending when the last of them stops (or at the limit)."""
        kept = [s for s in self.steps if s.at_s < time_limit_s]
        return FaultSchedule(kept, max([time_limit_s, *(s.end_s for s in kept)]))

    # --- the replay ------------------------------------------------------------------------------------------
    async def play(self, nemesis: Any, t0: float, now: Callable[[], float]) -> None:
        """Apply the steps at their virtual times through `nemesis` (SimNemesis's start(kind, node, delta_s) and
        stop(kind, node, record)); `t0`: the virtual time the main phase began. Overlapping steps hold together."""
        records: dict[int, Any] = {}
        for at_s, starts, step in self.events():
            await asyncio.sleep(max(0.0, t0 + at_s - now()))
            if starts:
                records[id(step)] = nemesis.start(step.fault, step.node, step.delta_s, peer=step.peer, by=step.by)
            else:
                nemesis.stop(step.fault, step.node, records.pop(id(step)))
        await asyncio.sleep(max(0.0, t0 + self.end_s - now()))


def _step(raw: Any, where: str) -> FaultStep:
    if not isinstance(raw, dict):
        raise ScheduleError(f"{where} is not an object; write it as {{\"at_s\": ..., \"fault\": ..., ...}}.")
    extra = set(raw) - {"at_s", "fault", "node", "duration_s", "delta_s", "peer", "by"}
    if extra:
        raise ScheduleError(f"{where} has unknown key {sorted(extra)[0]!r}; valid: at_s, fault, node, duration_s, "
                            "delta_s, peer, by.")
    if raw.get("fault") not in SCHEDULE_FAULTS:
        raise ScheduleError(f"{where} has fault {raw.get('fault')!r}; valid: {', '.join(SCHEDULE_FAULTS)}.")
    node = raw.get("node")
    if not _node_name(node):
        raise ScheduleError(f"{where} names node {node!r}; give a node name (broker-N, controller-N).")
    peer, by = raw.get("peer", ""), raw.get("by", "")
    if raw["fault"] == "cut" and not (peer == CONTROLLERS or _node_name(peer)) or raw["fault"] != "cut" and peer:
        raise ScheduleError(f"{where} has peer {peer!r}; a cut names its peer (a node name, or \"controllers\"), "
                            "no other fault has one.")
    if not isinstance(by, str):
        raise ScheduleError(f"{where} has by {by!r}; give the nemesis's name, or leave it out.")
    numbers = {k: raw.get(k, 0.0) for k in ("at_s", "duration_s", "delta_s")}
    for k, v in numbers.items():
        if not isinstance(v, int | float) or isinstance(v, bool) or (k != "delta_s" and v < 0):
            raise ScheduleError(f"{where}: {k} is {v!r}; give a number of seconds" +
                                (", 0 or more." if k != "delta_s" else "."))
    return FaultStep(float(numbers["at_s"]), raw["fault"], node, float(numbers["duration_s"]),
                     float(numbers["delta_s"]), peer, by)


def _node_name(name: Any) -> bool:
    return isinstance(name, str) and name.partition("-")[2].isdigit() and \
        name.partition("-")[0] in ("broker", "controller")


def _overlaps(steps: list[FaultStep]) -> list[tuple[FaultStep, FaultStep]]:
    """Pairs of steps holding the same fault kind on the same node (and peer) at once: which stop would end
    which is then ambiguous."""
    out = []
    for i, a in enumerate(steps):
        out += [(a, b) for b in steps[i + 1:] if (b.fault, b.node, b.peer) == (a.fault, a.node, a.peer)
                and b.at_s < a.end_s - 1e-9]  # a float's last digit aside
    return out


class ScheduleRecorder:
    """What a drawn run's nemesis applied, as a FaultSchedule: started() at each fault's start, stopped() at its
    stop, finished() when the nemesis is done; times from `now()`, relative to `t0`."""

    def __init__(self, now: Callable[[], float], t0: float):
        self.now, self.t0 = now, t0
        self.schedule = FaultSchedule()
        self._open: list[FaultStep] = []

    def started(self, fault: str, node: str, delta_s: float = 0.0, peer: str = "", by: str = "") -> None:
        self._open.append(FaultStep(self.now() - self.t0, fault, node, 0.0, delta_s, peer, by))

    def stopped(self, fault: str, node: str, peer: str = "") -> None:
        for i, s in enumerate(self._open):
            if s.fault == fault and s.node == node and s.peer == peer:
                del self._open[i]
                self.schedule.steps.append(replace(s, duration_s=self.now() - self.t0 - s.at_s))
                return

    def finished(self) -> FaultSchedule:
        """The schedule, its faults in start order; one never stopped lasts until now (the final heal)."""
        end = self.now() - self.t0
        self.schedule.steps += [replace(s, duration_s=end - s.at_s) for s in self._open]
        self._open = []
        self.schedule.steps.sort(key=lambda s: s.at_s)  # stable: faults started at one time stay in start order
        self.schedule.end_s = end
        return self.schedule


# --- as a scenario ----------------------------------------------------------------------------------------------
@dataclass
class ScenarioText:
    scenario: Scenario
    toml: str
    dropped: list[str]   # one line per fault left out, naming it and why
    span_s: float        # seconds from the scenario's first step to its last
    start_s: float       # where in the main phase its first step belongs: the scenario's delay to run it with


def to_scenario(schedule: FaultSchedule, name: str, doc: str, targets: tuple[str, ...] = (),
                start_s: float | None = None) -> ScenarioText:
    """The schedule as a scenario of fixed node names and timed sleeps. It starts `start_s` into the main phase
    (nemesis/scenario.py's delay, which `kafkaesque run` takes from --nemesis-interval; default: when the
    schedule's first fault it can express starts), each fault at its own time after that, a fault the schedule
    starts before `start_s` at once."""
    steps: list[Step] = []
    dropped = [f"{s.fault} on {s.node} at {s.at_s:.2f} s: the scenario vocabulary has no {s.fault} step "
               "(nemesis/scenario_steps.py ACTIONS)" for s in schedule.steps if s.fault not in SCENARIO_STEPS]
    if start_s is None:
        start_s = round(next((s.at_s for s in schedule.steps if s.fault in SCENARIO_STEPS), 0.0), 3)
    clock = start_s
    for at_s, starts, s in FaultSchedule([s for s in schedule.steps if s.fault in SCENARIO_STEPS]).events():
        gap = round(at_s - clock, 3)
        if gap > 0:
            steps.append(sleep(gap))
            clock = at_s
        begin, end = SCENARIO_STEPS[s.fault]
        if not starts:
            steps.append(act(end, s.node))
        elif s.fault == "cut":
            steps.append(cut(s.node, s.peer))
        else:
            steps.append(act(begin, s.node))
    if not steps:
        raise ScheduleError("no fault of the schedule has a scenario step (" + "; ".join(dropped) + ")")
    return ScenarioText(Scenario(name, doc, tuple(steps), needs_isolated_nodes=any(
        st.do in ("isolate", "lossy-crash", "cut") for st in steps), targets=targets), _toml(name, doc, targets, steps),
        dropped, round(clock - start_s, 3), start_s)


def _toml(name: str, doc: str, targets: tuple[str, ...], steps: list[Step]) -> str:
    lines = [f"name = {json.dumps(name, ensure_ascii=False)}", f"doc = {json.dumps(doc, ensure_ascii=False)}"]
    if targets:
        lines.append("targets = [" + ", ".join(json.dumps(t) for t in targets) + "]")
    lines.append("steps = [")
    for st in steps:
        if st.do == "sleep":
            lines.append(f"  {{do = \"sleep\", seconds = {st.seconds!r}}},")
        elif st.do == "cut":
            lines.append(f"  {{do = \"cut\", node = {json.dumps(st.node)}, peer = {json.dumps(st.peer)}}},")
        else:
            lines.append(f"  {{do = {json.dumps(st.do)}, node = {json.dumps(st.node)}}},")
    lines.append("]")
    return "\n".join(lines) + "\n"
