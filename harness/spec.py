"""The test spec: everything a run was asked to do, written to test.json (and read back by analyze).

`TestSpec.problems()` is the one check of a spec's settings that `kafkaesque run`, campaign files
and the pytest plugin all make before anything starts: one sentence per bad setting, worded for
where the setting came from (a command-line flag, a campaign file's key, a marker's keyword).
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import re
import subprocess
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.history.extras import DIST, extra_missing
from kafkaesque_harness.results.store import STORE_FORMAT

# How a setting is named in a problem's sentence: "--time-limit -5" on the command line, "key
# 'time_limit' is -5" in a campaign file, "time_limit=-5" for a pytest marker or TestSpec(...).
Style = Literal["flag", "key", "setting"]
ACKS = ("all", "1", "0", "-1")
CLIENTS = ("kafka-python", "confluent-kafka")
OUR_CLUSTERS = ("auto", "local", "docker")
# The run's store folder is <store>/<name>/: one plain folder name (not "..", not a path), and not
# the folder campaign directories live in.
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
RESERVED_NAMES = ("campaigns",)


CLUSTER_NAMES = ("auto", "docker", "local", "FILE.toml", "ssh:FILE.toml")
SSH_PREFIX = "ssh:"


def cluster_problem(name: str) -> str | None:
    """Why `name` is not a --cluster value (one sentence without the full stop), or None."""
    if name in CLUSTER_NAMES[:3]:
        return None
    from kafkaesque_harness.clusters.cluster_file import cluster_file_brokers, is_cluster_file

    if is_cluster_file(name):  # a cluster file of either kind (clusters/cluster_file.py)
        try:
            cluster_file_brokers(name)
        except ClusterError as e:
            return str(e).rstrip(".")
        return None
    if name.startswith(SSH_PREFIX):
        from kafkaesque_harness.clusters.ssh import NodeFileError, load_node_file

        try:
            load_node_file(name[len(SSH_PREFIX):])
        except NodeFileError as e:
            return str(e).rstrip(".")
        return None
    return f"unknown cluster {name!r}; valid: {', '.join(CLUSTER_NAMES)}"


@dataclass
class BrokerSettings:
    """What only our reference broker reads (--cluster local, docker or ssh:): a cluster file's brokers keep
    their own settings, so a run on one refuses any of these away from its default (problems())."""

    controllers: int = 1  # >1: a Raft quorum of controllers (clusters/broker/controller_quorum.py)
    flush_policy: str = "never"
    broker_variant: str = "default"  # a historic flaw of the reference broker (clusters/reference.py)
    unclean_recovery_strategy: str = "balanced"
    # Our broker's replica.fetch.max.bytes and HWM checkpoint interval; 0 keeps the broker's default (4 MiB,
    # 1000 ms). Smaller fetches leave a catching-up follower behind the leader's HWM for several responses.
    replica_fetch_max_bytes: int = 0
    hwm_checkpoint_interval_ms: int = 0
    # A copy of the node code for the nodes to run instead of this tree's (a mutant: studies/mutation.py); "" runs ours.
    node_code: str = ""

    def cluster_spec_fields(self) -> dict[str, Any]:
        """What clusters/base.py's ClusterSpec takes of these."""
        return {"controllers": self.controllers, "flush_policy": self.flush_policy,
                "broker_variant": self.broker_variant, "node_code": self.node_code,
                "broker_config": {"unclean_recovery_strategy": self.unclean_recovery_strategy,
                                  "replica_fetch_max_bytes": self.replica_fetch_max_bytes,
                                  "hwm_checkpoint_interval_ms": self.hwm_checkpoint_interval_ms}}


BROKER_SETTINGS = frozenset(f.name for f in dataclasses.fields(BrokerSettings))


