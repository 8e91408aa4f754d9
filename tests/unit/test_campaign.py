"""Campaigns: the TOML file and its matrix, bad files refused in one sentence, the budget, the JUnit XML and
index.html views, and exit codes. run_test (in its child process: run_child.run_in_child) is replaced
by a fake that stores canned results (no cluster)."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.harness import run_child, runner
from kafkaesque_harness.harness.campaign import run_campaign
from kafkaesque_harness.harness.campaign_file import CampaignFileError, load_campaign, parse_campaign
from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.results.store import create_run_dir, write_json

HOSTILE = '<&"'  # must come out of every view escaped, never as markup

MINIMAL = """
[campaign]
name = "ci"
cluster = "local"
time_limit = 5
"""

TWO_BY_TWO = """
[campaign]
name = "ci"
cluster = "local"
time_limit = 5
repetitions = 2
seed = 100
brokers = 3
min_isr = 2
rate = 50.0
workloads = ["queue"]
nemeses = ["kill,pause", ""]
broker_variants = ["default", "unclean-election"]
acks = ["all"]
flush_policies = ["never"]
"""


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "campaign.toml"
    f.write_text(text)
    return f


class FakeRunTest:
    """Stands in for runner.run_test: stores a run with canned results, as the real one would."""

    def __init__(self, verdict=lambda spec: True, anomaly_name="lost-write", crash_on=()):
        self.verdict, self.anomaly_name, self.crash_on = verdict, anomaly_name, crash_on
        self.specs = []

    def __call__(self, spec, log=print, panel=False):
        self.specs.append(spec)
        if len(self.specs) in self.crash_on:
            raise RuntimeError(f"cluster exploded {HOSTILE}")
        valid = self.verdict(spec)
        run_dir = create_run_dir(spec.store, spec.name)
        write_json(run_dir / "test.json", spec.to_dict())
        anomalies = [] if valid is not False else [
            {"name": self.anomaly_name, "count": 2, "explanation": "acknowledged but never read", "whose": {"client": 1},
             "examples": [{"summary": "send of 7 to partition 0 was acknowledged at offset 3; the final read "
                                      "ends at offset 2"}]}]
        write_json(run_dir / "results.json", {"valid": valid, "checkers": {"queue": {
            "valid": valid, "anomaly_types": [a["name"] for a in anomalies], "anomalies": anomalies}}})
        (run_dir / "report.html").write_text("<html>report</html>")
        return runner.exit_code(valid), run_dir


class FakeClock:
    """The budget's clock; each fake run advances it by `step` seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- the file and its matrix -------------------------------------------------------------------

