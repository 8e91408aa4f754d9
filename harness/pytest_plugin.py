"""Kafkaesque as a pytest plugin (issue 10 item 3): chaos tests written as ordinary pytest tests.

Installed with the package and registered through the `pytest11` entry point, so any
project that has kafkaesque installed gets these fixtures without a conftest:

    import pytest

    @pytest.mark.kafkaesque(nemesis="kill", nemesis_target="leader", time_limit=30)
    def test_acked_writes_survive_leader_kills(kafkaesque_history):
        assert kafkaesque_history.ops(f="start-kill")      # the run happened, valid, and faults were injected

    def test_several_runs(kafkaesque_cluster, kafkaesque_nemesis, kafkaesque_run):
        kafkaesque_nemesis.faults = ["kill", "pause"]
        kafkaesque_run(time_limit=20)                           # asserts valid
        kafkaesque_run(broker_variant="no-elr", expect=False)   # asserts that anomalies are found

Fixtures:

- `kafkaesque_cluster`: what to test (`.name`): our brokers on `docker` or `local`, `auto`
  (docker when an engine answers), a cluster file `FILE.toml` (clusters/cluster_file.py) or
  `ssh:FILE.toml`. From the test's marker (`cluster=`), else `--kafkaesque-cluster`.
- `kafkaesque_nemesis`: the faults (`.faults`, `.target`, `.interval`), from the marker
  (`nemesis=`, `nemesis_target=`, `nemesis_interval=`), else `--kafkaesque-nemesis`.
- `kafkaesque_store`: where runs are stored: `--kafkaesque-store`, else the `kafkaesque_store`
  ini value, else `store` (the CLI's default). Override the fixture to move it.
- `kafkaesque_run`: runs one test through the harness's own runner (harness/runner.py:
  the same lifecycle, store layout, results.json and report.html as `kafkaesque run`), with
  the marker's settings and the call's keyword arguments (any setting of `kafkaesque run`, by its flat name), and asserts
  the verdict: `expect=True` (default) valid, `False` invalid, `"unknown"`, or None (no
  assertion). A wrong verdict fails the test with the anomaly summary, the report's path
  and the run dir. Returns a KafkaesqueRun.
- `kafkaesque_history`: the run the test's marker describes, made once, its verdict asserted;
  a KafkaesqueRun whose `.history` is the list of ops and `.ops(f=..., type=...)` filters it.

Every run's dir is added to the test's `user_properties` (`kafkaesque_run`), so JUnit XML
carries it. Bad settings (an unknown marker key, fault or cluster file) fail the test with
one sentence before anything starts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# pytest loads this module into every test process of an environment that has the distribution, so it
# imports nothing of the project until a fixture runs (tests/unit/test_packaging.py holds it to that).
if TYPE_CHECKING:
    from kafkaesque_harness.history import Op

MARKER = "kafkaesque"
UNSET = object()
_NEMESIS_KEYS = ("nemesis", "nemesis_target", "nemesis_interval")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kafkaesque", "Kafkaesque chaos tests (harness/pytest_plugin.py)")
    group.addoption("--kafkaesque-cluster", default=None,
                    help="what kafkaesque tests run against: auto, docker, local, FILE.toml or ssh:FILE.toml "
                         "(default: the test's marker, else auto)")
    group.addoption("--kafkaesque-nemesis", default=None,
                    help="comma list of faults for tests whose marker names none (default: none)")
    group.addoption("--kafkaesque-store", default=None, help="where runs are stored (default: ini kafkaesque_store, "
                                                               "else ./store)")
    group.addoption("--kafkaesque-seed", default=None, type=int, help="seed for every run (default: the marker's, else 0)")
    parser.addini("kafkaesque_store", "where kafkaesque runs are stored", default="store")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(**settings): a kafkaesque run's settings (any setting of `kafkaesque run`: "
                                       "cluster, nemesis, time_limit, ...); see harness/pytest_plugin.py")


# --- what the fixtures hold ----------------------------------------------------------------------------
@dataclass
class ClusterChoice:
    name: str


@dataclass
class NemesisChoice:
    faults: list[str] = field(default_factory=list)
    target: str = "random-node"
    interval: float = 10.0


@dataclass
class KafkaesqueRun:
    """One stored run: exit code, run dir, test.json, results.json, and its history on demand."""

    code: int
    run_dir: Path
    test: dict[str, Any]
    results: dict[str, Any]
    _history: list[Op] | None = None

    @property
    def valid(self) -> Any:
        return self.results.get("valid")

    @property
    def report(self) -> Path:
        return self.run_dir / "report.html"

    @property
    def history(self) -> list[Op]:
        if self._history is None:
            from kafkaesque_harness.history import read_history

            self._history = read_history(self.run_dir / "history.jsonl")
        return self._history

    def ops(self, f: str | None = None, type: str | None = None) -> list[Op]:  # noqa: A002 - the op field's name
        return [op for op in self.history if (f is None or op.f == f) and (type is None or op.type == type)]

    def anomalies(self) -> list[str]:
        """"checker: name xCOUNT" for every anomaly found."""
        return [f"{c}: {a['name']} x{a['count']}" for c, r in (self.results.get("checkers") or {}).items()
                for a in r.get("anomalies", [])]


def verdict_problem(run: KafkaesqueRun, expect: Any) -> str | None:
    """Why the run's verdict is not the expected one (a message naming anomalies, report and run dir), or None."""
    if expect is None or run.valid == expect:
        return None
    lines = [f"kafkaesque run {run.test.get('name', '')} is valid={json.dumps(run.valid)}, expected "
             f"valid={json.dumps(expect)} (cluster {run.test.get('cluster')}, nemesis "
             f"{','.join(run.test.get('nemesis') or []) or 'none'}, seed {run.test.get('seed')})"]
    for reason in ("error", "interrupted", "final_reads"):
        if run.results.get(reason):
            lines.append(f"  {reason}: {run.results[reason]}")
    for cname, c in (run.results.get("checkers") or {}).items():
        for a in c.get("anomalies", []):
            lines.append(f"  {cname}: {a['name']} x{a['count']}")
            lines += [f"    - {ex['summary']}" for ex in a.get("examples", [])[:3] if ex.get("summary")]
    if run.valid is True:
        lines.append("  no anomalies found")
    lines.append(f"  report: {run.report}")
    lines.append(f"  run dir: {run.run_dir}")
    return "\n".join(lines)


