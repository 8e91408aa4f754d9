"""`kafkaesque sim-sweep`'s seeds: each a whole `kafkaesque sim` run (harness/simulate.py's simulate), in worker
processes, recorded one ledger line per seed as it finishes. The rows, the ledger and the page are
studies/simulation.py's; this module only runs seeds (it lives in the harness because it runs the simulator, as
harness/mutate.py runs mutants for studies/mutation.py).

A row's seeds are handed out in order from its start seed, at most `workers` at a time; the row stops once it has
`failures` failing seeds, `seeds` seeds, or its wall budget is spent, and the seeds in flight then finish and are
recorded too. Seeds the ledger already holds for the row's settings and code (the broker's and the simulator's,
sweep_code_digest) are not run again (a sweep resumes).
A seed's run dir is kept only when it failed or the harness failed it (the disk holds thousands of passing runs
badly); its ledger line says where, relative to the store.

Workers are spawned processes with PYTHONHASHSEED fixed as `kafkaesque sim` fixes it, so a seed's run is the run
`kafkaesque sim --seed N` with the row's settings replays. A mutant's row gets a pool of its own whose workers
load the mutant's copy of the broker first (clusters/sim/mutant.py: before the simulator is imported, in a
process of its own), as `kafkaesque sim --mutant` does.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from kafkaesque_harness.harness.runner import EXIT_HARNESS
from kafkaesque_harness.results.store import store_relative
from kafkaesque_harness.studies.mutation import current_digest
from kafkaesque_harness.studies.simulation import (
    ROWS,
    SweepRow,
    append_to_ledger,
    failed,
    history_virtual_s,
    read_ledger,
    row_records,
    seed_record,
)

SIM_HASH_SEED = "0"     # harness/cli.py's for `kafkaesque sim`: the order of sets of strings, fixed
MAX_WORKERS = 2         # the machine's cores
SEEDS_PER_WORKER = 25   # a worker process is replaced after this many seeds (bounds what a long sweep leaks)


_MUTANT_COPY: Any = None  # this worker's copy of the broker with its row's mutant (CodeCopy), when it runs one


def row_digest(row: SweepRow) -> str:
    """sweep_code_digest, and for a mutant's row its edits too (clusters/mutants.py may change one mutant alone)."""
    digest = sweep_code_digest()
    if not row.mutant:
        return digest
    from kafkaesque_harness.clusters.mutants import by_name

    edits = by_name()[row.mutant].edits
    return hashlib.sha256((digest + repr(edits)).encode()).hexdigest()[:16]


def _load_mutant(name: str) -> None:
    """A worker's initializer for a mutant's row: the broker this process loads is the mutant's copy from now on;
    the copy is removed when the worker exits."""
    import atexit

    from kafkaesque_harness.clusters.sim.mutant import mutant_code

    global _MUTANT_COPY
    _MUTANT_COPY = mutant_code(name)
    atexit.register(_MUTANT_COPY.close)


