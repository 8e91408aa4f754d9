"""The simulator's power study: `kafkaesque sim-sweep`'s seeds recorded in the ledger (harness/sim_sweep.py), and
docs/SIMULATION.md's sentences rendered from a ledger (studies/simulation.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kafkaesque_harness.harness.sim_sweep import row_problems, sweep_row
from kafkaesque_harness.studies.simulation import (
    ROWS,
    SweepRow,
    detection_rates,
    failed,
    read_ledger,
    render_markdown,
    select_rows,
)

# A short row of a flaw variant, so the sweep test costs seconds: kill faults only, 8 virtual seconds.
SHORT = SweepRow("test-truncate", "truncate-to-hw", nemesis=("kill",),
                 overrides={"time_limit": 8.0, "nemesis_interval": 2.0, "concurrency": 3, "rate": 20.0,
                            "recovery_wait": 5.0})


def test_the_sweep_records_each_seed_in_the_ledger_and_keeps_only_failing_runs(tmp_path):
    ledger, store = tmp_path / "runs.jsonl", tmp_path / "store"
    assert row_problems(SHORT) == []
    records = sweep_row(SHORT, 3, 3, failures=1, store=str(store), ledger=ledger, log=lambda _m: None)
    lines = read_ledger(ledger)
    assert [r["seed"] for r in lines] == [r["seed"] for r in records]
    seeds = [r["seed"] for r in lines]
    assert seeds == list(range(3, 3 + len(seeds))) and 1 <= len(seeds) <= 3
    for r in lines:
        assert r["row"] == "test-truncate" and r["variant"] == "truncate-to-hw"
        assert r["settings"]["time_limit"] == 8.0 and r["settings"]["nemesis"] == ["kill"]
        assert r["valid"] in (True, False, "unknown") and r["error"] is None, r
        assert r["cpu_s"] > 0 and r["virtual_s"] > 8.0
        if failed(r):  # kept, with what caught it
            assert r["run"] and (store / r["run"] / "results.json").is_file()
            assert r["anomalies"] and set(r["by"]) <= {"history", "state", "trace"}
        else:  # removed: a sweep keeps failing runs only
            assert r["run"] is None and not (store / f"sim-test-truncate-s{r['seed']}").exists()
    caught = [r["seed"] for r in lines if failed(r)]
    # the row stops at its first failing seed (failures=1): no seed after it was run
    assert not caught or seeds[-1] == caught[0]
    # a second sweep over the same seeds resumes: nothing is run again
    sweep_row(SHORT, 3, 3, failures=1, store=str(store), ledger=ledger, log=lambda _m: None)
    assert len(read_ledger(ledger)) == len(lines)


def test_every_row_of_the_study_is_one_the_simulator_can_run():
    assert {r.variant for r in ROWS.values()} >= {"default", "truncate-to-hw", "no-elr", "unclean-election",
                                                "no-epoch-fencing", "txn-markers-no-epoch-bump",
                                                "read-committed-to-hwm", "offsets-commit-acks-1", "zombie-not-fenced"}
    for row in ROWS.values():
        assert row_problems(row) == [], row.name


def test_an_unknown_row_is_refused_with_the_valid_names():
    try:
        select_rows(["no-such-row"])
    except ValueError as e:
        assert "unknown sweep row no-such-row" in str(e) and "truncate-to-hw" in str(e)
    else:
        raise AssertionError("an unknown row was accepted")


# --- the page, from a hand-written ledger ------------------------------------------------------------------------

def _rec(row: str, seed: int, valid, by=None, run=None) -> dict:
    by = by or {}
    return {"row": row, "variant": ROWS[row].variant, "seed": seed, "settings": ROWS[row].settings(), "digest": "d",
            "valid": valid, "exit": 1 if valid is False else 0, "by": by, "first_s": {s: 4.5 for s in by},
            "anomalies": sorted({k for v in by.values() for k in v}), "unknown_why": [], "error": None,
            "cpu_s": 2.0, "virtual_s": 50.0, "run": run}


DETECTION_PAGE = """
| variant | acks | flush | min ISR | fault plan | run | runs | found (95%) | anomalies |
|---|---|---|---|---|---|---|---|---|
| truncate-to-hw | all | never | 2 | `protocol` | 300 s | 5 | 5/5 (48%-100%) | lost-write |
| truncate-to-hw | all | never | 1 | `protocol` | 300 s | 3 | 3/3 (29%-100%) | lost-write |
| no-elr | all | never | 2 | `kill,partition` | 300 s | 5 | 0/5 (<45%) | - |
"""


def _page(records: list[dict]) -> str:
    return render_markdown(records, "kafkaesque sim-sweep --render-only", DETECTION_PAGE,
                           rows=[ROWS["default"], ROWS["truncate-to-hw"], ROWS["no-elr"]])


def test_the_page_says_a_clean_default_as_none_of_n_seeds_with_its_bound_and_that_it_was_simulated():
    records = [_rec("default", s, True) for s in range(1, 51)]
    page = _page(records)
    assert "**Every figure on this page was simulated**" in page
    assert "- `default` (queue): an anomaly in 0 of 50 seeds judged: rate below 5.8% (95%)." in page
    # unknown seeds are no evidence of a clean run: left out of the bound, and said
    records += [{**_rec("default", 51, "unknown"), "unknown_why": ["faults: the clock fault was planned but never "
                                                                   "applied (no attempt was made)"]}]
    assert ("an anomaly in 0 of 50 seeds judged: rate below 5.8% (95%); 1 more seeds unknown, not counted (evidence "
            "missing: faults: the clock fault was planned but never applied (1))") in _page(records)


def test_the_page_lists_each_anomaly_of_the_default_broker_with_its_seed_and_replay():
    records = [_rec("default", s, True) for s in range(1, 10)]
    records.append(_rec("default", 10, False, {"trace": ["log-divergence"]}, run="sim-default-s10/20261128T000000"))
    page = _page(records)
    assert "1 of 10 seeds (10%, 95% CI 0.25%-45%) found an anomaly" in page
    assert ("seed 10: log-divergence, caught by trace; whose: not recorded; run `sim-default-s10/20261128T000000`"
            in page)
    assert "the broker's (an anomaly the checkers give the broker, or a seed that ran before the ledger said whose): " \
           "**1 of 10 seeds (10%, 95% CI 0.25%-45%)**" in page
    # a seed whose anomalies the checkers gave the client alone is not the broker's
    records[-1]["whose"] = {"client": 3}
    page = _page(records)
    assert "said whose): **0 of 10 seeds: rate below 26% (95%)**; the others' anomalies are a client's alone" in page
    assert "seed 10: log-divergence, caught by trace; whose: client 3; run" in page
    assert "replay: `kafkaesque sim --seed 10 --broker-variant default" in page


def test_the_page_gives_a_caught_variant_its_first_seed_share_interval_checkers_and_the_real_rate():
    records = [_rec("truncate-to-hw", s, s not in (4, 9), {"trace": ["log-shorter-after-restart"]} if s == 4 else
                    {"history": ["lost-write"], "state": ["log-divergence"]} if s == 9 else None,
                    run=f"sim-truncate-to-hw-s{s}/x" if s in (4, 9) else None) for s in range(1, 11)]
    row = next(line for line in _page(records).splitlines() if line.startswith("| truncate-to-hw |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # variant, workload, seeds run, seeds to first catch, caught (95%), caught by, anomalies, beyond default, unknown,
    # within 1,000, real protocol (acks=all, min ISR >= 2 only), real kill,partition
    assert cells[:5] == ["truncate-to-hw", "queue", "10", "4", "2/10 (2.5%-56%)"]
    assert cells[5] == "history 1, state 1, trace 1"
    assert cells[7] == ""  # no seed of the default's twin row: nothing to set the kinds beside
    assert cells[9] == "yes, at seed 4"
    assert cells[10:] == ["5/5 (48%-100%)", "not run"]
    # with the default's row run and showing log-divergence once, the flaw's own kinds are the others
    records += [_rec("default", 1, False, {"state": ["log-divergence"]}), _rec("default", 2, True)]
    row = next(line for line in _page(records).splitlines() if line.startswith("| truncate-to-hw |"))
    assert [c.strip() for c in row.strip("|").split("|")][7] == "log-shorter-after-restart, lost-write"


def test_the_page_says_a_variant_never_caught_was_not_found_within_its_budget():
    records = [_rec("no-elr", s, True if s % 2 else "unknown") for s in range(1, 21)]
    row = next(line for line in _page(records).splitlines() if line.startswith("| no-elr |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:5] == ["20", "-", "0/20 (<14%)"]
    assert cells[8] == "10"  # unknown seeds, counted apart
    assert cells[9] == "**not found in 20 seeds** (the budget)"
    assert cells[10:] == ["not run", "0/5 (<45%)"]


def test_detection_rates_count_only_the_contract_rows_of_the_real_page():
    rates = detection_rates(DETECTION_PAGE)
    assert rates["truncate-to-hw"] == {"protocol": [5, 5]}  # the min ISR 1 row is left out
    assert rates["no-elr"] == {"kill,partition": [0, 5]}
    real = detection_rates(Path("docs/DETECTION.md").read_text())
    assert real["no-epoch-fencing"]["protocol"] == [5, 5] and real["zombie-not-fenced"]["protocol"] == [5, 5]


def test_a_seed_counts_as_caught_only_when_its_run_was_judged_invalid():
    assert failed({"valid": False})
    assert not failed({"valid": True}) and not failed({"valid": "unknown"}) and not failed({})


def test_the_ledger_skips_torn_and_foreign_lines(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_rec("default", 1, True)) + "\n{torn\n" + json.dumps({"other": 1}) + "\n")
    assert [r["seed"] for r in read_ledger(path)] == [1]


def test_the_sweep_digest_covers_the_simulator_as_well_as_the_broker(monkeypatch, tmp_path):
    """A sweep after the simulator changed runs its seeds again: its digest reads the simulator's files too."""
    import kafkaesque_harness.harness.sim_sweep as sweep

    before = sweep.sweep_code_digest()
    assert before == sweep.sweep_code_digest()
    fake = tmp_path / "harness" / "sim_sweep.py"  # a tree whose simulator differs in one byte
    for rel in ("clusters/sim/cluster.py", "workloads/sim/driver.py", "harness/simulate.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    fake.write_text("")
    monkeypatch.setattr(sweep, "__file__", str(fake))
    one = sweep.sweep_code_digest()
    (tmp_path / "clusters/sim/cluster.py").write_text("y")
    two = sweep.sweep_code_digest()
    assert two != one != before
    # the real workloads' modules the simulated clients import (op mixes, txn completions) count too
    (tmp_path / "workloads/txn_client.py").write_text("z")
    assert sweep.sweep_code_digest() != two


def _ledger_of(tmp_path, row_name: str, outcomes: dict[int, bool]) -> Path:
    """A ledger already holding these seeds of the row for the current code: a sweep over them runs nothing."""
    from kafkaesque_harness.harness.sim_sweep import sweep_code_digest
    from kafkaesque_harness.studies.simulation import ROWS, append_to_ledger, seed_record

    ledger = tmp_path / "runs.jsonl"
    digest = sweep_code_digest()
    for seed, valid in outcomes.items():
        results = {"valid": valid, "checkers": {"trace": {"valid": valid, "anomaly_types": [] if valid else
                                                          ["sequence-reused"]}}}
        append_to_ledger(ledger, seed_record(ROWS[row_name], seed, 0 if valid else 1, results, 1.0, 50.0,
                                             None if valid else f"sim-{row_name}-s{seed}/x", digest))
    return ledger


def _sweep_cli(tmp_path, ledger: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from kafkaesque_harness.harness.cli import main; "
                           "sys.argv[0] = 'kafkaesque'; main()", "sim-sweep", "--row", "default-swarm", "--seeds", "2",
                           "--start-seed", "7", "--ledger", str(ledger), "--out", str(tmp_path / "SIM.md"),
                           "--store", str(tmp_path / "store"), *flags], capture_output=True, text=True, timeout=300)


