"""Nemeses by name (`--nemesis kill,pause`), composed into one that the runner drives."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused, SelfDriven
from kafkaesque_harness.nemesis.fault import FaultKind, Option
from kafkaesque_harness.nemesis.kinds import all_kinds
from kafkaesque_harness.nemesis.plan import Event, Plan, timed
from kafkaesque_harness.nemesis.requirements import can


def nemesis_names() -> tuple[str, ...]:
    """Every fault kind's name: each module of nemesis/kinds/ that defines KIND (nemesis/fault.py).
    Nothing to edit here to add one."""
    return tuple(all_kinds())


SCENARIO_PREFIX = "scenario:"  # `--nemesis scenario:NAME` runs one protocol-aware scenario (nemesis/scenario.py)


def scenario_names() -> tuple[str, ...]:
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    return tuple(SCENARIO_PREFIX + s for s in SCENARIOS)


def nemesis_help() -> str:
    """The --nemesis help: the kinds' names, from the kinds themselves."""
    driven = [n for n, k in all_kinds().items() if k.self_driven]
    return (f"comma list of faults: {', '.join(n for n, k in all_kinds().items() if not k.self_driven)}; with at "
            f"most one of {', '.join(driven)} or scenario:NAME among them, which times its own faults while the "
            "others run at random (`kafkaesque faults` says what each does)")


def nemesis_problem(names: list[str], where: str = "") -> str | None:
    """Why this list of nemesis names cannot run, in one sentence, or None: the one check the CLI
    and campaign files share (`where` says where the names came from)."""
    files = [n for n in names if n.startswith(SCENARIO_PREFIX) and n.endswith(".toml")]
    bad = [n for n in names if n not in nemesis_names() and n not in scenario_names() and n not in files]
    if bad:
        return (f"unknown nemesis {', '.join(map(repr, bad))}{where}; valid: {', '.join(nemesis_names())}, "
                f"one of {', '.join(scenario_names())}, or scenario:FILE.toml")
    for n in files:
        from kafkaesque_harness.nemesis.scenario_steps import ScenarioFileError, load_scenario_file

        try:
            load_scenario_file(n[len(SCENARIO_PREFIX):])
        except ScenarioFileError as e:
            return str(e).rstrip(".") + where
    driven = [n for n in names if n.startswith(SCENARIO_PREFIX) or (n in nemesis_names() and all_kinds()[n].self_driven)]
    if len(driven) > 1:
        return (f"{' and '.join(driven)} each time their own faults against the cluster's state and would bind "
                f"the same roles: give one of them{where} (random faults may run beside it)")
    return None


def nemesis_option(key: str) -> tuple[FaultKind, Option] | None:
    """The kind that declares option `key`, and the option."""
    for k in all_kinds().values():
        for o in k.options:
            if o.key == key:
                return k, o
    return None