def test_matrix_expands_repetition_major_with_seeds_from_the_base_seed(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    assert [p.id for p in plan.runs[:4]] == [
        "queue|kill,pause|default|acks=all|flush=never|rep1",
        "queue|kill,pause|unclean-election|acks=all|flush=never|rep1",
        "queue|none|default|acks=all|flush=never|rep1",
        "queue|none|unclean-election|acks=all|flush=never|rep1",
    ]
    assert [p.repetition for p in plan.runs] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert [p.spec.seed for p in plan.runs] == list(range(100, 108))
    assert len({p.id for p in plan.runs}) == 8


def test_base_settings_reach_every_spec_and_runs_are_stored_under_the_campaign_name(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store="somewhere")
    for p in plan.runs:
        s = p.spec
        assert (s.name, s.store, s.cluster, s.time_limit, s.rate, s.min_isr) == ("ci", "somewhere", "local", 5.0,
                                                                                  50.0, 2)
    assert plan.runs[0].spec.nemesis == ["kill", "pause"] and plan.runs[2].spec.nemesis == []


def test_left_out_axes_are_the_run_commands_defaults():
    plan = parse_campaign({"campaign": {"name": "x"}})
    assert [p.id for p in plan.runs] == ["queue|none|default|acks=all|flush=never|rep1"]


def test_the_command_line_cluster_overrides_the_files():
    plan = parse_campaign({"campaign": {"name": "x", "cluster": "docker"}}, cluster="local")
    assert plan.cluster == "local"


def test_the_same_file_expands_to_the_same_runs(tmp_path):
    f = write(tmp_path, TWO_BY_TWO)
    a, b = load_campaign(f), load_campaign(f)
    assert [(p.id, p.spec) for p in a.runs] == [(p.id, p.spec) for p in b.runs]


BAD_FILES = [
    ("[campaign]\nname = 'x'\nbrokerz = 3\n", "unknown key 'brokerz' in [campaign]; did you mean 'brokers'?"),
    ("[campaign]\nname = 'x'\nrepetitions = '3'\n",
     "key 'repetitions' must be an integer, not a string ('3'); write e.g. repetitions = 3."),
    ("[campaign]\nname = 'x'\nrate = true\n", "key 'rate' must be a number, not a boolean"),
    ("[campaign]\nname = 'x'\nnemeses = ['kill,meteor']\n",
     "unknown nemesis 'meteor' in 'nemeses' entry 'kill,meteor'; valid: client-partition, clock, clock-jump"),
    ("[campaign]\nname = 'x'\nbroker_variants = ['no-fsync']\n",
     "unknown broker variant 'no-fsync' in 'broker_variants'; valid: default, truncate-to-hw"),
    ("[campaign]\nname = 'x'\nworkloads = ['bank']\n", "unknown workload 'bank' in 'workloads'; valid: queue, txn."),
    ("[campaign]\nname = 'x'\nnemeses = []\n",
     "matrix axis 'nemeses' is empty, so the matrix has no runs; list at least one value"),
    ("[campaign]\nname = 'x'\nnemeses = 'kill'\n", "key 'nemeses' must be a list of strings"),
    ("[campaign]\nname = 'x'\nnemesis = 'kill'\n", "key 'nemesis' is a matrix axis in a campaign; write it as a "
                                                   "list named 'nemeses'"),
    ("[campaign]\nname = 'x'\nacks = ['all', 1]\n", "key 'acks' must be a list of strings"),
    ("[campaign]\nname = 'x'\nacks = ['most']\n", "acks value 'most' in 'acks' is not one of all, 1, 0, -1"),
    ("[campaign]\nname = 'x'\nflush_policies = ['sometimes']\n", "bad entry in 'flush_policies': unknown flush"),
    ("[campaign]\nname = 'x'\nacks = ['all', 'all']\n", "matrix axis 'acks' lists 'all' twice"),
    ("[campaign]\nname = 'x'\nrepetitions = 0\n", "key 'repetitions' is 0; set it to 1 or more."),
    ("[campaign]\nname = 'x'\nbudget = 0\n", "key 'budget' is 0"),
    ("[campaign]\nname = 'x'\nmin_isr = 4\n", "need 1 <= min_isr (4) <= replication_factor (3) <= brokers (3)"),
    ("[campaign]\nname = 'x'\ncluster = 'cloud'\n", "key 'cluster' is 'cloud', which is not one of auto, docker"),
    ("[campaign]\nname = 'x'\nleave_running = true\n", "key 'leave_running' cannot be set in a campaign"),
    ("[campaign]\ntime_limit = 5\n", "key 'name' is missing from [campaign]; add e.g. name = \"nightly\"."),
    ("[campaign]\nname = 'a/b'\n", "key 'name' is 'a/b', which cannot be a store folder"),
    ("[campaign]\nname = 'campaigns'\n", "key 'name' is 'campaigns', which cannot be a store folder"),
    ("name = 'x'\n", "unknown table or key 'name' at the top of"),
    ("[runs]\nname = 'x'\n", "unknown table or key 'runs' at the top of"),
    ("", "has no [campaign] table"),
    ("[campaign\nname = 'x'\n", "is not valid TOML"),
    # The same checks as `kafkaesque run` (TestSpec.problems), worded for the file's keys:
    ("[campaign]\nname = 'x'\ncontrollers = 2\n",
     "key 'controllers' is 2, which is not an odd number of at least 1; a Raft quorum needs 1, 3 or 5."),
    ("[campaign]\nname = 'x'\ntime_limit = nan\n", "key 'time_limit' is nan, which is not a number of seconds above 0"),
    ("[campaign]\nname = 'x'\nnemesis_interval = inf\n", "key 'nemesis_interval' is inf, which is not a number"),
    ("[campaign]\nname = 'x'\nnemesis_target = 'the-boss'\n",
     "key 'nemesis_target' is 'the-boss', which is not one of random-node"),
]


@pytest.mark.parametrize("text,sentence", BAD_FILES, ids=[s[:40] for _, s in BAD_FILES])
def test_bad_files_are_refused_in_one_sentence(tmp_path, text, sentence):
    with pytest.raises(CampaignFileError) as e:
        load_campaign(write(tmp_path, text))
    assert sentence in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_file_names_itself(tmp_path):
    with pytest.raises(CampaignFileError, match="does not exist; pass the path of a campaign TOML file"):
        load_campaign(tmp_path / "nope.toml")


def test_a_bad_file_exits_3_with_one_sentence_and_runs_nothing(tmp_path, monkeypatch):
    fake = FakeRunTest()
    monkeypatch.setattr(run_child, "run_in_child", fake)
    text = TWO_BY_TWO.replace('nemeses = ["kill,pause", ""]', 'nemeses = ["kill,pause", "meteor"]')
    r = CliRunner().invoke(app, ["campaign", str(write(tmp_path, text)), "--store", str(tmp_path / "store")])
    assert r.exit_code == 3
    assert "unknown nemesis 'meteor' in 'nemeses' entry 'meteor'" in r.output
    assert "Traceback" not in r.output and fake.specs == []
    assert not (tmp_path / "store").exists()


def test_the_shipped_nightly_campaign_is_valid():
    plan = load_campaign(Path(__file__).resolve().parents[2] / "campaigns" / "nightly.toml")
    variants = {p.spec.broker.broker_variant for p in plan.runs}
    assert variants == {"default", "truncate-to-hw", "no-elr", "unclean-election", "no-epoch-fencing"}
    faults = {n for p in plan.runs for n in p.spec.nemesis}
    assert {"kill", "pause", "partition", "lossy-crash"} <= faults
    assert 50 * 60 <= plan.budget <= 70 * 60


# --- running: budget, crashes, interruption ------------------------------------------------------

def test_runs_that_would_start_after_the_budget_is_spent_are_skipped(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO + "budget = 100\n"), store=str(tmp_path / "store"))
    clock = FakeClock()
    inner = FakeRunTest()

    def forty_seconds(spec, log=print, panel=False):
        clock.now += 40
        return inner(spec, log, panel)

    code, cdir = run_campaign(plan, run=forty_seconds, log=lambda m: None, clock=clock)
    doc = json.loads((cdir / "campaign.json").read_text())
    # runs start at 0, 40 and 80 s; at 120 s the 100 s budget is spent
    assert [r["status"] for r in doc["runs"]] == ["valid"] * 3 + ["skipped"] * 5
    assert {r["skipped"] for r in doc["runs"][3:]} == {"budget"}
    assert code == 0 and len(inner.specs) == 3