def test_fail_on_anomaly_exits_1_and_prints_each_failing_seeds_replay_command(tmp_path):
    out = _sweep_cli(tmp_path, _ledger_of(tmp_path, "default-swarm", {7: True, 8: False}), "--fail-on-anomaly")
    assert out.returncode == 1, out.stderr
    text = " ".join(out.stderr.split())
    assert "default-swarm seed 8: anomaly sequence-reused; replay: kafkaesque sim --seed 8 " in text
    assert "--swarm" in text and "seed 7:" not in text


def test_fail_on_anomaly_exits_0_when_every_seed_of_the_sweep_passed(tmp_path):
    out = _sweep_cli(tmp_path, _ledger_of(tmp_path, "default-swarm", {7: True, 8: True}), "--fail-on-anomaly")
    assert out.returncode == 0, out.stderr
# --- the mutants' rows ---------------------------------------------------------------------------------------------

def test_every_catalogue_mutant_has_a_row_with_the_workload_that_reaches_its_code():
    from kafkaesque_harness.clusters.mutants import MUTANTS

    rows = {r.mutant: r for r in ROWS.values() if r.mutant}
    assert set(rows) == {m.name for m in MUTANTS}
    assert rows["hwm-leader-leo"].workload_label() == "queue"
    assert rows["txn-abort-not-fenced"].workload == "txn"
    assert rows["sequence-gap-accepted"].workload == "txn"  # producer_state.py: sequences and the LSO
    assert rows["group-commit-stale-generation"].workload_label() == "queue (subscribe)"
    assert all(r.variant == "default" and not r.is_default for r in rows.values())
    assert "--mutant hwm-leader-leo" in rows["hwm-leader-leo"].replay_command(3)
    assert "--mutant" not in ROWS["default"].replay_command(3) and "mutant" not in ROWS["default"].settings()


