"""Campaign files: a TOML matrix of runs, read and checked in full before anything starts.

A campaign is one `[campaign]` table. Three kinds of keys live in it:

- the campaign's own: `name`, `repetitions`, `budget` (total seconds), `seed` (the base
  seed: run i gets seed + i, so a campaign replays run by run), `require` (protocol states,
  e.g. ["isr-shrunk-to-one", "elr-election"], that some run must reach, or the campaign
  exits 2: it did not test what it was for);
- matrix axes, each a list: `workloads`, `nemeses` (each entry a comma list such as
  "kill,pause", "" for no faults), `broker_variants`, `acks`, `flush_policies`; an axis left
  out is the single default value of `kafkaesque run`;
- base settings: any other setting of `kafkaesque run` (TestSpec.setting_names()) (`time_limit`, `brokers`, `min_isr`, `rate`,
  `concurrency`, `cluster`, ...), the same for every run.

The matrix expands repetition by repetition (every cell once, then every cell again), so
when the budget runs out it is later repetitions that are skipped, not whole cells.

Every mistake a user can make in the file is a CampaignFileError whose message is one
sentence naming the key and the fix; nothing is run until the whole file has passed.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from kafkaesque_harness.harness.spec import TestSpec

# The campaign's own keys (besides the axes and the TestSpec settings).
CAMPAIGN_KEYS = ("name", "repetitions", "budget", "seed", "require")
# Axis key -> the setting each entry sets.
AXES = {"workloads": "workload", "nemeses": "nemesis", "broker_variants": "broker_variant",
        "acks": "acks", "flush_policies": "flush_policy"}
# Settings a campaign sets itself, or that make no sense for a series of unattended runs.
_NOT_SETTINGS = {"name", "store", "seed", "leave_running", *AXES.values()}
SETTING_KEYS = tuple(n for n in TestSpec.setting_names() if n not in _NOT_SETTINGS)
ACKS = ("all", "1", "0", "-1")
# A campaign name is a folder of the store: <store>/<name>/ and <store>/campaigns/<name>/.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED_NAMES = ("campaigns",)  # <store>/campaigns/ holds the campaign directories themselves


class CampaignFileError(ValueError):
    """A campaign file that cannot be run; the message is one sentence naming the key and the fix."""


@dataclass(frozen=True)
class Cell:
    """One point of the matrix; its repetitions are the runs of that cell."""

    workload: str
    nemesis: tuple[str, ...]
    broker_variant: str
    acks: str
    flush_policy: str

    @property
    def nemesis_label(self) -> str:
        return ",".join(self.nemesis) or "none"

    @property
    def row(self) -> str:
        """The index page's row: what the clients do and which faults hit them."""
        return f"{self.workload}|{self.nemesis_label}"

    @property
    def column(self) -> str:
        """The index page's column: which broker, and how durable an acknowledgement is."""
        return f"{self.broker_variant}|acks={self.acks}|flush={self.flush_policy}"

    @property
    def id(self) -> str:
        return f"{self.row}|{self.column}"


@dataclass
class PlannedRun:
    index: int        # 0.. in the order runs start
    cell: Cell
    repetition: int   # 1..repetitions
    spec: TestSpec

    @property
    def id(self) -> str:
        """A readable, unique name: "queue|kill,pause|unclean-election|acks=all|flush=never|rep1"."""
        return f"{self.cell.id}|rep{self.repetition}"

    def summary(self) -> dict[str, Any]:
        """What campaign.json records of the spec: the matrix coordinates and what varies per run."""
        s = self.spec
        return {"workload": s.workload, "nemesis": list(s.nemesis), "broker_variant": s.broker.broker_variant,
                "acks": s.acks, "flush_policy": s.broker.flush_policy, "repetition": self.repetition, "seed": s.seed,
                "time_limit": s.time_limit, "cluster": s.cluster}


@dataclass
class Campaign:
    name: str
    source: str
    repetitions: int
    budget: float                 # seconds for the whole campaign
    seed: int
    settings: dict[str, Any]      # the base settings as the file gave them
    axes: dict[str, list[str]]    # every axis, defaults filled in
    runs: list[PlannedRun] = field(default_factory=list)
    require: tuple[str, ...] = ()  # protocol states some run must reach (checkers/coverage.py), else exit 2

    @property
    def cluster(self) -> str:
        return self.runs[0].spec.cluster if self.runs else "auto"

    def matrix(self) -> dict[str, Any]:
        return {"axes": self.axes, "repetitions": self.repetitions, "budget": self.budget, "seed": self.seed,
                "settings": self.settings}


