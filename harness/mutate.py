"""`kafkaesque mutate`'s runs (issue 22, deliverable 3): each mutant of clusters/mutants.py under the fault plans of
studies/mutation.py, on a temporary copy of the node code, one run at a time; and the quick cross-check that
runs the broker's unit tests against a mutant. The table (docs/MUTATION.md) is studies/mutation.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.code_copy import REPO_ROOT, CodeCopy
from kafkaesque_harness.clusters.mutants import Mutant
from kafkaesque_harness.harness.runner import run_test
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.studies.mutation import (
    COMMON,
    PLANS,
    RUN_FILE,
    all_records,
    classify,
    counts,
    default_plans,
    mutant_copy,
    node_digests,
    run_key,
    stored_runs,
    test_name,
)

# The broker's own unit tests (the quick cross-check: is the mutant killed without a cluster?).
UNIT_TESTS = ("test_replica.py", "test_replica_producer_state.py", "test_controller.py", "test_controller_elr.py",
              "test_controller_reassign.py", "test_broker_log_epoch_cache.py", "test_broker_log_partition.py",
              "test_broker_log_model.py", "test_broker_log_batch.py", "test_broker_log_flush_checkpoints.py",
              "test_kafka_api.py",
              # the coordinators' (issue 40's mutants): their state machines, the shell's glue, producer state
              "test_txn_coordinator.py", "test_group_coordinator.py", "test_producer_state_txn.py",
              "test_broker_txn.py", "test_broker_groups.py", "test_kafka_api_txn.py", "test_kafka_api_groups.py")


def run_mutant(m: Mutant, plan: str, seed: int, time_limit: float, store: str, cluster: str,
               log: Callable[[str], None] = print, copy: CodeCopy | None = None) -> dict[str, Any]:
    """One run of one mutant under one plan; returns its mutant.json (also written into the run dir)."""
    own = copy is None
    copy = copy or mutant_copy(m)
    try:
        spec = TestSpec.make(name=test_name(m.name, plan), time_limit=time_limit, seed=seed, store=store,
                        cluster=cluster, node_code=str(copy.root), **COMMON, **PLANS[plan])
        problems = spec.problems()
        if problems:
            raise ValueError(" ".join(problems))
        mono_start = time.monotonic()  # places node lines (trace anomalies) in the run: studies/mutation.py
        code, run_dir = run_test(spec, log=log)
        digests = node_digests(run_dir)
        doc = {"mutant": m.name, "plan": plan, "seed": seed, "time_limit": time_limit, "cluster": cluster,
               "digest": copy.digest, "files": m.files, "exit": code, "node_digests": digests,
               "mono_start": mono_start,
               "code_verified": bool(digests) and all(d == copy.digest for d in digests.values())}
        (run_dir / RUN_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        return {**doc, "run_dir": str(run_dir)}
    finally:
        if own:
            copy.close()


def measure(mutants: list[Mutant], plans: list[str] | None, seeds: list[int], time_limit: float, store: str,
            cluster: str, log: Callable[[str], None] = print,
            after_each: Callable[[], None] | None = None, ledger: str | Path | None = None) -> tuple[int, int]:
    """Run every (mutant, plan, seed) not yet in the store or the ledger, one at a time; (ran, skipped). `plans`
    None: each mutant's own (studies/mutation.py default_plans)."""
    have = {run_key(d) for d in all_records(store, ledger) if counts(d)}
    ran = skipped = 0
    for m in mutants:
        with mutant_copy(m) as copy:
            for plan in plans if plans is not None else default_plans(m):
                for seed in seeds:
                    if (m.name, plan, seed, float(time_limit), copy.digest) in have:
                        skipped += 1
                        continue
                    log(f"mutate: {m.name} under {plan}, seed {seed}, {time_limit:g} s")
                    doc = run_mutant(m, plan, seed, time_limit, store, cluster, log, copy=copy)
                    results = json.loads((Path(doc["run_dir"]) / "results.json").read_text())
                    if results.get("interrupted"):
                        # Ctrl-C or SIGTERM: the run healed and tore down; stop here (a resume makes it again).
                        log(f"mutate: interrupted ({results['interrupted']}); stopping, the store keeps what finished")
                        return ran, skipped
                    found = classify(results, doc["mono_start"])
                    log(f"mutate: {m.name} {plan} seed {seed}: " + (", ".join(
                        f"{s} ({', '.join(a)})" for s, a in found["by"].items()) or "not caught")
                        + ("" if doc["code_verified"] else " [nodes did NOT run the mutant's code]"))
                    ran += 1
                    if after_each:
                        after_each()
    return ran, skipped


def reanalyze(store: str, mutants: list[Mutant], log: Callable[[str], None] = print) -> int:
    """Check every stored run of these mutants again with this tree's checkers (`kafkaesque analyze`: the same
    history, node dumps and traces), so the table says what the current checkers find in them; the count."""
    from kafkaesque_harness.harness.runner import analyze_run
    from kafkaesque_harness.results.store import write_json

    names = {m.name for m in mutants}
    done = 0
    for doc in stored_runs(Path(store)):
        if doc.get("mutant") not in names or not counts(doc):
            continue
        run_dir = Path(doc["run_dir"])
        test = json.loads((run_dir / "test.json").read_text())
        test["run_dir"] = str(run_dir)
        write_json(run_dir / "results.json", analyze_run(run_dir, test, doc["results"]))
        done += 1
        log(f"mutate: re-checked {run_dir}")
    return done


# --- unit tests against a mutant --------------------------------------------------------------------------
def unit_test_mutant(m: Mutant, store: str, timeout_s: float = 600) -> dict[str, Any]:
    """Run the broker's unit tests (UNIT_TESTS) with the mutant's copy first on the path; stored as
    <store>/unit-tests/<mutant>.json: {"mutant", "digest", "killed", "summary"}."""
    with mutant_copy(m) as copy:
        tests = [str(REPO_ROOT / "tests" / "unit" / t) for t in UNIT_TESTS if (REPO_ROOT / "tests" / "unit" / t).exists()]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy.root), str(REPO_ROOT)])}
        # -P and --import-mode=append: neither the working directory nor the test's root dir may come
        # before the copy on the path (that would test this tree's code, not the mutant's).
        argv = [sys.executable, "-P", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--import-mode=append",
                "-p", "no:kafkaesque", *tests]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=copy.root)
            summary = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
            killed = p.returncode != 0
        except subprocess.TimeoutExpired:
            summary, killed = f"timed out after {timeout_s:g} s", True
        doc = {"mutant": m.name, "digest": copy.digest, "killed": killed, "summary": summary}
    out = Path(store) / "unit-tests"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{m.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc
