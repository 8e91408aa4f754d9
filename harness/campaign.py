"""Running a campaign: every planned run in order, one after the other, within a time budget.

Each run goes through `harness.runner.run_test` exactly as `kafkaesque run` would, in a
child process of its own (harness/run_child.py), and is stored as usual under
<store>/<campaign-name>/<timestamp>/. The campaign itself gets a
directory of its own, <store>/campaigns/<campaign-name>/<timestamp>/ (with a `latest`
link, as for runs), holding campaign.json, junit.xml and index.html; all three are
rewritten after every run, so a campaign killed by a CI timeout still leaves its record.

A run that crashes (run_test raises), or whose harness froze or died and was healed by
its watchdog (harness/watchdog.py: no results.json, a harness-frozen.txt), does not stop
the campaign: it is "unknown", with the error text, and its exit status 3. A run that would start once the budget is spent is "skipped" (budget);
after a Ctrl-C the remaining runs are "skipped" (interrupted).

Exit status, as for one run: 0 every run valid, 1 any invalid, 2 any unknown and none
invalid (skipped runs count for neither); 3 (bad input) is the command's, before any run.
A campaign file may `require` protocol states (checkers/coverage.py's STATES): a campaign
none of whose runs reached one of them did not test what it was for, so it exits 2 (unknown)
even when every run was valid, and campaign.json, junit.xml and index.html say which.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafkaesque_harness.harness.campaign_file import Campaign, PlannedRun
from kafkaesque_harness.harness.console import (
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_UNKNOWN,
    EXIT_VALID,
)
from kafkaesque_harness.harness.run_child import RunChildError, RunInterrupted
from kafkaesque_harness.harness.watchdog import watchdog_note
from kafkaesque_harness.results.store import create_run_dir

CAMPAIGNS_DIR = "campaigns"  # <store>/campaigns/<name>/<timestamp>/
VALID, INVALID, UNKNOWN, SKIPPED = "valid", "invalid", "unknown", "skipped"
PENDING = "pending"  # not reached yet: only seen in the files written while the campaign runs
STATUSES = (VALID, INVALID, UNKNOWN, SKIPPED, PENDING)
MAX_EXAMPLES_PER_ANOMALY = 3  # in campaign.json and the JUnit text; the run's report has them all

RunTest = Callable[..., tuple[int, Path]]  # harness.runner.run_test's shape


@dataclass
class RunRecord:
    """What campaign.json keeps of one run (and what junit.xml and index.html are rendered from)."""

    index: int
    id: str
    row: str
    column: str
    repetition: int
    spec: dict[str, Any]
    status: str = PENDING
    valid: Any = None                 # results.json's verdict: true, false, "unknown"; None if never run
    run_dir: str | None = None
    duration_s: float = 0.0
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None        # "budget" or "interrupted"
    reached: dict[str, int] = field(default_factory=dict)  # protocol state -> times the run reached it
    exit_code: int | None = None      # the run's exit status: 0 valid, 1 invalid, 2 unknown, 3 its harness failed


def resolve_cluster(campaign: Campaign) -> str:
    """Pick the cluster once for the whole campaign, so every run uses the same one (auto: docker if it answers)."""
    cluster = campaign.cluster
    if cluster == "auto":
        from kafkaesque_harness.clusters.docker import docker_available

        cluster = "docker" if docker_available() else "local"
    for planned in campaign.runs:
        planned.spec.cluster = cluster
    return cluster


def campaign_exit_code(statuses: list[str], unmet: list[str] | tuple[str, ...] = ()) -> int:
    if INVALID in statuses:
        return EXIT_INVALID
    if UNKNOWN in statuses or unmet:
        return EXIT_UNKNOWN
    return EXIT_VALID


def requirements(require: tuple[str, ...] | list[str], records: list[RunRecord]) -> list[dict[str, Any]]:
    """Each required state with the runs that reached it; met when at least one did."""
    out = []
    for state in require:
        runs = [r.id for r in records if r.reached.get(state)]
        out.append({"state": state, "met": bool(runs), "runs_reaching": len(runs)})
    return out


def run_campaign(campaign: Campaign, run: RunTest | None = None, log: Callable[[str], None] = print,
                 panel: bool = False, clock: Callable[[], float] = time.monotonic) -> tuple[int, Path]:
    """Run every planned run (cluster already resolved), write the campaign's files; return (exit, dir).

    `run` defaults to run_test in a child process (harness/run_child.py); `clock` is the budget's clock. Raises StoreError when the
    campaign directory cannot be created, before any run starts.
    """
    if run is None:
        from kafkaesque_harness.harness.run_child import run_in_child as run
    from kafkaesque_harness.results.campaign_report import write_campaign

    store = campaign.runs[0].spec.store
    campaign_dir = create_run_dir(Path(store) / CAMPAIGNS_DIR, campaign.name)
    records = [_planned_record(p) for p in campaign.runs]
    started_at, start = _now_iso(), clock()
    interrupted = False
    for planned, record in zip(campaign.runs, records, strict=True):
        if interrupted:
            record.status, record.skipped = SKIPPED, "interrupted"
        elif clock() - start >= campaign.budget:
            record.status, record.skipped = SKIPPED, "budget"
        else:
            log(f"campaign {campaign.name}: run {planned.index + 1}/{len(records)} {planned.id} "
                f"(seed {planned.spec.seed})")
            interrupted = _execute(planned, record, run, log, panel, clock)
            log(f"campaign {campaign.name}: {planned.id} -> {record.status} ({record.duration_s:.0f} s)")
        write_campaign(campaign_dir, _document(campaign, records, started_at, clock() - start))
    doc = _document(campaign, records, started_at, clock() - start, finished=True)
    write_campaign(campaign_dir, doc)
    return (EXIT_INTERRUPTED if interrupted else doc["exit_code"]), campaign_dir


def _planned_record(p: PlannedRun) -> RunRecord:
    return RunRecord(p.index, p.id, p.cell.row, p.cell.column, p.repetition, p.summary())


def _execute(planned: PlannedRun, record: RunRecord, run: RunTest, log, panel: bool,
             clock: Callable[[], float]) -> bool:
    """Run one spec and fill its record; True if the user interrupted it (the campaign then stops)."""
    t0 = clock()
    interrupted = False
    try:
        record.exit_code, run_dir = run(planned.spec, log=log, panel=panel)
        record.run_dir = str(run_dir)
        results = _read_results(Path(run_dir), record)
        interrupted = bool(results.get("interrupted"))  # run_test caught a Ctrl-C in its main phase
    except KeyboardInterrupt as e:
        # Between phases run_test lets Ctrl-C through, and the child of a run the campaign was signalled
        # during (harness/run_child.py) reports it so: either way it means "stop the campaign".
        run_dir = e.run_dir if isinstance(e, RunInterrupted) else None
        if run_dir is not None:  # it healed and wrote its results (or its watchdog its note)
            record.run_dir, record.exit_code = str(run_dir), e.code
            _read_results(run_dir, record)
        else:
            record.status, record.valid, record.error = UNKNOWN, UNKNOWN, "interrupted by the user (Ctrl-C)"
        interrupted = True
    except Exception as e:  # noqa: BLE001 - one crashed run must not end the campaign; it is recorded
        said = str(e) if isinstance(e, RunChildError) else f"{type(e).__name__}: {e}"  # the child's says it already
        record.status, record.valid, record.error = UNKNOWN, UNKNOWN, said
        record.exit_code = EXIT_HARNESS
    record.duration_s = round(clock() - t0, 3)
    return interrupted


def _read_results(run_dir: Path, record: RunRecord) -> dict[str, Any]:
    """Fill the record with the verdict, anomalies and any error from the run's results.json; return it."""
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError) as e:
        record.status, record.valid = UNKNOWN, UNKNOWN
        # a harness its watchdog found frozen (and killed) or dead writes none: the watchdog's note says so
        record.error = watchdog_note(run_dir) or f"the run wrote no readable results.json ({e})"
        record.exit_code = EXIT_HARNESS
        return {}
    valid = results.get("valid", UNKNOWN)
    record.valid = valid
    record.status = VALID if valid is True else INVALID if valid is False else UNKNOWN
    reached = results.get("reached") if isinstance(results.get("reached"), dict) else {}
    record.reached = {k: int(v.get("count", 0)) for k, v in reached.items() if isinstance(v, dict)}
    reasons = [str(results[k]) for k in ("interrupted", "error") if results.get(k)]
    if record.status == UNKNOWN:  # every missing proof, one sentence each (checkers/evidence.py)
        reasons += [str(x) for x in results.get("unknown_reasons") or [] if str(x) not in reasons]
    record.error = "; ".join(reasons) or None
    if record.status == UNKNOWN and record.error is None:
        # e.g. a checker out of budget: say which, so the JUnit <error> is not empty
        record.error = "; ".join(f"{name}: {c.get('error') or 'could not conclude'}"
                                 for name, c in (results.get("checkers") or {}).items()
                                 if c.get("valid") not in (True, False)) or "the verdict is unknown"
    for checker, c in (results.get("checkers") or {}).items():
        for a in c.get("anomalies", []):
            record.anomalies.append({
                "checker": checker, "name": a.get("name"), "count": a.get("count"),
                "explanation": a.get("explanation", ""),
                # whose its instances are (checkers/clients.py: client, broker, harness; the rest unattributed),
                # so a table can tell a client library's anomaly from the system's
                **({"whose": a["whose"]} if isinstance(a.get("whose"), dict) else {}),
                "examples": [ex.get("summary") or ex.get("explanation") or json.dumps(ex, default=str)[:300]
                             for ex in a.get("examples", [])[:MAX_EXAMPLES_PER_ANOMALY]],
            })
    return results


def _document(campaign: Campaign, records: list[RunRecord], started_at: str, elapsed: float,
              finished: bool = False) -> dict[str, Any]:
    """campaign.json: the matrix, every run's record, and the totals the views show."""
    statuses = [r.status for r in records]
    counts = {s: statuses.count(s) for s in STATUSES}
    required = requirements(campaign.require, records)
    unmet = [q["state"] for q in required if not q["met"]]
    return {
        "name": campaign.name, "source": campaign.source, "cluster": campaign.cluster,
        "store": campaign.runs[0].spec.store, "started": started_at, "duration_s": round(elapsed, 3),
        "finished": finished, "matrix": campaign.matrix(),
        "rows": list(dict.fromkeys(p.cell.row for p in campaign.runs)),
        "columns": list(dict.fromkeys(p.cell.column for p in campaign.runs)),
        "counts": counts, "planned": len(records), "exit_code": campaign_exit_code(statuses, unmet),
        "require": list(campaign.require), "requirements": required, "unmet_requirements": unmet,
        "runs": [asdict(r) for r in records],
    }


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