@dataclass
class TestSpec:
    __test__ = False  # not a pytest test class, despite the name

    name: str = "queue"
    workload: str = "queue"
    nemesis: list[str] = field(default_factory=list)
    nemesis_interval: float = 10.0
    nemesis_schedule: str = "mix"  # mix (faults overlap) or sequential (one at a time): harness/generator.py
    nemesis_target: str = "mixed"
    time_limit: float = 60.0
    concurrency: int = 10
    rate: float = 100.0
    brokers: int = 3
    replication_factor: int = 3
    min_isr: int = 2
    partitions: int = 4
    acks: str = "all"
    client: str = "kafka-python"
    cluster: str = "auto"
    broker: BrokerSettings = field(default_factory=lambda: BrokerSettings())
    seed: int = 0
    store: str = "store"
    leave_running: bool = False
    recovery_wait: float = 10.0
    elle: bool = False
    workload_options: dict[str, Any] = field(default_factory=dict)
    nemesis_options: dict[str, Any] = field(default_factory=dict)  # the options fault kinds declare (nemesis/kinds/)

    # --- the settings as one flat namespace: how the CLI, campaign files, the pytest plugin and test.json
    # name them (a broker setting is `flush_policy`, not `broker.flush_policy`)
    @classmethod
    def setting_names(cls) -> list[str]:
        own = [f.name for f in dataclasses.fields(cls) if f.name != "broker"]
        return own + [f.name for f in dataclasses.fields(BrokerSettings)]

    @classmethod
    def make(cls, **settings: Any) -> TestSpec:
        """A spec from flat settings; an unknown name is a TypeError naming the valid ones."""
        unknown = sorted(set(settings) - set(cls.setting_names()))
        if unknown:
            raise TypeError(f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(cls.setting_names()))}")
        return cls().with_settings(**settings)

    def with_settings(self, **settings: Any) -> TestSpec:
        """A copy with these flat settings changed (the broker's go to `broker`)."""
        mine = {k: v for k, v in settings.items() if k not in BROKER_SETTINGS}
        broker = dataclasses.replace(self.broker, **{k: v for k, v in settings.items() if k in BROKER_SETTINGS})
        return dataclasses.replace(self, **mine, broker=broker)

    def settings(self) -> dict[str, Any]:
        """Every setting under its flat name."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "broker"}
        return {**out, **asdict(self.broker)}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.replace(self).settings()  # a copy: the lists and dicts in test.json are its own
        d = json.loads(json.dumps(d))
        d["versions"] = versions()
        d["store_format"] = STORE_FORMAT
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TestSpec:
        """The spec of a stored run (test.json's flat settings; what it holds besides them is left out)."""
        known = set(cls.setting_names())
        return cls().with_settings(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> tuple[TestSpec, list[str]]:
        """The settings of a stored run (its test.json), to repeat it: `kafkaesque run --from RUN_DIR`. A run
        on a cluster file uses that file again (clusters/cluster_file.py cluster_file_for_rerun), or the run
        dir's copy when the file is gone. Returns the spec and notes to print; a ValueError sentence when
        the dir holds no usable test.json."""
        from kafkaesque_harness.clusters.cluster_file import cluster_file_for_rerun

        test_json = Path(run_dir) / "test.json"
        try:
            stored = json.loads(test_json.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"--from {run_dir}: cannot read {test_json} ({type(e).__name__}); give a run dir the "
                             "harness stored (the path `kafkaesque run` prints last)") from None
        if not isinstance(stored, dict):
            raise ValueError(f"--from {run_dir}: {test_json} is not a JSON object; give a stored run dir")
        spec, notes = cls.from_dict(stored), []
        if isinstance(stored.get("cluster_file"), dict):
            try:
                path, note = cluster_file_for_rerun(Path(run_dir), stored["cluster_file"])
            except ClusterError as e:
                raise ValueError(f"--from {run_dir}: {str(e).rstrip('.')}") from None
            spec.cluster = f"{SSH_PREFIX}{path}" if spec.cluster.startswith(SSH_PREFIX) else path
            notes += [note] if note else []
        return spec, notes

    def workload_opts(self) -> dict[str, Any]:
        return {"topic": "queue", "partitions": self.partitions, "client": self.client, **self.workload_options}

    def problems(self, style: Style = "setting", only: Collection[str] | None = None) -> list[str]:
        """One sentence (cause and fix) for every setting this run cannot start with; [] when it can.

        `only` limits the check to those settings (and the relations among them). Reads a cluster
        file or node file named by `cluster` (cluster_problem), and nothing else.
        """
        said = _Wording(style)
        values = self.settings()
        names = [n for n in values if only is None or n in only]
        wrong_type = {n: p for n in names if (p := _type_problem(said, n, values[n]))}
        out = list(wrong_type.values())
        typed = set(names) - set(wrong_type)  # values safe to compare; the others wait for their fix
        out += _choice_problems(self, said, typed)
        for name in ("time_limit", "nemesis_interval"):
            value = values[name]
            if name in typed and not (math.isfinite(value) and value > 0):
                out.append(said.bad(name, value, "is not a number of seconds above 0",
                                    f"set it above 0, e.g. {said.example(name)}"))
        for name in ("rate", "recovery_wait"):
            value = values[name]
            if name in typed and not (math.isfinite(value) and value >= 0):
                out.append(said.bad(name, value, "is not a number of 0 or more",
                                    f"set it to 0 or more, e.g. {said.example(name)}"))
        for name in ("concurrency", "brokers", "partitions"):
            if name in typed and values[name] < 1:
                out.append(said.bad(name, values[name], "is not 1 or more",
                                    f"set it to 1 or more, e.g. {said.example(name)}"))
        if "controllers" in typed:
            if values['controllers'] < 1 or values['controllers'] % 2 == 0:
                out.append(said.bad("controllers", values['controllers'], "is not an odd number of at least 1",
                                    "a Raft quorum needs 1, 3 or 5"))
            elif values['controllers'] > 1 and "cluster" in typed and self.cluster not in OUR_CLUSTERS:
                out.append(said.bad("controllers", values['controllers'], "needs our own cluster (local or docker)",
                                    "a cluster file lists its controllers itself"))
        for name in ("replica_fetch_max_bytes", "hwm_checkpoint_interval_ms"):
            if name not in typed or not values[name]:
                continue
            if values[name] < 0:
                out.append(said.bad(name, values[name], "is below 0",
                                    f"set it above 0, or to 0 for the broker's default, e.g. {said.example(name)}"))
            elif "cluster" in typed and self.cluster not in OUR_CLUSTERS:
                out.append(said.bad(name, values[name], "needs our own broker (cluster local or docker)",
                                    "a cluster file's brokers keep their own settings; leave it at 0"))
        if "node_code" in typed and values['node_code']:
            if not Path(values['node_code'], "kafkaesque_harness", "clusters", "broker", "__main__.py").is_file():
                out.append(said.bad("node_code", values['node_code'], "holds no kafkaesque_harness/clusters/broker/__main__.py",
                                    "give a directory holding a copy of the kafkaesque_harness package with its "
                                    "clusters/ (clusters/code_copy.py lays one out)"))
            elif "cluster" in typed and self.cluster not in OUR_CLUSTERS:
                out.append(said.bad("node_code", values['node_code'], "needs our own cluster (local or docker)",
                                    "run it with --cluster local or docker"))
        # (brokers below 1 has its own sentence above; the relation would only repeat it)
        if {"min_isr", "replication_factor", "brokers", "cluster"} <= typed and self.brokers >= 1 and \
                not 1 <= self.min_isr <= self.replication_factor <= self.brokers:
            out.append(said.replication(self))
        return out

    def take_file_brokers(self, brokers: int) -> str | None:
        """The cluster file decides how many brokers there are; a replication factor above that (the
        default 3 on a one-broker file) is lowered to it, and min ISR with it. Returns that note, or None."""
        self.brokers = brokers
        if brokers < 1 or self.replication_factor <= brokers:
            return None
        was = (self.replication_factor, self.min_isr)
        self.replication_factor, self.min_isr = brokers, min(self.min_isr, brokers)
        return (f"the cluster file has {brokers} broker(s): replication factor {was[0]} -> {self.replication_factor}, "
                f"min ISR {was[1]} -> {self.min_isr}")

    def cluster_file_brokers(self) -> int | None:
        """How many brokers the cluster file or node file in `cluster` describes (the file decides, not
        `brokers`), or None for our own clusters and for a file that cannot be read (problems() says why)."""
        from kafkaesque_harness.clusters.base import ClusterError
        from kafkaesque_harness.clusters.cluster_file import cluster_file_brokers, is_cluster_file

        file = self.cluster.removeprefix("ssh:")
        if not (is_cluster_file(file) or self.cluster.startswith("ssh:")):
            return None
        try:
            return cluster_file_brokers(file)
        except (ClusterError, ValueError, OSError):
            return None


class _Wording:
    """A setting named as the user wrote it, in one of the three Styles."""

    def __init__(self, style: Style):
        self.style = style

    def name(self, field_name: str) -> str:
        return "--" + field_name.replace("_", "-") if self.style == "flag" else field_name

    def example(self, field_name: str) -> str:
        """The setting at its default value, as the user would write it."""
        value = _DEFAULTS[field_name]
        if isinstance(value, list):
            value = ["kill"]
        shown = f"{value:g}" if isinstance(value, float) else value if self.style == "flag" else repr(value)
        return {"flag": f"--{field_name.replace('_', '-')} {shown}", "key": f"{field_name} = {shown}",
                "setting": f"{field_name}={shown}"}[self.style]

    def bad(self, field_name: str, value: Any, problem: str, fix: str) -> str:
        shown = f"{value:g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)
        if self.style == "key":
            return f"key {field_name!r} is {shown}, which {problem}; {fix}."
        subject = f"{self.name(field_name)} {shown}" if self.style == "flag" else f"{field_name}={shown}"
        return f"{subject} {problem}; {fix}."

    def unknown(self, field_name: str, value: Any, valid: tuple[str, ...] | list[str]) -> str:
        if self.style == "key":
            return f"key {field_name!r} is {value!r}, which is not one of {', '.join(valid)}; pick one of those."
        return f"unknown {self.name(field_name)} {value!r}; valid: {', '.join(valid)}."

    def replication(self, spec: TestSpec) -> str:
        file = spec.cluster.removeprefix("ssh:")
        brokers = f"the brokers of {file}" if file.endswith(".toml") else self.name("brokers")
        fix = {"flag": "lower --min-isr or --replication-factor, or add brokers", "key": "change those keys",
               "setting": "change those settings"}[self.style]
        return (f"need 1 <= {self.name('min_isr')} ({spec.min_isr}) <= {self.name('replication_factor')} "
                f"({spec.replication_factor}) <= {brokers} ({spec.brokers}); {fix}.")


_KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list of strings", dict: "a table of options"}


def _type_problem(said: _Wording, name: str, value: Any) -> str | None:
    """Why `value` is not of the field's type (a marker or a hand-built TestSpec can hold anything)."""
    kind = type(_DEFAULTS[name])
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind in (int, float):
        ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    elif kind is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, kind)
    if ok:
        return None
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    example = said.example(name)
    if said.style == "key":
        return f"key {name!r} must be {_KIND_WORDS[kind]}, not {shown}; write e.g. {example}."
    subject = f"{said.name(name)} {shown}" if said.style == "flag" else f"{name}={shown}"
    return f"{subject} must be {_KIND_WORDS[kind]}; write e.g. {example}."


def _choice_problems(spec: TestSpec, said: _Wording, typed: set[str]) -> list[str]:
    """The settings that name one of a fixed set of things (each list is where that set is defined)."""
    from kafkaesque_harness.clusters.broker import UNCLEAN_RECOVERY_STRATEGIES, parse_flush_policy
    from kafkaesque_harness.clusters.reference import BROKER_VARIANTS
    from kafkaesque_harness.nemesis.faults import PARTITION_TARGETS
    from kafkaesque_harness.nemesis.registry import nemesis_options_problems, nemesis_problem
    from kafkaesque_harness.nemesis.schedule import NEMESIS_SCHEDULES
    from kafkaesque_harness.nemesis.targets import TARGETS
    from kafkaesque_harness.workloads.registry import WORKLOAD_NAMES, workload_options_problems

    out: list[str] = []
    if "name" in typed and (not _NAME_RE.match(spec.name) or spec.name in RESERVED_NAMES):
        out.append(said.bad("name", spec.name, "cannot be a store folder",
                            f"use letters, digits, '.', '_' and '-' (not {', '.join(RESERVED_NAMES)})"))
    if "workload" in typed and spec.workload not in WORKLOAD_NAMES:
        out.append(f"unknown workload {spec.workload!r}; valid: {', '.join(WORKLOAD_NAMES)}.")
    if "nemesis" in typed:
        problem = nemesis_problem(spec.nemesis)
        if problem:
            out.append(problem + ".")
    if "nemesis_options" in typed:
        out += nemesis_options_problems(spec.nemesis_options)
    if {"workload", "workload_options", "client"} <= typed:
        out += workload_options_problems(spec.workload, spec.client, spec.workload_options)
    choices: dict[str, tuple[str, ...] | list[str]] = {
        "nemesis_target": list(dict.fromkeys(TARGETS + PARTITION_TARGETS)),
        "nemesis_schedule": NEMESIS_SCHEDULES,
        "acks": ACKS,
        "client": CLIENTS,
        "broker_variant": BROKER_VARIANTS,
        "unclean_recovery_strategy": UNCLEAN_RECOVERY_STRATEGIES,
    }
    for name, valid in choices.items():
        if name in typed and spec.settings()[name] not in valid:
            out.append(said.unknown(name, spec.settings()[name], valid))
    if "client" in typed and spec.client == "confluent-kafka":
        missing = extra_missing("confluent", "--client confluent-kafka")
        if missing:
            out.append(missing + ".")
    if "flush_policy" in typed:
        try:
            parse_flush_policy(spec.broker.flush_policy)
        except ValueError as e:
            out.append(f"{said.name('flush_policy') if said.style != 'key' else 'key ' + repr('flush_policy')}: "
                       f"{str(e).rstrip('.')}.")
    if "cluster" in typed:
        problem = cluster_problem(spec.cluster)
        if problem:
            out.append(problem + ".")
    return out


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in (DIST, "kafka-python", "confluent-kafka"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        out["git"] = "unknown"
    return out


_DEFAULTS = TestSpec().settings()