def load_campaign(path: str | Path, store: str = "store", cluster: str | None = None) -> Campaign:
    """Read, check and expand a campaign file; `cluster`, when given, overrides the file's."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise CampaignFileError(f"campaign file {p} does not exist; pass the path of a campaign TOML file.") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CampaignFileError(f"cannot read campaign file {p} ({e}); pass a readable TOML file.") from None
    except tomllib.TOMLDecodeError as e:
        raise CampaignFileError(f"{p} is not valid TOML ({e}); fix the syntax there.") from None
    return parse_campaign(doc, source=str(p), store=store, cluster=cluster)


def parse_campaign(doc: dict[str, Any], source: str = "<campaign>", store: str = "store",
                   cluster: str | None = None) -> Campaign:
    """Check a parsed campaign document and expand its matrix into runs (pure: starts nothing)."""
    extra = [k for k in doc if k != "campaign"]
    if extra:
        raise CampaignFileError(f"unknown table or key {extra[0]!r} at the top of {source}; put every key under "
                                f"the [campaign] table.")
    table = doc.get("campaign")
    if not isinstance(table, dict):
        raise CampaignFileError(f"{source} has no [campaign] table; start the file with [campaign] and put "
                                f"name, the matrix axes and the settings under it.")
    for key in table:
        if key not in CAMPAIGN_KEYS and key not in AXES and key not in SETTING_KEYS:
            raise CampaignFileError(_unknown_key_sentence(key))
    name = _campaign_name(table)
    repetitions = _typed(table, "repetitions", int, 1)
    if repetitions < 1:
        raise CampaignFileError(f"key 'repetitions' is {repetitions}; set it to 1 or more.")
    budget = float(_typed(table, "budget", float, 3600.0))
    if budget <= 0:
        raise CampaignFileError(f"key 'budget' is {budget:g}; set it to the campaign's total seconds, above 0.")
    base_seed = _typed(table, "seed", int, 0)
    settings = {k: table[k] for k in SETTING_KEYS if k in table}
    base = _base_spec(settings, name, store)
    if cluster is not None:
        base.cluster = cluster  # the command line wins over the file
    _check_settings(base, from_file="cluster" in settings and cluster is None)
    axes = {key: _axis(table, key) for key in AXES}
    campaign = Campaign(name, source, repetitions, budget, base_seed, settings, axes, require=_required_states(table))
    campaign.runs = expand(campaign, base)
    return campaign


def expand(campaign: Campaign, base: TestSpec) -> list[PlannedRun]:
    """Every cell once per repetition, repetition-major; run i gets seed base_seed + i."""
    a = campaign.axes
    cells = [Cell(w, _faults(n), v, k, f) for w, n, v, k, f in
             product(a["workloads"], a["nemeses"], a["broker_variants"], a["acks"], a["flush_policies"])]
    runs = []
    for rep in range(1, campaign.repetitions + 1):
        for cell in cells:
            i = len(runs)
            spec = base.with_settings(workload=cell.workload, nemesis=list(cell.nemesis),
                                      broker_variant=cell.broker_variant, acks=cell.acks,
                                      flush_policy=cell.flush_policy, seed=campaign.seed + i,
                                      workload_options=dict(base.workload_options),
                                      nemesis_options=dict(base.nemesis_options))
            runs.append(PlannedRun(i, cell, rep, spec))
    return runs


# --- checks, each ending in one sentence -----------------------------------------------------------

def _unknown_key_sentence(key: str) -> str:
    singular = {v: k for k, v in AXES.items()}
    if key in singular:
        return (f"key {key!r} is a matrix axis in a campaign; write it as a list named {singular[key]!r}, "
                f"e.g. {singular[key]} = [...].")
    if key in _NOT_SETTINGS:
        return f"key {key!r} cannot be set in a campaign (the campaign sets it for each run); remove it."
    valid = CAMPAIGN_KEYS + tuple(AXES) + SETTING_KEYS
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(valid)}."
    return f"unknown key {key!r} in [campaign]; {hint}"


def _required_states(table: dict[str, Any]) -> tuple[str, ...]:
    """`require = ["isr-shrunk-to-one", ...]`: the protocol states the campaign exists to reach."""
    from kafkaesque_harness.checkers.coverage import STATES

    value = table.get("require", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CampaignFileError('key \'require\' must be a list of state names; write e.g. require = '
                                '["isr-shrunk-to-one", "elr-election"].')
    unknown = [v for v in value if v not in STATES]
    if unknown:
        raise CampaignFileError(f"key 'require' names {unknown[0]!r}, which is not a state the harness can see; "
                                f"valid: {', '.join(STATES)}.")
    return tuple(dict.fromkeys(value))


def _campaign_name(table: dict[str, Any]) -> str:
    if "name" not in table:
        raise CampaignFileError('key \'name\' is missing from [campaign]; add e.g. name = "nightly".')
    name = _typed(table, "name", str, "")
    if not _NAME_RE.match(name) or name in RESERVED_NAMES:
        raise CampaignFileError(f"key 'name' is {name!r}, which cannot be a store folder; use letters, digits, "
                                f"'.', '_' and '-' (not {', '.join(RESERVED_NAMES)}).")
    return name


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a table"}


def _typed(table: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """table[key] if it has the kind's type (an int is a fine float; a bool is never a number)."""
    if key not in table:
        return default
    value = table[key]
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        example = {int: "3", float: "60", str: '"text"', bool: "true", dict: "{}"}[kind]
        raise CampaignFileError(f"key {key!r} must be {_TYPE_WORDS[kind]}, not {_toml_type(value)} "
                                f"({value!r}); write e.g. {key} = {example}.")
    return value