# --- building the spec -------------------------------------------------------------------------------
def _marker_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for m in reversed(list(request.node.iter_markers(MARKER))):  # the closest marker wins
        if m.args:
            pytest.fail(f"@pytest.mark.{MARKER} takes keyword arguments only (got {m.args!r}); write e.g. "
                        f"@pytest.mark.{MARKER}(nemesis=\"kill\").", pytrace=False)
        settings.update(m.kwargs)
    return settings


def _faults(value: Any) -> list[str]:
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    return [str(n) for n in value or []]


def _test_name(nodeid: str) -> str:
    """The store folder for a test: its function name and parameters, as a file name."""
    name = nodeid.split("::")[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "pytest"


def build_spec(settings: dict[str, Any], cluster: ClusterChoice, nemesis: NemesisChoice, store: str,
               name: str, seed: int | None = None):
    """A TestSpec from a marker's and a call's settings over the fixtures' choices; a bad setting is
    one sentence (ValueError) naming it and the fix."""
    from kafkaesque_harness.harness.spec import TestSpec

    fields = set(TestSpec.setting_names())
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise ValueError(f"unknown kafkaesque setting(s) {', '.join(unknown)}; valid: any setting of `kafkaesque run` "
                         f"({', '.join(sorted(fields))})")
    values: dict[str, Any] = {"name": name, "cluster": cluster.name, "nemesis": list(nemesis.faults),
                              "nemesis_target": nemesis.target, "nemesis_interval": nemesis.interval,
                              "store": store, **({"seed": seed} if seed is not None else {}), **settings}
    values["nemesis"] = _faults(values["nemesis"])
    spec = TestSpec.make(**values)
    file_brokers = spec.cluster_file_brokers() if isinstance(spec.cluster, str) else None
    if file_brokers is not None:
        spec.take_file_brokers(file_brokers)  # the file decides, as on the command line
    problems = spec.problems("setting")  # the checks `kafkaesque run` makes (harness/spec.py)
    if problems:
        raise ValueError(problems[0].rstrip("."))
    return spec


# --- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
def kafkaesque_cluster(request: pytest.FixtureRequest) -> ClusterChoice:
    from kafkaesque_harness.harness.spec import cluster_problem

    name = _marker_settings(request).get("cluster") or request.config.getoption("--kafkaesque-cluster") or "auto"
    problem = cluster_problem(name)
    if problem:
        pytest.fail(f"--kafkaesque-cluster: {problem}.", pytrace=False)
    return ClusterChoice(name)


@pytest.fixture
def kafkaesque_nemesis(request: pytest.FixtureRequest) -> NemesisChoice:
    settings = _marker_settings(request)
    faults = settings.get("nemesis", request.config.getoption("--kafkaesque-nemesis") or "")
    choice = NemesisChoice(_faults(faults) if isinstance(faults, (str, list, tuple)) else faults,
                           settings.get("nemesis_target", "random-node"), settings.get("nemesis_interval", 10.0))
    from kafkaesque_harness.harness.spec import TestSpec

    # The nemesis settings alone, checked as `kafkaesque run` checks them (the rest wait for kafkaesque_run).
    problems = TestSpec(nemesis=choice.faults, nemesis_target=choice.target,
                        nemesis_interval=choice.interval).problems()
    if problems:
        pytest.fail(f"kafkaesque nemesis: {problems[0]}", pytrace=False)
    choice.interval = float(choice.interval)
    return choice


@pytest.fixture
def kafkaesque_store(request: pytest.FixtureRequest) -> Path:
    return Path(request.config.getoption("--kafkaesque-store") or request.config.getini("kafkaesque_store"))


@pytest.fixture
def kafkaesque_run(request: pytest.FixtureRequest, kafkaesque_cluster: ClusterChoice,
                   kafkaesque_nemesis: NemesisChoice, kafkaesque_store: Path):
    """Call it to run a test: `kafkaesque_run(time_limit=20, expect=True) -> KafkaesqueRun`."""
    marker = _marker_settings(request)
    seed = request.config.getoption("--kafkaesque-seed")

    def run(expect: Any = UNSET, **overrides: Any) -> KafkaesqueRun:
        from kafkaesque_harness.harness.runner import HarnessError, run_test

        if expect is UNSET:
            expect = marker.get("expect", True)
        # The marker's cluster and faults reach the spec through the fixtures (which a test may change);
        # the call's own keyword arguments win over both.
        settings = {k: v for k, v in marker.items() if k not in ("expect", "cluster", *_NEMESIS_KEYS)}
        settings.update(overrides)
        try:
            spec = build_spec(settings, kafkaesque_cluster, kafkaesque_nemesis, str(kafkaesque_store),
                              _test_name(request.node.nodeid), seed)
        except ValueError as e:
            pytest.fail(f"kafkaesque: {e}.", pytrace=False)
        try:
            code, run_dir = run_test(spec, log=lambda m: print(f"[kafkaesque] {m}"))
        except HarnessError as e:
            pytest.fail(f"kafkaesque: {e}", pytrace=False)
        request.node.user_properties.append(("kafkaesque_run", str(run_dir)))
        result = KafkaesqueRun(code, run_dir, json.loads((run_dir / "test.json").read_text()),
                               json.loads((run_dir / "results.json").read_text()))
        print(f"[kafkaesque] valid={json.dumps(result.valid)} {', '.join(result.anomalies())} report: {result.report}")
        problem = verdict_problem(result, expect)
        if problem:
            pytest.fail(problem, pytrace=False)
        return result

    return run


@pytest.fixture
def kafkaesque_history(request: pytest.FixtureRequest, kafkaesque_run) -> KafkaesqueRun:
    """The run the test's marker describes (expect= in the marker sets the verdict to assert)."""
    return kafkaesque_run()