def test_a_crashed_run_is_unknown_with_its_error_and_the_campaign_goes_on(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    fake = FakeRunTest(crash_on=(2,))
    code, cdir = run_campaign(plan, run=fake, log=lambda m: None)
    doc = json.loads((cdir / "campaign.json").read_text())
    assert [r["status"] for r in doc["runs"]] == ["valid", "unknown"] + ["valid"] * 6
    assert doc["runs"][1]["error"] == f"RuntimeError: cluster exploded {HOSTILE}"
    assert doc["runs"][1]["run_dir"] is None
    assert code == 2


def test_an_interrupted_run_stops_the_campaign(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    fake = FakeRunTest()

    def interrupted(spec, log=print, panel=False):
        code, run_dir = fake(spec, log, panel)
        write_json(run_dir / "results.json", {"valid": "unknown", "interrupted": "interrupted by the user (Ctrl-C)"})
        return 2, run_dir

    code, cdir = run_campaign(plan, run=interrupted, log=lambda m: None)
    doc = json.loads((cdir / "campaign.json").read_text())
    assert doc["runs"][0]["status"] == "unknown"
    assert {r["skipped"] for r in doc["runs"][1:]} == {"interrupted"} and len(fake.specs) == 1


def test_campaign_json_records_matrix_spec_verdict_run_dir_duration_and_anomalies(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    fake = FakeRunTest(verdict=lambda s: s.broker.broker_variant == "default")
    _, cdir = run_campaign(plan, run=fake, log=lambda m: None)
    assert cdir.parent == tmp_path / "store" / "campaigns" / "ci"
    doc = json.loads((cdir / "campaign.json").read_text())
    assert doc["matrix"]["axes"]["broker_variants"] == ["default", "unclean-election"]
    assert doc["matrix"]["repetitions"] == 2 and doc["finished"] is True
    bad = doc["runs"][1]
    assert bad["spec"]["broker_variant"] == "unclean-election" and bad["spec"]["seed"] == 101
    assert bad["valid"] is False and bad["status"] == "invalid"
    assert bad["anomalies"][0]["name"] == "lost-write" and bad["anomalies"][0]["count"] == 2
    assert bad["anomalies"][0]["whose"] == {"client": 1}  # whose it is travels with it (the detection table's claim 1)
    assert Path(bad["run_dir"]).parent == tmp_path / "store" / "ci"
    assert bad["duration_s"] >= 0
    assert doc["counts"] == {"valid": 4, "invalid": 4, "unknown": 0, "skipped": 0, "pending": 0}


# --- junit.xml -------------------------------------------------------------------------------------

def _junit(tmp_path, fake, text=TWO_BY_TWO, clock=None):
    plan = load_campaign(write(tmp_path, text), store=str(tmp_path / "store"))
    _, cdir = run_campaign(plan, run=fake, log=lambda m: None, **({"clock": clock} if clock else {}))
    return ET.parse(cdir / "junit.xml").getroot(), cdir


def test_junit_has_one_testcase_per_run_named_by_its_cell(tmp_path):
    root, _ = _junit(tmp_path, FakeRunTest())
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 8
    assert {c.get("classname") for c in cases} == {"ci"}
    assert cases[0].get("name") == "queue|kill,pause|default|acks=all|flush=never|rep1"
    assert root.find("testsuite").get("tests") == "8" and root.find("testsuite").get("failures") == "0"
    assert all(len(c) == 1 and c[0].tag == "system-out" for c in cases)  # passed: no failure/error/skipped


def test_junit_failure_carries_the_anomalies_and_error_the_crash(tmp_path):
    fake = FakeRunTest(verdict=lambda s: s.broker.broker_variant == "default", crash_on=(3,))
    root, _ = _junit(tmp_path, fake)
    cases = root.findall("./testsuite/testcase")
    failure = cases[1].find("failure")
    assert failure.get("message") == "invalid: lost-write x2"
    assert "lost-write x2 (queue): acknowledged but never read" in failure.text
    assert "acknowledged at offset 3" in failure.text
    error = cases[2].find("error")  # the third call of this fake crashes
    assert error is not None and HOSTILE in error.get("message") and HOSTILE in error.text
    suite = root.find("testsuite")
    assert suite.get("failures") == "4" and suite.get("errors") == "1"  # runs 1, 3, 5, 7; run 2


def test_junit_marks_budget_skipped_runs(tmp_path):
    clock = FakeClock()
    inner = FakeRunTest()

    def over_budget(spec, log=print, panel=False):
        clock.now += 1000
        return inner(spec, log, panel)

    root, _ = _junit(tmp_path, over_budget, TWO_BY_TWO + "budget = 10\n", clock=clock)
    cases = root.findall("./testsuite/testcase")
    assert cases[0].find("skipped") is None
    assert [c.find("skipped").get("message") for c in cases[1:]] == ["skipped: budget"] * 7
    assert root.find("testsuite").get("skipped") == "7"


def test_junit_escapes_xml_hostile_values(tmp_path):
    fake = FakeRunTest(verdict=lambda s: False, anomaly_name=f"lost{HOSTILE}\x01write")
    root, cdir = _junit(tmp_path, fake)
    raw = (cdir / "junit.xml").read_text()
    assert HOSTILE not in raw and "&lt;&amp;" in raw
    failure = root.find("./testsuite/testcase/failure")
    assert f"lost{HOSTILE}write x2" in failure.text  # parsed back intact; the control character dropped


# --- index.html ------------------------------------------------------------------------------------

def test_index_matrix_cells_are_coloured_count_repetitions_and_link_relatively(tmp_path):
    fake = FakeRunTest(verdict=lambda s: s.broker.broker_variant == "default")
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    _, cdir = run_campaign(plan, run=fake, log=lambda m: None)
    html = (cdir / "index.html").read_text()
    matrix = html[html.index('id="matrix"'):html.index('id="runs"')]
    assert matrix.count('class="cell s-valid"') == 2 and matrix.count('class="cell s-invalid"') == 2
    assert matrix.count("2 valid") == 2 and matrix.count("2 invalid") == 2
    links = [part.split('"')[0] for part in matrix.split('href="')[1:]]
    assert len(links) == 8
    for link in links:
        assert not link.startswith(("/", "http")), link
        target = (cdir / unquote(link)).resolve()
        assert target.name == "report.html" and target.exists()
    assert "http://" not in html and "https://" not in html and "<script" not in html


def test_index_escapes_every_value(tmp_path):
    fake = FakeRunTest(verdict=lambda s: False, anomaly_name=f"<b>{HOSTILE}</b>")
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))
    _, cdir = run_campaign(plan, run=fake, log=lambda m: None)
    html = (cdir / "index.html").read_text()
    assert "<b>&lt;" not in html and "&lt;b&gt;&lt;&amp;&#34;&lt;/b&gt;" in html


# --- the command: exit codes and --dry-run ------------------------------------------------------------

@pytest.mark.parametrize("verdict,code", [
    (lambda s: True, 0),
    (lambda s: s.broker.broker_variant == "default", 1),
    (lambda s: True if s.broker.broker_variant == "default" else "unknown", 2),
    (lambda s: False if s.nemesis else "unknown", 1),
], ids=["all-valid", "one-invalid", "unknown-none-invalid", "invalid-beats-unknown"])
def test_exit_status_of_the_command(tmp_path, monkeypatch, verdict, code):
    fake = FakeRunTest(verdict=verdict)
    monkeypatch.setattr(run_child, "run_in_child", fake)
    r = CliRunner().invoke(app, ["campaign", str(write(tmp_path, TWO_BY_TWO)), "--store", str(tmp_path / "store"),
                                 "--no-panel"])
    assert r.exit_code == code, r.output
    campaign_dir = Path(r.stdout.strip().splitlines()[-1])
    assert (campaign_dir / "junit.xml").exists() and (campaign_dir / "index.html").exists()
    assert len(fake.specs) == 8


def test_dry_run_prints_the_matrix_and_runs_nothing(tmp_path, monkeypatch):
    fake = FakeRunTest()
    monkeypatch.setattr(run_child, "run_in_child", fake)
    r = CliRunner().invoke(app, ["campaign", "--dry-run", str(write(tmp_path, TWO_BY_TWO)),
                                 "--store", str(tmp_path / "store")], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "queue|kill,pause|unclean-election|acks=all|flush=never|rep2" in r.output
    assert "8 runs" in r.output
    assert fake.specs == [] and not (tmp_path / "store").exists()


def test_minimal_file_is_one_run(tmp_path, monkeypatch):
    fake = FakeRunTest()
    monkeypatch.setattr(run_child, "run_in_child", fake)
    r = CliRunner().invoke(app, ["campaign", str(write(tmp_path, MINIMAL)), "--store", str(tmp_path / "store")])
    assert r.exit_code == 0, r.output
    assert len(fake.specs) == 1 and fake.specs[0].cluster == "local"


def test_a_bad_cluster_on_the_command_line_names_the_flag(tmp_path):
    r = CliRunner().invoke(app, ["campaign", str(write(tmp_path, MINIMAL)), "--cluster", "cloud"])
    assert r.exit_code == 3 and "--cluster is 'cloud', which is not one of auto, docker, local" in r.output


def test_an_unwritable_store_is_one_sentence_and_exit_3(tmp_path, monkeypatch):
    fake = FakeRunTest()
    monkeypatch.setattr(run_child, "run_in_child", fake)
    blocker = tmp_path / "f"
    blocker.write_text("x")
    r = CliRunner().invoke(app, ["campaign", str(write(tmp_path, MINIMAL)), "--store", str(blocker)])
    assert r.exit_code == 3 and "pass a writable --store directory" in r.output
    assert "Traceback" not in r.output and fake.specs == []


def test_a_run_without_results_is_unknown_and_says_so(tmp_path):
    plan = load_campaign(write(tmp_path, MINIMAL), store=str(tmp_path / "store"))

    def no_results(spec, log=print, panel=False):
        return 3, create_run_dir(spec.store, spec.name)

    code, cdir = run_campaign(plan, run=no_results, log=lambda m: None)
    run = json.loads((cdir / "campaign.json").read_text())["runs"][0]
    assert run["status"] == "unknown" and "wrote no readable results.json" in run["error"] and code == 2


def test_ctrl_c_between_phases_stops_the_campaign(tmp_path):
    plan = load_campaign(write(tmp_path, TWO_BY_TWO), store=str(tmp_path / "store"))

    def ctrl_c(spec, log=print, panel=False):
        raise KeyboardInterrupt

    code, cdir = run_campaign(plan, run=ctrl_c, log=lambda m: None)
    runs = json.loads((cdir / "campaign.json").read_text())["runs"]
    assert runs[0]["status"] == "unknown" and "Ctrl-C" in runs[0]["error"]
    assert [r["skipped"] for r in runs[1:]] == ["interrupted"] * 7 and code == 130


def replication_scenarios() -> set[str]:
    """The scenarios of the replication flaws (the transaction and group coordinators' have a plan of their own)."""
    from kafkaesque_harness.clusters.reference import TXN_GROUP_VARIANTS
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    return {f"scenario:{name}" for name, s in SCENARIOS.items() if not set(s.targets) & set(TXN_GROUP_VARIANTS)}


def test_the_shipped_detection_plan_covers_the_issue_8_matrix():
    root = Path(__file__).resolve().parents[2] / "campaigns" / "detection"
    runs = [p for f in sorted(root.glob("*.toml")) for p in load_campaign(f).runs]
    cells = {(",".join(p.spec.nemesis), p.spec.broker.broker_variant, p.spec.acks, p.spec.broker.flush_policy) for p in runs}
    plans = replication_scenarios() | {"protocol"}
    variants = {"default", "truncate-to-hw", "no-elr", "unclean-election", "no-epoch-fencing"}
    # every scenario and the protocol nemesis against every variant, acks all vs 1, flush never vs every write
    assert {(n, v, a, f) for n in plans for v in variants for a in ("all", "1") for f in ("never", "every-write")
            } <= cells
    # the rate measurement: 5-minute runs, five per variant, protocol beside plain random faults
    for plan in ("protocol", "kill,partition"):
        for v in variants:
            reps = [p for p in runs if ",".join(p.spec.nemesis) == plan and p.spec.broker.broker_variant == v
                    and p.spec.acks == "all" and p.spec.broker.flush_policy == "never" and p.spec.time_limit == 300]
            assert len(reps) == 5, (plan, v, len(reps))
    assert len({p.spec.seed for p in runs}) == len({(p.spec.seed, p.cell.id) for p in runs})  # seeds fixed per run


def test_the_core_detection_plan_covers_what_docs_detection_claims():
    from kafkaesque_harness.clusters.reference import TXN_GROUP_VARIANTS
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    root = Path(__file__).resolve().parents[2] / "campaigns" / "detection"
    files = sorted((root / "core").glob("*.toml"))
    core = [load_campaign(f) for f in files]
    full_names = {load_campaign(f).name for f in root.glob("*.toml")}
    assert not {c.name for c in core} & full_names  # its campaigns never land in the full plan's store folders
    # a *-rerun.toml file runs again, with its seed, a run of the plan that was unknown: beside the plan, not in it
    reruns = [c for f, c in zip(files, core, strict=True) if f.name.endswith("-rerun.toml")]
    plan_seeds = {p.spec.seed for c in core if c not in reruns for p in c.runs}
    assert all(p.spec.seed in plan_seeds for c in reruns for p in c.runs)
    runs = [p for c in core if c not in reruns for p in c.runs]
    variants = {"default", "truncate-to-hw", "no-elr", "unclean-election", "no-epoch-fencing"}
    contract = {(",".join(p.spec.nemesis), p.spec.broker.broker_variant) for p in runs
                if p.spec.acks == "all" and p.spec.broker.flush_policy == "never"}
    # claims 1 and 2: every scenario against every variant at acks=all, flush never
    assert {(n, v) for n in replication_scenarios() for v in variants} <= contract
    # claim 3: five 5-minute runs per flawed variant of each nemesis, and the default under both
    for plan in ("protocol", "kill,partition"):
        for v in variants:
            reps = [p for p in runs if ",".join(p.spec.nemesis) == plan and p.spec.broker.broker_variant == v
                    and p.spec.acks == "all" and p.spec.broker.flush_policy == "never" and p.spec.time_limit == 300
                    and p.spec.min_isr == 2 and p.spec.workload == "queue"
                    and p.spec.workload_options.get("queue_mode", "assign") == "assign"]
            assert len(reps) == (2 if v == "default" else 5), (plan, v, len(reps))
    # the transaction and group rows (issue 25): each coordinator scenario against the default and every
    # transaction or group variant; the protocol nemesis five times per such variant with the txn workload,
    # twice on the default, beside random kill+partition; the default under each fault kind alone
    txn_variants = {"default", *TXN_GROUP_VARIANTS}
    txn_scenarios = {f"scenario:{n}" for n, s in SCENARIOS.items() if set(s.targets) & set(TXN_GROUP_VARIANTS)}
    assert {(n, v) for n in txn_scenarios for v in txn_variants} <= contract
    for v in txn_variants:
        # offset commits are the queue workload's in subscribe mode (the txn workload commits none)
        workloads = ("txn", "queue") if v == "default" else ("queue",) if v == "offsets-commit-acks-1" else ("txn",)
        for w in workloads:
            reps = [p for p in runs if list(p.spec.nemesis) == ["protocol"] and p.spec.broker.broker_variant == v
                    and p.spec.workload == w and p.spec.time_limit == 300 and p.spec.min_isr == 2
                    and (w == "txn" or p.spec.workload_options.get("queue_mode") == "subscribe")]
            assert len(reps) == (2 if v == "default" else 5), (v, w, len(reps))
    alone = {tuple(p.spec.nemesis) for p in runs if p.spec.workload == "txn" and p.spec.broker.broker_variant == "default"}
    assert {("kill",), ("pause",), ("partition",), ("lossy-crash",), ("kill", "partition")} <= alone
    for c in core:  # the budget leaves room for every run: each took 15 s (75 s runs) to 70 s (300 s) beyond its limit
        assert c.budget >= sum(p.spec.time_limit * 1.25 + 15 for p in c.runs), c.name


# --- required states ------------------------------------------------------------------------------

REQUIRING = MINIMAL + 'repetitions = 2\nrequire = ["isr-shrunk-to-one", "elr-election"]\n'


class ReachingRunTest(FakeRunTest):
    """A fake run that also says which protocol states it reached (results.json "reached")."""

    def __init__(self, reached):
        super().__init__()
        self.reached = reached

    def __call__(self, spec, log=print, panel=False):
        code, run_dir = super().__call__(spec, log, panel)
        results = json.loads((run_dir / "results.json").read_text())
        results["reached"] = {s: {"count": 2, "first_s": 1.0, "times_s": [1.0, 2.0], "source": "node logs"}
                              for s in self.reached}
        write_json(run_dir / "results.json", results)
        return code, run_dir


def test_a_campaign_whose_runs_reached_every_required_state_passes(tmp_path):
    plan = load_campaign(write(tmp_path, REQUIRING), store=str(tmp_path / "store"))
    code, d = run_campaign(plan, run=ReachingRunTest({"isr-shrunk-to-one", "elr-election", "leader-change"}),
                           log=lambda m: None)
    doc = json.loads((d / "campaign.json").read_text())
    assert code == 0 and doc["unmet_requirements"] == []
    assert [(q["state"], q["met"], q["runs_reaching"]) for q in doc["requirements"]] == [
        ("isr-shrunk-to-one", True, 2), ("elr-election", True, 2)]


def test_a_campaign_whose_runs_never_reached_a_required_state_fails_instead_of_passing(tmp_path):
    plan = load_campaign(write(tmp_path, REQUIRING), store=str(tmp_path / "store"))
    code, d = run_campaign(plan, run=ReachingRunTest({"isr-shrunk-to-one"}), log=lambda m: None)
    doc = json.loads((d / "campaign.json").read_text())
    assert code == 2 and doc["counts"]["valid"] == 2  # every run valid, and still not a pass
    assert doc["unmet_requirements"] == ["elr-election"]
    junit = ET.fromstring((d / "junit.xml").read_text())
    (case,) = [c for c in junit.iter("testcase") if c.get("name") == "requires elr-election"]
    assert case.find("error") is not None and "no run reached elr-election" in case.find("error").get("message")
    assert "NEVER REACHED" in (d / "index.html").read_text()


@pytest.mark.parametrize("value,sentence", [
    ('"elr-election"', "key 'require' must be a list of state names"),
    ('["leader-churn"]', "key 'require' names 'leader-churn', which is not a state the harness can see; valid: "),
])
def test_a_bad_require_key_is_one_sentence(tmp_path, value, sentence):
    with pytest.raises(CampaignFileError) as e:
        load_campaign(write(tmp_path, MINIMAL + f"require = {value}\n"))
    assert sentence in str(e.value)