def _toml_type(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _base_spec(settings: dict[str, Any], name: str, store: str) -> TestSpec:
    """The TestSpec every run starts from: defaults, then the file's settings, each type-checked."""
    defaults = TestSpec().settings()
    values: dict[str, Any] = {}
    for key in settings:
        default = defaults[key]
        kind = dict if isinstance(default, dict) else type(default)
        value = _typed(settings, key, kind, default)
        values[key] = float(value) if kind is float else value
    return TestSpec.make(name=name, store=store, **values)


def _check_settings(spec: TestSpec, from_file: bool) -> None:
    """The checks `kafkaesque run` makes on its flags (TestSpec.problems), worded for the file's keys."""
    from kafkaesque_harness.clusters.cluster_file import is_cluster_file
    from kafkaesque_harness.harness.spec import CLUSTER_NAMES, SSH_PREFIX, cluster_problem

    if spec.cluster.startswith(SSH_PREFIX) or is_cluster_file(spec.cluster):
        problem = cluster_problem(spec.cluster)  # the node or cluster file itself, checked before anything runs
        if problem:
            raise CampaignFileError(problem + ".")
        file_brokers = spec.cluster_file_brokers()
        if file_brokers is not None:
            spec.take_file_brokers(file_brokers)  # the file decides how many brokers, as for `kafkaesque run`
    elif spec.cluster not in CLUSTER_NAMES:
        where = "key 'cluster'" if from_file else "--cluster"
        raise CampaignFileError(f"{where} is {spec.cluster!r}, which is not one of {', '.join(CLUSTER_NAMES)}; "
                                f"pick one of those.")
    problems = spec.problems("key")
    if problems:
        raise CampaignFileError(problems[0])


def _axis(table: dict[str, Any], key: str) -> list[str]:
    """One matrix axis: a non-empty list of distinct, known strings; left out, the run command's default."""
    if key not in table:
        default = TestSpec().settings()[AXES[key]]
        return [",".join(default)] if isinstance(default, list) else [default]
    values = table[key]
    example = {"workloads": '["queue"]', "nemeses": '["kill,pause", ""]', "broker_variants": '["default", "no-elr"]',
               "acks": '["all", "1"]', "flush_policies": '["never", "every-write"]'}[key]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise CampaignFileError(f"key {key!r} must be a list of strings; write e.g. {key} = {example}.")
    if not values:
        extra = ' ("" stands for no faults)' if key == "nemeses" else ""
        raise CampaignFileError(f"matrix axis {key!r} is empty, so the matrix has no runs; list at least one "
                                f"value{extra}, e.g. {key} = {example}.")
    seen: set[str] = set()
    for v in values:
        norm = ",".join(_faults(v)) if key == "nemeses" else v
        if norm in seen:
            raise CampaignFileError(f"matrix axis {key!r} lists {v!r} twice; list each value once "
                                    f"(use 'repetitions' to repeat runs).")
        seen.add(norm)
        _check_axis_value(key, v)
    return [",".join(_faults(v)) for v in values] if key == "nemeses" else list(values)


def _check_axis_value(key: str, value: str) -> None:
    from kafkaesque_harness.clusters.broker import parse_flush_policy
    from kafkaesque_harness.clusters.reference import BROKER_VARIANTS
    from kafkaesque_harness.nemesis.registry import nemesis_problem
    from kafkaesque_harness.workloads.registry import WORKLOAD_NAMES

    if key == "workloads" and value not in WORKLOAD_NAMES:
        raise CampaignFileError(f"unknown workload {value!r} in 'workloads'; valid: {', '.join(WORKLOAD_NAMES)}.")
    if key == "nemeses":
        problem = nemesis_problem(_faults(value), where=f" in 'nemeses' entry {value!r}")
        if problem:
            raise CampaignFileError(f"{problem} (comma-separated, \"\" for none).")
    if key == "broker_variants" and value not in BROKER_VARIANTS:
        raise CampaignFileError(f"unknown broker variant {value!r} in 'broker_variants'; valid: "
                                f"{', '.join(BROKER_VARIANTS)}.")
    if key == "acks" and value not in ACKS:
        raise CampaignFileError(f"acks value {value!r} in 'acks' is not one of {', '.join(ACKS)}; "
                                f'write them as strings, e.g. acks = ["all", "1"].')
    if key == "flush_policies":
        try:
            parse_flush_policy(value)
        except ValueError as e:
            raise CampaignFileError(f"bad entry in 'flush_policies': {e}.") from None


def _faults(entry: str) -> tuple[str, ...]:
    """"kill, pause" -> ("kill", "pause"); "" -> () (no faults)."""
    return tuple(n.strip() for n in entry.split(",") if n.strip())