def parse_nemesis_options(pairs: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`KEY=VALUE` texts (--nemesis-option) as typed options, and one sentence per text that is not one."""
    out: dict[str, Any] = {}
    problems = []
    for text in pairs:
        key, eq, value = text.partition("=")
        found = nemesis_option(key.strip())
        if not eq or found is None:
            problems.append(f"--nemesis-option {text!r} is not KEY=VALUE with a KEY a fault declares; valid keys: "
                            f"{', '.join(o.key for k in all_kinds().values() for o in k.options)}.")
            continue
        try:
            out[key.strip()] = found[1].parse(value.strip())
        except ValueError as e:
            problems.append(f"--nemesis-option {text!r}: {value.strip()!r} {e}; {found[1].help}.")
    return out, problems


def nemesis_options_problems(options: dict[str, Any]) -> list[str]:
    """One sentence per option no fault kind declares, or whose value its kind refuses (a campaign's
    options may belong to faults that only some of its runs have)."""
    out = []
    for key, value in options.items():
        found = nemesis_option(key)
        if found is None:
            out.append(f"unknown nemesis option {key!r}; valid: "
                       f"{', '.join(o.key for k in all_kinds().values() for o in k.options)}.")
        elif (why := found[1].problem(value)):
            out.append(f"nemesis option {key!r} = {value!r} {why}; {found[1].help}.")
    return out


def _make_one(name: str, options: dict[str, Any]):
    if name.startswith(SCENARIO_PREFIX):
        from kafkaesque_harness.nemesis.scenario import ScenarioNemesis

        return ScenarioNemesis(name[len(SCENARIO_PREFIX):], options)
    if name not in nemesis_names():
        raise ValueError(f"unknown nemesis {name!r}; valid: {', '.join(nemesis_names())}")
    kind = all_kinds()[name]
    return kind.make({**kind.defaults(), **options})  # the kind's declared defaults, then what the run set


class CompositeNemesis(NemesisBase):
    """Several nemeses as one: ops dispatch by name; teardown heals every part, whatever fails, then
    whatever the run's ledger still holds active."""

    name = "composite"

    def __init__(self, parts: list):
        self.parts = parts

    def plans(self, cluster, events: Iterable[Event]) -> list[Plan]:
        """The plan of the part that times its own faults (a scenario, the protocol nemesis), and beside it
        the run's random schedule for the start/stop pairs of every other part: the scheduler runs them
        together, each step when it is due."""
        plans = [p.own_plan(cluster) for p in self.parts if can(p, SelfDriven)]
        if self.pairs():
            plans.append(timed(events, self, cluster))
        return plans

    def pairs(self) -> list[tuple[str, str]]:
        return [pair for p in self.parts for pair in p.pairs()]

    def schedule(self) -> list[tuple[str, str]]:
        """The start/stop pairs of every part, for the runner's NemesisSchedule."""
        return self.pairs()

    @property
    def not_run(self) -> list[str]:
        """What the parts left out for what the nodes lack (results.json `faults_not_run`)."""
        return [x for p in self.parts for x in p.not_run]

    def fs(self) -> set[str]:
        return set().union(*(p.fs() for p in self.parts)) if self.parts else set()

    def setup(self, cluster, faults) -> None:
        # What the nodes or the cluster cannot do is refused for every part before any part is set up
        # (nemesis/requirements.py), so a refusal never leaves a half-prepared fault behind: first what
        # a node lacks (the probe names the node, the tool and its fix), then the abilities the kinds
        # declare that the cluster as a whole does not have.
        caps = cluster.capabilities
        if caps:
            for p in self.parts:
                why = p.capability_refusal(cluster, caps)
                if why:
                    raise NemesisRefused(why)
        for p in self.parts:
            why = p.ability_refusal(cluster)
            if why:
                raise NemesisRefused(why)
        self.faults = faults
        for p in self.parts:
            p.setup(cluster, faults)

    def invoke(self, cluster, op: Op) -> Op:
        for p in self.parts:
            if op.f in p.fs():
                return p.invoke(cluster, op)
        raise ValueError(f"no nemesis handles {op.f!r}")

    def teardown(self, cluster) -> list[str]:
        errors = []

        def heal(p) -> None:
            try:
                p.teardown(cluster)
            except Exception as e:  # noqa: BLE001 - keep healing the others
                errors.append(f"{p.name}: {type(e).__name__}: {e}")

        # Parts marked heal_last (membership) wait for every broker, so the others heal first, and the
        # ledger then undoes whatever is still active, whoever did it (a part whose own heal failed).
        for p in [p for p in self.parts if not p.heal_last]:
            heal(p)
        if self.faults is not None:
            errors += self.faults.heal_everything()
        for p in [p for p in self.parts if p.heal_last]:
            heal(p)
        return errors


def make_nemesis(names: list[str], options: dict[str, Any]) -> CompositeNemesis:
    return CompositeNemesis([_make_one(n, options) for n in names if n])