def test_a_mutant_rows_seed_runs_the_mutants_broker(tmp_path):
    # a short row of a mutant the trace checker catches at once (the HWM at the leader's LEO)
    row = SweepRow("test-mutant", "default", nemesis=("kill",), mutant="hwm-leader-leo",
                   overrides={"time_limit": 8.0, "nemesis_interval": 2.0, "concurrency": 3, "rate": 20.0,
                              "recovery_wait": 5.0})
    ledger, store = tmp_path / "runs.jsonl", tmp_path / "store"
    [rec] = sweep_row(row, 1, 1, failures=1, store=str(store), ledger=ledger, log=lambda _m: None)
    assert rec["settings"]["mutant"] == "hwm-leader-leo" and rec["error"] is None
    assert failed(rec) and "hwm-past-member-leo" in rec["anomalies"], rec
    assert json.loads((store / rec["run"] / "test.json").read_text())["mutant"] == "hwm-leader-leo"
    # the default broker's seed 1 of the same settings is not caught: the catch is the mutant's
    plain = SweepRow("test-plain", "default", nemesis=("kill",), overrides=row.overrides)
    [rec] = sweep_row(plain, 1, 1, failures=1, store=str(store), ledger=ledger, log=lambda _m: None)
    assert rec["valid"] is True, rec


