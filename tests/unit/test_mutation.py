"""The mutation catalogue (clusters/mutants.py), the code copies mutants run on (clusters/code_copy.py), and
docs/MUTATION.md rendered from a hand-made store (studies/mutation.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.base import ClusterSpec
from kafkaesque_harness.clusters.broker.code_digest import node_code_digest
from kafkaesque_harness.clusters.code_copy import (
    REPO_ROOT,
    CodeCopy,
    Edit,
    SnippetError,
    apply_edits,
    find_code_copies,
)
from kafkaesque_harness.clusters.mutants import MUTANTS, Mutant
from kafkaesque_harness.clusters.ownership import run_state
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.studies.mutation import (
    all_records,
    catalogue_problems,
    classify,
    node_digests,
    read_ledger,
    render_markdown,
    stored_runs,
    summarize,
    write_mutation_doc,
)

BROKER_MODULES = {f: "kafkaesque_harness.clusters." + f.removeprefix("clusters/").removesuffix(".py").replace("/", ".")
                  for m in MUTANTS for f in m.files}


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    # Registrations of code copies go to a private state dir, not the machine's (clusters/ownership.py).
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))


# --- the catalogue --------------------------------------------------------------------------------------------
def test_catalogue_is_large_enough_and_each_entry_is_complete():
    assert len(MUTANTS) >= 15
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        assert m.edits and m.rule and m.cite and m.expect, m.name
        assert all(e.file.startswith("clusters/broker/") for e in m.edits), m.name
        assert all(e.old != e.new for e in m.edits), m.name


def test_every_mutant_applies_exactly_once_to_the_current_broker():
    # A broker edit that orphans a mutant fails here, naming the mutant and its file.
    assert catalogue_problems() == []


def test_an_orphaned_snippet_is_one_sentence_naming_the_mutant_and_file():
    ghost = Mutant("ghost", (Edit("clusters/broker/replica.py", "self.hwm = 42  # not there", "x"),), "r", "c", "e")
    twice = Mutant("twice", (Edit("clusters/broker/replica.py", "self.hwm", "self.hwm"),), "r", "c", "e")
    problems = catalogue_problems(mutants=(ghost, twice))
    assert len(problems) == 2
    assert "mutant ghost" in problems[0] and "clusters/broker/replica.py" in problems[0]
    assert "does not occur" in problems[0] and "update the snippet" in problems[0]
    assert "mutant twice" in problems[1] and "occurs" in problems[1] and "times" in problems[1]


def test_apply_edits_writes_nothing_when_one_edit_cannot_apply(tmp_path):
    f = tmp_path / "a.py"
    f.write_text("x = 1\ny = 2\n")
    with pytest.raises(SnippetError, match="m: the snippet `z = 3` does not occur in a.py"):
        apply_edits(tmp_path, [Edit("a.py", "x = 1", "x = 0"), Edit("a.py", "z = 3", "z = 4")], "m")
    assert f.read_text() == "x = 1\ny = 2\n"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutated_copy_differs_compiles_and_imports(mutant):
    before = node_code_digest(REPO_ROOT)
    with CodeCopy(mutant.edits, label=mutant.name) as copy:
        assert copy.digest != before
        for e in mutant.edits:
            text = (copy.package / e.file).read_text()
            assert e.new in text and text.count(e.old) == text.count(e.new) * (e.old in e.new)
        modules = sorted({BROKER_MODULES[f] for f in mutant.files})
        # -P: the copy, not this tree, is what imports (the nodes start the same way).
        code = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; " \
               "import kafkaesque_harness.clusters as c; print(c.__file__)"
        p = subprocess.run([sys.executable, "-P", "-c", code, *modules], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(copy.root)}, cwd=str(REPO_ROOT), timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip().startswith(str(copy.root)), p.stdout
    assert node_code_digest(REPO_ROOT) == before  # the shipped tree never holds a mutant


# --- code copies ------------------------------------------------------------------------------------------------
def test_a_code_copy_is_registered_found_by_cleanup_and_removed_on_close():
    copy = CodeCopy([], label="probe")
    try:
        assert (copy.package / "clusters" / "broker" / "replica.py").is_file()
        assert copy.digest == node_code_digest(REPO_ROOT)  # no edit: the same node code
        assert run_state(copy.owner) == "live"
        found = [f for f in find_code_copies() if f.owner == copy.owner]
        assert len(found) == 1 and str(copy.root) in found[0].what
    finally:
        copy.close()
    assert not copy.root.exists()
    assert run_state(copy.owner) == "unregistered"
    assert not [f for f in find_code_copies() if f.owner == copy.owner]


def test_cleanup_removes_the_copy_of_a_harness_that_died_and_spares_a_live_one(tmp_path):
    from kafkaesque_harness.clusters.cleanup import carry_out, plan_cleanup
    from tests.unit.test_ownership import dead_harness

    dead, live = CodeCopy([], label="dead"), CodeCopy([], label="live")
    try:
        # As if the harness that made `dead` was killed before it could remove it.
        data = json.loads(dead._record.path.read_text())
        data["harness"] = __import__("dataclasses").asdict(dead_harness())
        dead._record.path.write_text(json.dumps(data))
        plan = plan_cleanup(found=find_code_copies())
        assert [i.what for i in plan.remove if i.owner == dead.owner] == [f"code copy {dead.root}",
                                                                          f"registration of run {dead.owner}"]
        assert live.owner in plan.skipped_live
        carry_out(plan, lambda m: None)
        assert not dead.root.exists() and live.root.exists()
    finally:
        dead._record = None  # its registration went with the cleanup
        dead.close()
        live.close()


def test_a_copy_that_cannot_apply_leaves_nothing_behind(tmp_path):
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kafkaesque-code-bad*"))
    with pytest.raises(SnippetError):
        CodeCopy([Edit("clusters/broker/replica.py", "no such line at all", "x")], label="bad")
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kafkaesque-code-bad*")) == before


def test_local_nodes_run_the_copy_first_on_the_path(tmp_path):
    from kafkaesque_harness.clusters.local import LocalCluster

    c = LocalCluster(ClusterSpec(node_code="/tmp/copy-x"), str(tmp_path / "run"))
    c.ports = {n: 9000 + i for i, n in enumerate(c.nodes())}
    for node in c.nodes():
        argv = c.node_argv(node)
        assert argv[1] == "-P" and argv[2:4] == ["-m", "kafkaesque_harness.clusters.broker"]
        assert c.node_env(node)["PYTHONPATH"].split(os.pathsep)[0] == "/tmp/copy-x"
    plain = LocalCluster(ClusterSpec(), str(tmp_path / "run2"))
    plain.ports = dict(c.ports)
    assert plain.node_argv("broker-1")[1] == "-m" and "PYTHONPATH" not in plain.node_env("broker-1")


def test_node_code_is_checked_before_a_run(tmp_path):
    assert TestSpec.make(node_code=str(tmp_path)).problems(only={"node_code"}) == [
        f"node_code={str(tmp_path)!r} holds no kafkaesque_harness/clusters/broker/__main__.py; give a directory "
        "holding a copy of the kafkaesque_harness package with its clusters/ (clusters/code_copy.py lays one out)."]
    (tmp_path / "kafkaesque_harness" / "clusters" / "broker").mkdir(parents=True)
    (tmp_path / "kafkaesque_harness" / "clusters" / "broker" / "__main__.py").write_text("")
    assert TestSpec.make(node_code=str(tmp_path), cluster="local").problems(only={"node_code", "cluster"}) == []


# --- the table from a hand-made store -----------------------------------------------------------------------
def _op(t_s: float, f: str = "poll") -> dict:
    return {"type": "ok", "f": f, "process": 1, "time": int(t_s * 1e9), "value": None}


def _results(**checkers) -> dict:
    valid = False if any(c.get("valid") is False for c in checkers.values()) else True
    return {"valid": valid, "checkers": {"faults": {"valid": True, "anomaly_types": [], "anomalies": []},
                                         **checkers}}


def _anomalous(name: str, examples: list) -> dict:
    return {"valid": False, "anomaly_types": [name], "anomalies": [{"name": name, "examples": examples}]}


CLEAN = {"valid": True, "anomaly_types": [], "anomalies": []}


def _store_run(store: Path, mutant: str, plan: str, seed: int, results: dict, verified: bool = True,
               exit: int = 1) -> Path:
    d = store / f"mutant-{mutant}-{plan}" / f"2026112{seed}T000000"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(results))
    (d / "mutant.json").write_text(json.dumps({"mutant": mutant, "plan": plan, "seed": seed, "time_limit": 120.0,
                                               "digest": "abc", "code_verified": verified, "exit": exit,
                                               "cluster": "local"}))
    latest = d.parent / "latest"
    if not latest.exists():
        latest.symlink_to(d.name)  # as the store makes it: must not count the run twice
    return d


@pytest.fixture
def store(tmp_path) -> Path:
    s = tmp_path / "store"
    names = [m.name for m in MUTANTS]
    # names[0]: history in both plans; names[1]: trace only, one plan of two; names[2]: never;
    # names[3]: only the end-of-run state dumps; names[4]: an unverified run only (left out).
    _store_run(s, names[0], "protocol", 1, _results(queue=_anomalous("lost-write", [{"send": _op(20, "send"),
                                                                                      "poll": _op(30)}]),
                                                      replicas=CLEAN))
    _store_run(s, names[0], "random", 2, _results(**{"log-order": _anomalous("stale-read", [[_op(50), _op(10)]])}))
    _store_run(s, names[1], "protocol", 3, _results(queue=CLEAN, trace=_anomalous("hwm-above-member-leo",
                                                                                  [{"time_s": 12.5, "lines": []}])))
    _store_run(s, names[1], "random", 4, _results(queue=CLEAN, trace=CLEAN))
    _store_run(s, names[2], "protocol", 5, {"valid": "unknown", "checkers": {
        "queue": {"valid": "unknown", "anomaly_types": [], "anomalies": [],
                  "unknown_reasons": ["partitions [0] have acknowledged sends but no complete final read"]},
        "replicas": CLEAN}})
    _store_run(s, names[3], "random", 6, _results(queue=CLEAN, replicas=_anomalous("log-divergence",
                                                                                   [{"node": "broker-1"}])))
    _store_run(s, names[4], "random", 7, _results(queue=_anomalous("lost-write", [])), verified=False)
    _store_run(s, names[4], "protocol", 8, {"valid": "unknown", "checkers": {}}, exit=3)  # the harness failed
    _store_run(s, names[5], "protocol", 9, {"valid": "unknown", "checkers": {}, "interrupted": "SIGTERM"}, exit=2)
    return s


def test_classify_names_the_source_of_each_finding_and_its_first_proof():
    r = _results(queue=_anomalous("lost-write", [{"poll": _op(30)}]),
                 trace=_anomalous("ack-above-hwm", [{"time_s": 7.0}]),
                 custom={**_anomalous("x", []), "source": "trace"})
    found = classify(r)
    assert found["by"] == {"history": ["lost-write"], "trace": ["ack-above-hwm", "x"]}
    assert found["first_s"] == {"history": 30.0, "trace": 7.0}
    assert classify(_results(queue=CLEAN))["by"] == {}


def test_classify_leaves_out_an_anomaly_every_instance_of_which_is_the_client_librarys():
    def unseen(whose: dict) -> dict:
        return {"name": "unseen", "count": 3, "whose": whose, "examples": [{"ops": [_op(10)]}]}

    lost = {"name": "lost-write", "count": 1, "examples": [{"poll": _op(30)}]}
    client_only = {"valid": False, "anomaly_types": ["unseen"], "anomalies": [unseen({"client": 3})]}
    assert classify(_results(txn=client_only))["by"] == {}  # the shipped broker's kafka-python artefact
    partly = {"valid": False, "anomaly_types": ["unseen"], "anomalies": [unseen({"client": 2})]}
    assert classify(_results(txn=partly))["by"] == {"history": ["unseen"]}  # one instance unexplained: counts
    both = {"valid": False, "anomaly_types": ["lost-write", "unseen"], "anomalies": [lost, unseen({"client": 3})]}
    found = classify(_results(txn=both))
    assert found["by"] == {"history": ["lost-write"]} and found["first_s"] == {"history": 30.0}


def rows_of(runs):
    return {r.mutant.name: r for r in summarize(runs)}


def test_summary_counts_each_mutant_by_source(store):
    runs = stored_runs(store)
    assert len(runs) == 9  # the `latest` links are not counted again
    assert rows_of(runs)[MUTANTS[5].name].failed == 1 and rows_of(runs)[MUTANTS[5].name].verdict == "not run"
    rows = {r.mutant.name: r for r in summarize(runs)}
    a, b, c, d, e = (rows[m.name] for m in MUTANTS[:5])
    assert (a.runs, a.caught_runs, a.caught, a.by_plan) == (2, 2, {"history": 2}, {"protocol": [1, 1],
                                                                                  "random": [1, 1]})
    assert a.median_first_s == 40.0  # 30 (the poll proving the loss) and 50: the latest op of each example
    assert a.verdict == "caught by history"
    assert (b.caught, b.by_plan, b.median_first_s, b.verdict) == (
        {"trace": 1}, {"protocol": [1, 1], "random": [0, 1]}, 12.5, "caught by trace")
    assert (c.runs, c.caught_runs, c.verdict) == (1, 0, "not caught (1 of 1 run(s) unknown: queue: partitions [0] "
                                                        "have acknowledged sends but no complete final read)")
    assert (d.caught, d.median_first_s, d.verdict) == ({"state": 1}, None, "caught by state")
    assert (e.runs, e.unverified, e.failed, e.verdict) == (0, 1, 1, "not run")


def test_markdown_gives_shares_and_a_row_per_mutant(store):
    md = render_markdown(summarize(stored_runs(store), {MUTANTS[0].name: {"killed": True, "summary": "1 failed"}}),
                         "kafkaesque mutate --store S", "Plans: protocol, random.")
    assert "Generated by `kafkaesque mutate --store S` on this machine. Plans: protocol, random." in md
    assert f"- Mutants measured: 4 of {len(MUTANTS)} in the catalogue." in md
    assert "- Caught (any source, in at least one run): 3 of 4 mutants (75%, 95% CI 19%-99%)." in md
    assert "- Caught by the client histories (what a history-only check finds, whatever else caught it too): 1 of 4 mutants (25%, 95% CI 0.63%-81%)." in md
    assert "- Caught by the trace checker: 1 of 4 mutants (25%, 95% CI 0.63%-81%)." in md
    assert "- Caught only by the end-of-run state dumps: 1." in md
    assert "a liveness failure the checkers do not call a violation): 1." in md
    assert "Killed by the broker's unit tests (`--unit-tests`): 1 of 1" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{MUTANTS[0].name}` |"))
    assert "| caught by history | 2/2 (16%-100%) | 1/1 (2.5%-100%) | 1/1 (2.5%-100%) | 2 (lost-write, stale-read) | - | - | 40 | killed |" in row
    unverified = next(line for line in md.splitlines() if line.startswith(f"| `{MUTANTS[4].name}` |"))
    assert "not run; 1 unverified run(s) left out; 1 run(s) the harness failed or was interrupted in left out" in \
        unverified
    assert f"- `{MUTANTS[2].name}`: expected: {MUTANTS[2].expect}." in md  # a survivor and what should catch it
    header = next(line for line in md.splitlines() if line.startswith("| mutant |"))
    for line in md.splitlines():
        if line.startswith("| `"):  # pipes inside a cell (|ISR|) are escaped: every row has the header's cells
            assert re.sub(r"\\\|", "", line).count("|") == header.count("|"), line


def test_write_mutation_doc_reads_the_store(store, tmp_path):
    out = write_mutation_doc(store, tmp_path / "docs" / "MUTATION.md", "cmd")
    text = out.read_text()
    assert text.startswith("# Mutation table")
    # what the table was made of is read from the store, not from the command that rendered it
    assert ("6 runs (20261121T000000 to 20261126T000000); plans: protocol, random; run length: 120 s; seeds: "
            "1, 2, 3, 4, 5, 6; cluster: local; acks=all, flush never, min ISR 2.") in text


def test_the_ledger_keeps_the_table_when_the_store_is_gone(store, tmp_path):
    ledger = tmp_path / "docs" / "MUTATION-runs.jsonl"
    first = write_mutation_doc(store, tmp_path / "a.md", "cmd", ledger=ledger).read_text()
    records = read_ledger(ledger)
    assert len(records) == 9 and all("found" in r and "run" in r for r in records)
    (store / "unit-tests").mkdir(exist_ok=True)
    (store / "unit-tests" / f"{MUTANTS[0].name}.json").write_text(json.dumps(
        {"mutant": MUTANTS[0].name, "digest": "d", "killed": True, "summary": "1 failed"}))
    first = write_mutation_doc(store, tmp_path / "a.md", "cmd", ledger=ledger).read_text()
    assert "Killed by the broker's unit tests (`--unit-tests`): 1 of 1" in first
    # A fresh machine: no store, only the committed ledger; the same table comes out of it.
    again = write_mutation_doc(tmp_path / "no-store", tmp_path / "b.md", "cmd", ledger=ledger).read_text()
    assert again == first
    rows = {r.mutant.name: r for r in summarize(read_ledger(ledger))}
    assert rows[MUTANTS[1].name].caught == {"trace": 1} and rows[MUTANTS[1].name].median_first_s == 12.5


def test_a_store_run_replaces_its_ledger_line_when_checked_again(store, tmp_path):
    ledger = tmp_path / "runs.jsonl"
    write_mutation_doc(store, tmp_path / "a.md", "cmd", ledger=ledger)
    stale = [dict(r, found={"by": {}, "first_s": {}, "valid": True}) for r in read_ledger(ledger)]
    ledger.write_text("".join(json.dumps(r) + "\n" for r in stale) + "{torn\n")
    merged = all_records(store, ledger)
    assert len(merged) == 9  # the torn line is skipped, no run counted twice
    assert any(r["found"]["by"] for r in merged)  # the store's verdicts win over the ledger's old ones


def test_a_trace_anomaly_is_placed_in_the_run_by_its_lines_monotonic_clock():
    r = _results(trace=_anomalous("hwm-above-member-leo", [[{"node": "broker-1", "mono": 1010.0},
                                                           {"node": "broker-2", "mono": 1012.5}],
                                                          [{"node": "broker-1", "mono": 1030.0}]]))
    assert classify(r, mono_start=1000.0)["first_s"] == {"trace": 12.5}
    assert classify(r)["first_s"] == {"trace": None}  # no start known: no time claimed
    r["run"] = {"clock": {"monotonic_start_ns": 1_002_000_000_000}}  # the history's zero, as the runner records it
    assert classify(r, mono_start=1000.0)["first_s"] == {"trace": 10.5}


def test_node_digests_reads_the_start_up_line_of_every_node(tmp_path):
    for node, role in (("broker-1", "broker"), ("controller-0", "controller")):
        d = tmp_path / "nodes" / node
        d.mkdir(parents=True)
        (d / f"{role}.log").write_text(json.dumps({"event": "broker_started"}) + "\n"
                                       + json.dumps({"event": "node_code", "digest": "d1"}) + "\n")
    assert node_digests(tmp_path) == {"broker-1": "d1", "controller-0": "d1"}


def test_every_plan_is_a_valid_spec_and_disk_runs_only_when_named():
    from kafkaesque_harness.studies.mutation import COMMON, DEFAULT_PLANS, PLANS

    for name, plan in PLANS.items():
        spec = TestSpec.make(name=f"mutant-x-{name}", time_limit=300, cluster="local", **COMMON, **plan)
        assert spec.problems() == [], name
    assert set(DEFAULT_PLANS) == {"protocol", "random"} and "disk" in PLANS