def sweep_code_digest() -> str:
    """What a seed's run depends on besides its settings: the broker's code (studies/mutation.py current_digest)
    and the simulator's (its cluster; the workloads, whose op mixes, outcome rules and txn completions the
    simulated clients import; the schedule and swarm draws; the run), so a sweep after any of them changed runs
    its seeds again. Not the checkers: a seed's run is the same under new checkers (`kafkaesque analyze` re-judges
    it)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(current_digest().encode())
    for path in sorted([*root.glob("clusters/sim/*.py"), *root.glob("workloads/*.py"), *root.glob("workloads/sim/*.py"),
                        root / "nemesis/sim_schedule.py", root / "harness/sim_swarm.py", root / "harness/simulate.py"]):
        if not path.is_file():
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def seed_spec(row: SweepRow, seed: int, store: str) -> Any:
    """The TestSpec of one seed of a row: `kafkaesque sim`'s, with the row's settings."""
    from kafkaesque_harness.harness.spec import TestSpec

    s = row.settings()
    return TestSpec.make(name=f"sim-{row.name}-s{seed}", workload=s["workload"], nemesis=list(s["nemesis"]),
                         nemesis_interval=s["nemesis_interval"],
                         nemesis_schedule=s.get("nemesis_schedule", "sequential"),
                         time_limit=s["time_limit"], concurrency=s["concurrency"], rate=s["rate"],
                         brokers=s["brokers"], controllers=s["controllers"],
                         replication_factor=s["replication_factor"], min_isr=s["min_isr"],
                         partitions=s["partitions"], acks=s["acks"], flush_policy=s["flush_policy"],
                         broker_variant=s["broker_variant"], seed=seed, store=store,
                         recovery_wait=s["recovery_wait"], workload_options=dict(s["workload_options"]))


def row_problems(row: SweepRow) -> list[str]:
    """What the simulator cannot run of a row (harness/simulate.py's sim_problems), one sentence each."""
    from kafkaesque_harness.harness.simulate import sim_problems

    spec = seed_spec(row, 0, "store")
    return sim_problems(spec) + spec.problems("flag", only=[n for n in spec.setting_names()
                                                            if n != "cluster" and not n.startswith("nemesis")])


def run_seed(row: SweepRow | str, seed: int, store: str, digest: str) -> dict[str, Any]:
    """One seed in this (worker) process: the simulated run, its ledger line; its run dir removed unless it failed.
    `row`: the row, or its name in ROWS."""
    import json

    from kafkaesque_harness.harness.simulate import simulate

    row = ROWS[row] if isinstance(row, str) else row
    mutant = None
    if row.mutant:
        if _MUTANT_COPY is None or _MUTANT_COPY.label != row.mutant:
            raise RuntimeError(f"row {row.name} runs mutant {row.mutant}, but this worker did not load it (_pool)")
        mutant = {"mutant": row.mutant, "digest": _MUTANT_COPY.digest}
    cpu0 = time.process_time()
    spec, drawn = seed_spec(row, seed, store), None
    if row.settings().get("swarm"):  # the seed draws its own settings, as `kafkaesque sim --swarm` does
        from kafkaesque_harness.harness.sim_swarm import swarm_spec

        spec, drawn = swarm_spec(spec)
    code, run_dir = simulate(spec, log=lambda _m: None, swarm=drawn, mutant=mutant)
    cpu_s = time.process_time() - cpu0
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        results = None
    virtual_s = history_virtual_s(run_dir / "history.jsonl")
    keep = code == EXIT_HARNESS or (results is not None and results.get("valid") is False)
    rec = seed_record(row, seed, code, results, cpu_s, virtual_s, store_relative(run_dir) if keep else None, digest)
    if not keep:
        shutil.rmtree(run_dir.parent, ignore_errors=True)  # the seed's test folder: its run and `latest`
    return rec


def _pool(workers: int, mutant: str = "") -> ProcessPoolExecutor:
    os.environ["PYTHONHASHSEED"] = SIM_HASH_SEED  # read by each spawned interpreter at its start
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               max_tasks_per_child=SEEDS_PER_WORKER,
                               initializer=_load_mutant if mutant else None, initargs=(mutant,) if mutant else ())


def sweep_row(row: SweepRow, start_seed: int, seeds: int, failures: int, store: str, ledger: str | Path,
              workers: int = 1, budget_s: float = 0.0, log: Callable[[str], None] = print,
              after_each: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run a row's seeds (module docstring); returns the row's ledger records for its settings, old and new."""
    workers = max(1, min(workers, MAX_WORKERS))
    digest = row_digest(row)
    # a seed whose worker died left no run: it is run again, as is a seed of other code
    done = {r["seed"]: r for r in row_records(read_ledger(ledger), row)
            if r.get("digest") == digest and not (r.get("exit") == EXIT_HARNESS and r.get("run") is None)}
    caught = sum(failed(r) for r in done.values() if start_seed <= r["seed"] < start_seed + seeds)
    todo = [s for s in range(start_seed, start_seed + seeds) if s not in done]
    deadline = time.monotonic() + budget_s if budget_s > 0 else None
    in_flight: dict[Future, int] = {}
    with _pool(workers, row.mutant) as pool:
        while todo or in_flight:
            stop = caught >= failures or (deadline is not None and time.monotonic() >= deadline)
            while todo and not stop and len(in_flight) < workers:
                seed = todo.pop(0)
                in_flight[pool.submit(run_seed, row, seed, store, digest)] = seed
            if not in_flight:
                break
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for fut in finished:
                seed = in_flight.pop(fut)
                try:
                    rec = fut.result()
                except Exception as e:  # noqa: BLE001 - a worker that died is the harness's failure, recorded
                    rec = seed_record(row, seed, EXIT_HARNESS, {"valid": "unknown", "error": f"{type(e).__name__}: {e}"},
                                      0.0, None, None, digest)
                append_to_ledger(ledger, rec)
                done[seed] = rec
                caught += failed(rec)
                log(f"sim-sweep {row.name} seed {seed}: {_verdict(rec)} ({rec['cpu_s']:.1f} CPU s)")
                if after_each is not None:
                    after_each()
    return [done[s] for s in sorted(done)]


def _verdict(rec: dict[str, Any]) -> str:
    if rec.get("error"):
        return f"harness error: {rec['error']}"
    if failed(rec):
        return f"caught: {', '.join(rec.get('anomalies') or [])} by {', '.join(sorted(rec.get('by') or {}))}"
    return "valid" if rec.get("valid") is True else "unknown"