def _mutant_rec(name: str, seed: int, by=None, digest: str = "d") -> dict:
    row = ROWS["mutant-" + name]
    return {**_rec("default", seed, False if by else True, by), "row": row.name, "settings": row.settings(),
            "digest": digest, "run": f"sim-{row.name}-s{seed}/x" if by else None}


def test_the_page_gives_each_mutant_its_share_first_catch_checkers_and_the_real_rate():
    records = [_mutant_rec("hwm-leader-leo", 1), _mutant_rec("hwm-leader-leo", 2, {"trace": ["hwm-past-member-leo"]}),
               _mutant_rec("hwm-leader-leo", 3, {"trace": ["hwm-past-member-leo"], "history": ["lost-write"]}),
               *[_mutant_rec("isr-expand-stale-broker-epoch", s) for s in range(1, 6)]]
    real = {"hwm-leader-leo": [2, 2], "isr-expand-stale-broker-epoch": [0, 3]}
    page = render_markdown(records, "kafkaesque sim-sweep --render-only", DETECTION_PAGE, mutation_real=real,
                           rows=[ROWS["default"], ROWS["mutant-hwm-leader-leo"], ROWS["mutant-isr-expand-stale-broker-epoch"]])
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
             for line in page.splitlines() if line.startswith("| `")}
    # mutant, workload, seeds run, seeds to first catch, caught (95%), caught by, anomalies, beyond default, unknown,
    # CPU s, real
    assert cells["`hwm-leader-leo`"][1:6] == ["queue", "3", "2", "2/3 (9.4%-99%)", "history 1, trace 2"]
    assert cells["`hwm-leader-leo`"][10] == "2/2 (16%-100%)"
    assert cells["`hwm-leader-leo`"][11] == "0 (2 not known)"  # these lines say no whose
    assert cells["`isr-expand-stale-broker-epoch`"][2:6] == ["5", "-", "0/5 (<45%)", "-"]
    assert cells["`isr-expand-stale-broker-epoch`"][10] == "0/3 (<63%)"
    # the mutants are not the default broker: its section has no seed of theirs
    assert "- `default` (queue): not run." in page
    assert "| mutant hwm-leader-leo | 2 | hwm-past-member-leo | trace |" in page
    # a seed caught by the client's own acts alone is no catch of the mutant; one with the broker's is
    records[1]["whose"], records[2]["whose"] = {"client": 2}, {"broker": 1, "client": 1}
    page = render_markdown(records, "kafkaesque sim-sweep --render-only", DETECTION_PAGE, mutation_real=real,
                           rows=[ROWS["default"], ROWS["mutant-hwm-leader-leo"]])
    row = next(line for line in page.splitlines() if line.startswith("| `hwm-leader-leo`"))
    assert row.strip().strip("|").split("|")[11].strip() == "1"


def test_a_row_swept_again_on_new_code_counts_the_new_sweeps_seeds_alone():
    old = [{**_rec("default", s, False, {"trace": ["sequence-reused"]}), "digest": "old"} for s in range(1, 6)]
    new = [{**_rec("default", s, True), "digest": "new"} for s in range(1, 4)]
    page = _page(old + new)
    assert "- `default` (queue): an anomaly in 0 of 3 seeds judged" in page
    assert "sequence-reused" not in page.split("## The flaw variants")[0]


def test_a_seeds_ledger_line_keeps_whose_its_anomalies_are():
    from kafkaesque_harness.studies.simulation import seed_record

    results = {"valid": False, "checkers": {}, "attribution": {"anomalies": 4, "broker": 1, "client": 3, "harness": 0,
                                                               "unattributed": 0, "libraries": [], "text": ""}}
    assert seed_record(ROWS["default-txn"], 1, 1, results, 1.0, 50.0, None, "d")["whose"] == {"broker": 1, "client": 3}
    valid = {"valid": True, "checkers": {}, "attribution": None}
    assert seed_record(ROWS["default-txn"], 2, 0, valid, 1.0, 50.0, None, "d")["whose"] == {}
