"""The detection table (issue 8): which fault plans find which broker flaws, how often, and how fast.

Rendered as Markdown (docs/DETECTION.md) from one or more campaigns' campaign.json
(harness/campaign.py) and each run's results.json. A row is one broker variant x acks x
flush x min ISR x fault plan x run length; rows with the same key from several campaigns
are merged (a rate campaign adds repetitions to the cells of the full matrix). Per row: the
runs made, the runs that found an anomaly, which anomalies, which of them the default
broker never showed in the same row (the flaw's own, as against what the settings allow
anyway: acks=1 loses writes on every broker), and the median time from the start of the
run to the op that first proved an anomaly (per example its latest op: for a lost write,
the read that missed it; the earliest over the examples). Runs the budget skipped are
counted as not run, never as "nothing found"; runs whose scenario stalled (the cluster
never reached the state a step waited for) are counted apart, since they did not test what
they meant to.

Above the rows, the three claims the table exists for are computed from it, not written
by hand: the default broker with acks=all and min ISR >= 2 finds nothing anywhere; every
flawed variant is found by each scenario that targets it; and the protocol-aware nemesis
against plain random faults in 5-minute runs, with the 80% mark.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaesque_harness.results.confidence import cell_text, interval, rate_text
from kafkaesque_harness.results.store import STORE_NOTE, STORE_PLACEHOLDER

RATE_TIME_LIMIT = 300.0   # the "5-minute runs"
RATE_TARGET = 0.8         # the protocol nemesis must find each flawed variant in at least 80% of them
PROTOCOL_PLAN, RANDOM_PLAN = "protocol", "kill,partition"
DEFAULT = "default"


@dataclass
class Row:
    variant: str
    workload: str
    acks: str
    flush: str
    min_isr: int
    plan: str
    time_limit: float
    runs: int = 0
    found: int = 0
    unknown: int = 0
    stalled: int = 0
    not_run: int = 0
    client_only: int = 0  # of `found`: runs whose every anomaly is wholly a client library's (run_is_clients)
    anomalies: set[str] = field(default_factory=set)
    client_anomalies: set[str] = field(default_factory=set)
    client_libraries: set[str] = field(default_factory=set)  # whose those client-only runs were (the settings')
    reanalysed: list[str] = field(default_factory=list)  # runs whose verdict changed when re-checked (a sentence each)
    firsts: list[float] = field(default_factory=list)
    beyond_default: list[str] | None = None  # None: no default row to compare with

    @property
    def setting(self) -> tuple[str, str, int]:
        return (self.acks, self.flush, self.min_isr)

    @property
    def median_first_s(self) -> float | None:
        return round(statistics.median(self.firsts), 1) if self.firsts else None

    @property
    def rate(self) -> float | None:
        return self.found / self.runs if self.runs else None

    @property
    def system_found(self) -> int:
        """Runs with an anomaly the system under test may own: the broker's, or unattributed."""
        return self.found - self.client_only


def run_is_clients(run: dict[str, Any]) -> bool:
    """Every instance of every anomaly of this invalid run follows from a client library's own recorded event
    (checkers/clients.py's `whose`: e.g. kafka-python committing a transaction after its own send failed):
    the run says nothing against the broker. Records from before campaigns kept `whose` count as the system's."""
    anomalies = run.get("anomalies") or []
    return bool(anomalies) and all(
        isinstance(a.get("whose"), dict) and a["whose"].get("client", 0) == a.get("count") and a.get("count")
        for a in anomalies)


def first_anomaly_s(results: dict[str, Any]) -> float | None:
    """Seconds into the run at which the first anomaly was proven: for each anomaly example, the
    latest op it carries (a lost write is proven by the read that misses it, not by its
    acknowledgement), and the earliest of those. None when no example carries ops (the
    broker-side checks prove theirs from state dumps taken at the end, and a lost write missing
    from the final read is proven only then: its example carries the send, not that read)."""
    proven: list[int] = []

    def times(x: Any) -> list[int]:
        if isinstance(x, dict):
            own = [x["time"]] if isinstance(x.get("time"), int) and "type" in x and "f" in x else []
            return own + [t for v in x.values() for t in times(v)]
        if isinstance(x, list):
            return [t for v in x for t in times(v)]
        return []

    for c in (results.get("checkers") or {}).values():
        for a in c.get("anomalies", []):
            for example in a.get("examples", []):
                if "final_hwm" in example:
                    continue  # a lost write proven by the final read, whose op the example does not carry
                ts = times(example)
                if ts:
                    proven.append(max(ts))
    return min(proven) / 1e9 if proven else None


def _workload(spec: dict[str, Any]) -> str:
    return str(spec.get("workload") or "queue")


def _stalled(run_dir: Path) -> bool:
    """A scenario's wait timed out. The protocol nemesis's moves wait too, and one that times out just
    gives way to the next move: that is its random walk, not a stalled plan."""
    try:
        with open(run_dir / "history.jsonl", encoding="utf-8") as f:
            return any('"scenario-wait"' in line and "not reached" in line and '"scenario":"protocol"' not in
                       line.replace(" ", "") for line in f)
    except OSError:
        return False


def summarize(docs: list[dict[str, Any]]) -> list[Row]:
    """One row per (variant, workload, acks, flush, min ISR, plan, time limit) over every campaign given.

    A run record may carry its `first_anomaly_s` and `stalled` already (a ledger's, whose run
    directories are gone); otherwise both are read from its run directory."""
    rows: dict[tuple, Row] = {}
    for doc in docs:
        settings = (doc.get("matrix") or {}).get("settings") or {}
        min_isr = int(settings.get("min_isr", 2))
        for r in doc.get("runs", []):
            s = r["spec"]
            key = (s["broker_variant"], _workload(s), str(s["acks"]), s["flush_policy"], min_isr,
                   ",".join(s["nemesis"]) or "none", float(s.get("time_limit", settings.get("time_limit", 60))))
            row = rows.setdefault(key, Row(*key))
            if r["status"] in ("skipped", "pending"):
                row.not_run += 1
                continue
            row.runs += 1
            if r.get("reanalysed"):
                first = r["reanalysed"]
                row.reanalysed.append(f"{Path(str(r.get('run_dir'))).name} ({_plan(row)}): first {first['first_status']}"
                                      + (f" ({', '.join(first['first_anomalies'])})" if first["first_anomalies"] else "")
                                      + f", {r['status']} when re-checked")
            if _run_stalled(r):
                row.stalled += 1
            if r["status"] == "invalid":
                row.found += 1
                row.anomalies.update(a["name"] for a in r.get("anomalies", []))
                if run_is_clients(r):
                    row.client_only += 1
                    row.client_anomalies.update(a["name"] for a in r.get("anomalies", []))
                    row.client_libraries.add(str(settings.get("client") or "kafka-python"))
                t = _run_first_anomaly_s(r)
                if t is not None:
                    row.firsts.append(t)
            elif r["status"] == "unknown":
                row.unknown += 1
    for row in rows.values():
        default = rows.get((DEFAULT, *list(_key(row))[1:]))
        if row.variant != DEFAULT and default is not None and default.runs:
            row.beyond_default = sorted(row.anomalies - default.anomalies)
    return sorted(rows.values(), key=lambda x: (x.variant != DEFAULT, x.variant, x.workload, x.acks, x.flush,
                                                x.min_isr, x.plan, x.time_limit))


def _run_stalled(r: dict[str, Any]) -> bool:
    if "stalled" in r:
        return bool(r["stalled"])
    return bool(r.get("run_dir")) and _stalled(Path(r["run_dir"]))


def _run_first_anomaly_s(r: dict[str, Any]) -> float | None:
    if "first_anomaly_s" in r:
        return r["first_anomaly_s"]
    if not r.get("run_dir"):
        return None
    try:
        return first_anomaly_s(json.loads((Path(r["run_dir"]) / "results.json").read_text()))
    except (OSError, ValueError):
        return None


def _key(row: Row) -> tuple:
    return (row.variant, row.workload, row.acks, row.flush, row.min_isr, row.plan, row.time_limit)


def _plan(row: Row) -> str:
    """The fault plan as the tables name it; a workload other than the queue's is named beside it."""
    return f"`{row.plan}`" + (f" ({row.workload})" if row.workload != "queue" else "")


def scenario_targets() -> dict[str, tuple[str, ...]]:
    """Plan name -> the broker variants that scenario exists to catch (nemesis/scenario.py)."""
    from kafkaesque_harness.nemesis.scenarios import SCENARIOS

    return {f"scenario:{name}": s.targets for name, s in SCENARIOS.items()}


# --- rendering -----------------------------------------------------------------------------------------------

def _seconds(t: float) -> str:
    return f"{t:g} s"


def _setting_order(s: tuple[str, str, int]) -> tuple:
    """acks=all before acks=1, flush never before every write, min ISR 2 before 1: the contract first."""
    return (s[0] not in ("all", "-1"), s[0], s[1] != "never", s[1], -s[2])


def _setting(acks: str, flush: str, min_isr: int) -> str:
    return f"acks={acks}, flush {flush}, min ISR {min_isr}"


def _count(row: Row | None) -> str:
    if row is None:
        return ""
    if not row.runs:
        return "not run"
    return cell_text(row.found, row.runs) + (f" ({row.stalled} stalled)" if row.stalled else "")


def _default_clean(rows: list[Row]) -> list[str]:
    strict = [r for r in rows if r.variant == DEFAULT and r.acks in ("all", "-1") and r.min_isr >= 2]
    dirty = [r for r in strict if r.system_found]
    # a run whose verdict is unknown (the harness could not conclude) says nothing either way: not counted
    runs = sum(r.runs - r.unknown for r in strict)
    unknown = sum(r.unknown for r in strict)
    lines = ["### 1. The default broker with acks=all and min ISR 2 finds nothing", ""]
    if not strict:
        return lines + ["No such run in these campaigns.", ""]
    if dirty:
        lines.append(f"**Not met**: {rate_text(sum(r.system_found for r in dirty), runs)} found an anomaly not "
                     f"wholly a client library's, in {len(dirty)} of {len(strict)} rows:")
        lines += [f"- {_plan(r)} ({_setting(r.acks, r.flush, r.min_isr)}, {_seconds(r.time_limit)}): "
                  f"{rate_text(r.system_found, r.runs)}, {', '.join(sorted(r.anomalies))}" for r in dirty]
    else:
        plans, flushes = {r.plan for r in strict if r.runs}, sorted({r.flush for r in strict if r.runs})
        workloads = sorted({r.workload for r in strict if r.runs})
        lines.append(f"Met within what {runs} runs can say: {rate_text(0, runs)} with an anomaly of the broker's "
                     f"or an unattributed one, over {len(strict)} rows ({len(plans)} fault plan(s), flush "
                     f"{' and '.join(flushes)}; workload {', '.join(workloads)}).")
    if unknown:
        lines += ["", f"Not counted: {unknown} run(s) whose verdict was unknown ("
                      + "; ".join(f"{_plan(r)}: {r.unknown}" for r in strict if r.unknown) + ")."]
    reanalysed = [text for r in strict for text in r.reanalysed]
    if reanalysed:
        lines += ["", "Runs whose verdict changed when their stored history was checked again after a checker fix "
                      "(the fix and its cause: docs/FINDINGS.md): " + "; ".join(reanalysed) + "."]
    clients = [r for r in strict if r.client_only]
    if clients:
        lines += ["", f"Runs whose every anomaly was a client library's own (its recorded event explains each "
                      f"instance: checkers/clients.py, docs/FINDINGS.md), not counted against the broker: "
                      f"{rate_text(sum(r.client_only for r in clients), runs)}, in "
                      + "; ".join(f"{_plan(r)}: {rate_text(r.client_only, r.runs)}, "
                                  f"{', '.join(sorted(r.client_anomalies))} ({', '.join(sorted(r.client_libraries))})"
                                  for r in clients)
                      + "."]
    loose = [r for r in rows if r.variant == DEFAULT and r not in strict and r.runs]
    if loose:
        found = [r for r in loose if r.found]
        lines += ["", f"Outside that contract (acks=1, or min ISR 1) the default broker had anomalies in "
                      f"{sum(r.found for r in found)} of {sum(r.runs for r in loose)} runs"
                      + (f" ({', '.join(sorted({a for r in found for a in r.anomalies}))})" if found else "")
                  + ". An acks=1 write is acknowledged before any follower has it, so a leader change loses it on "
                    "a correct broker too; that is why a variant's row also names the anomalies the default "
                    "never showed in the same row."]
    return lines + [""]


def _targets_found(rows: list[Row], targets: dict[str, tuple[str, ...]]) -> list[str]:
    settings = sorted({r.setting for r in rows}, key=_setting_order)
    lines = ["### 2. Every flawed variant is found by each scenario that targets it", "",
             "Found/runs of each targeted cell, by setting; `(+x)` names anomalies the default broker never "
             "showed in the same row. The claim is judged at acks=all (where the default is clean, so any "
             "finding is the flaw's) with flush never (where a power cut loses unsynced writes, the loss the "
             "storage flaws act on); the other settings are shown for what they teach.", "",
             "| variant | scenario | " + " | ".join(_setting(*s) for s in settings) + " |",
             "|---|---|" + "---|" * len(settings)]
    misses = []
    for plan, variants in sorted(targets.items()):
        for variant in variants:
            # one line per workload the cell ran under (a scenario may be run with more than one)
            workloads = sorted({r.workload for r in rows if r.variant == variant and r.plan == plan}) or ["queue"]
            for workload in workloads:
                cells, judged = [], []
                for s in settings:
                    found = [r for r in rows if r.variant == variant and r.workload == workload and r.setting == s
                             and r.plan == plan]
                    row = max(found, key=lambda r: r.runs, default=None)
                    cell = _count(row)
                    if row is not None and row.beyond_default:
                        cell += f" (+{', '.join(row.beyond_default)})"
                    cells.append(cell or "-")
                    if row is not None and row.runs and s[0] in ("all", "-1") and s[1] == "never":
                        judged.append(row)
                label = f"`{plan}`" + (f" ({workload})" if workload != "queue" else "")
                if any(not r.found for r in judged) or not judged:
                    misses.append((variant, label, "not run at acks=all, flush never" if not judged else
                                   ", ".join(f"min ISR {r.min_isr}: {r.found}/{r.runs}" for r in judged)))
                lines.append(f"| {variant} | {label} | " + " | ".join(cells) + " |")
    if len(lines) == 6:  # no targeted cell: a claim about no cell is not met, it is not tested
        return lines[:2] + ["No scenario that targets a flaw variant ran in these campaigns.", ""]
    lines.append("")
    if misses:
        lines.append("**Not met** in: " + "; ".join(f"`{v}` by {p} ({why})" for v, p, why in misses) + ".")
    else:
        lines.append("Met: every targeted cell at acks=all, flush never found its variant in every run.")
    return lines + [""]


def _random_settings(docs: list[dict[str, Any]]) -> str:
    """How the campaigns that ran the plain random plan aimed and timed its faults."""
    seen = set()
    for d in docs:
        if any(",".join(r["spec"]["nemesis"]) == RANDOM_PLAN for r in d.get("runs", [])):
            st = (d.get("matrix") or {}).get("settings") or {}
            seen.add(f"`{st.get('nemesis_schedule', 'mix')}` schedule, `{st.get('nemesis_target', 'mixed')}` "
                     f"targets, a fault every {st.get('nemesis_interval', 10)} s or so")
    return "; ".join(sorted(seen)) or "not run"


def _rates(rows: list[Row], docs: list[dict[str, Any]]) -> list[str]:
    def pick(variant: str, workload: str, plan: str) -> Row | None:
        return next((r for r in rows if r.variant == variant and r.workload == workload and r.plan == plan
                     and r.acks in ("all", "-1") and r.flush == "never" and r.min_isr >= 2
                     and r.time_limit == RATE_TIME_LIMIT), None)

    pairs = sorted({(r.variant, r.workload) for r in rows}, key=lambda p: (p[0] != DEFAULT, p[0], p[1]))
    lines = [f"### 3. The protocol-aware nemesis against plain random faults, {RATE_TIME_LIMIT / 60:g}-minute runs",
             "", f"acks=all, flush never, min ISR 2. `{PROTOCOL_PLAN}` is `--nemesis protocol`; `{RANDOM_PLAN}` is "
                 f"kill and partition at random ({_random_settings(docs)}). Target: the protocol "
                 f"nemesis finds each flawed variant in at least {RATE_TARGET:.0%} of runs.", "",
             f"| variant | workload | `{PROTOCOL_PLAN}` found | first anomaly (s, median) | `{RANDOM_PLAN}` found | "
             "first anomaly (s, median) | verdict |", "|---|---|---|---|---|---|---|"]
    any_row = False
    for v, w in pairs:
        p, q = pick(v, w, PROTOCOL_PLAN), pick(v, w, RANDOM_PLAN)
        if p is None and q is None:
            continue
        any_row = True

        def cell(r: Row | None) -> str:
            return rate_text(r.found, r.runs) if r is not None and r.runs else "not run"

        def first(r: Row | None) -> str:
            return str(r.median_first_s) if r is not None and r.median_first_s is not None else "-"

        if v == DEFAULT:
            verdict = "clean" if all(r is None or not r.found for r in (p, q)) else "**anomalies on the default**"
        elif p is None or not p.runs:
            verdict = "protocol not run"
        else:
            low, _ = interval(p.found, p.runs)
            verdict = ("meets 80%" + ("" if low >= RATE_TARGET else f" (but {p.runs} runs cannot show it: the "
                                                                   f"interval reaches down to {low:.0%})"))\
                if p.rate >= RATE_TARGET else "**below 80%**"
            if q is not None and q.runs:
                verdict += ("; random does as well" if q.rate >= p.rate else "; random does worse")
        lines.append(f"| {v} | {w} | {cell(p)} | {first(p)} | {cell(q)} | {first(q)} | {verdict} |")
    if not any_row:
        lines.append(f"| - | - | no {RATE_TIME_LIMIT:g} s runs of these plans in these campaigns | | | | |")
    return lines + [""]


def _matrices(rows: list[Row]) -> list[str]:
    variants = sorted({r.variant for r in rows}, key=lambda v: (v != DEFAULT, v))
    lines = ["## At a glance", "",
             "Runs that found an anomaly / runs made, per fault plan and broker variant, one table per setting.", ""]
    for s in sorted({r.setting for r in rows}, key=_setting_order):
        plans = sorted({(r.plan, r.workload, r.time_limit) for r in rows if r.setting == s})
        lines += [f"**{_setting(*s)}**", "", "| fault plan | workload | run | " + " | ".join(variants) + " |",
                  "|---|---|---|" + "---|" * len(variants)]
        for plan, workload, tl in plans:
            cells = [_count(next((r for r in rows if r.setting == s and r.plan == plan and r.workload == workload
                                  and r.time_limit == tl and r.variant == v), None)) or "-" for v in variants]
            lines.append(f"| `{plan}` | {workload} | {_seconds(tl)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _campaigns(docs: list[dict[str, Any]]) -> list[str]:
    lines = ["| campaign | file | started | took | cluster | runs | repetitions | run length | min ISR |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in docs:
        m = d.get("matrix", {})
        st = m.get("settings", {})
        lines.append(f"| `{d.get('name')}` | `{d.get('source')}` | {d.get('started')} | "
                     f"{d.get('duration_s', 0):.0f} s | `{d.get('cluster')}` | {len(d.get('runs', []))} | "
                     f"{m.get('repetitions', '?')} | {st.get('time_limit', '?')} s | {st.get('min_isr', 2)} |")
    return lines


def render_markdown(docs: list[dict[str, Any]] | dict[str, Any], command: str, notes: str = "",
                    title: str = "Detection table", level: int = 1) -> str:
    """The table as Markdown; `level` 2 makes it a section of a larger page (every heading one deeper)."""
    docs = [docs] if isinstance(docs, dict) else docs
    rows = summarize(docs)
    targets = scenario_targets()
    if level > 1:  # a section judges the scenarios it ran; the whole page names every one never run
        targets = {plan: variants for plan, variants in targets.items() if any(r.plan == plan for r in rows)}
    lines = [
        f"# {title}", "",
        f"Generated by `{command}` on this machine{STORE_NOTE if STORE_PLACEHOLDER in command else ''}, "
        f"from {len(docs)} campaign(s):", "",
        *_campaigns(docs), "",
        "Every rate is k/n with its 95% Clopper-Pearson interval (results/confidence.py); none of n is read as "
        "\"rate below x% (95%)\", the one-sided bound. "
        "A row counts runs that finished (`runs`), runs with an anomaly (`found`), runs whose verdict was "
        "unknown, runs whose scenario stalled (a wait timed out: the cluster never reached the state the "
        "next fault needed), and runs the budget left out (`not run`). `beyond default` names the anomalies "
        "the default broker never showed in the same row. `first anomaly` is the median, over the runs that "
        "found one, of the seconds from the run's start to the op that first proved an anomaly (for a lost "
        "write, the read that missed it); `-` where only the end-of-run state dumps or the final read prove it.",
        "", "## What it shows", "",
        *_default_clean(rows), *_targets_found(rows, targets), *_rates(rows, docs),
        *_matrices(rows),
        "## Every row", "",
        "| variant | workload | acks | flush | min ISR | fault plan | run | runs | found (95%) | anomalies | beyond default "
        "| first anomaly (s, median) | unknown | stalled | not run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        beyond = "" if r.beyond_default is None else (", ".join(r.beyond_default) or "-")
        lines.append(f"| {r.variant} | {r.workload} | {r.acks} | {r.flush} | {r.min_isr} | `{r.plan}` | "
                     f"{_seconds(r.time_limit)} | "
                     f"{r.runs} | {cell_text(r.found, r.runs)} | {', '.join(sorted(r.anomalies)) or '-'} | {beyond} | "
                     f"{r.median_first_s if r.median_first_s is not None else '-'} | {r.unknown} | "
                     f"{r.stalled} | {r.not_run} |")
    if notes.strip():
        lines += ["", notes.strip()]
    if level > 1:
        lines = [("#" * (level - 1) + line) if line.startswith("#") else line for line in lines]
    return "\n".join(lines) + "\n"


def load_campaign_docs(campaign_dirs: list[str | Path]) -> list[dict[str, Any]]:
    docs = [json.loads((Path(d) / "campaign.json").read_text()) for d in campaign_dirs]
    for doc in docs:
        doc["runs"] = [run_as_analysed_now(r) for r in doc.get("runs", [])]
    return docs


def run_as_analysed_now(r: dict[str, Any]) -> dict[str, Any]:
    """A campaign's run record with the verdict and anomalies its run dir's results.json holds now: a run
    re-checked after a checker fix (`kafkaesque analyze RUN_DIR` rewrites results.json from the stored
    history) counts as re-checked, marked `reanalysed` with the verdict the campaign first recorded. Anomalies
    keep whose they are (checkers/clients.py)."""
    if r.get("status") not in ("valid", "invalid", "unknown") or not r.get("run_dir"):
        return r
    try:
        results = json.loads((Path(r["run_dir"]) / "results.json").read_text())
    except (OSError, ValueError):
        return r
    valid = results.get("valid")
    status = "valid" if valid is True else "invalid" if valid is False else "unknown"
    anomalies = [{"checker": checker, "name": a.get("name"), "count": a.get("count"),
                  **({"whose": a["whose"]} if isinstance(a.get("whose"), dict) else {})}
                 for checker, c in (results.get("checkers") or {}).items() for a in c.get("anomalies", [])]
    now = {**r, "status": status, "anomalies": anomalies}
    if status != r["status"]:
        now["reanalysed"] = {"first_status": r["status"],
                             "first_anomalies": sorted({str(a.get("name")) for a in r.get("anomalies", [])})}
    return now


# --- the ledger: what a table was made from, kept beside it ---------------------------------------------------
# Campaign stores live outside the repository and do not outlive a machine; a table re-rendered on a fresh
# machine from its campaign dirs alone would lose every row. So each campaign doc a table is made from is
# kept in a committed JSON-lines ledger (docs/DETECTION-runs.jsonl), its runs carrying what the table reads
# from their run directories (first_anomaly_s, stalled), and a section is rendered from every doc the ledger
# holds for it.

def ledger_doc(doc: dict[str, Any], section: str) -> dict[str, Any]:
    """A campaign doc as the ledger keeps it: each run with its first anomaly time and stall read now."""
    runs = []
    for r in doc.get("runs", []):
        r = dict(r)
        r["stalled"] = _run_stalled(r)
        r["first_anomaly_s"] = _run_first_anomaly_s(r) if r.get("status") == "invalid" else None
        runs.append(r)
    return {**doc, "runs": runs, "section": section}


def read_ledger(path: str | Path, section: str) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [d for d in docs if d.get("section", "") == section]


def record_in_ledger(path: str | Path, docs: list[dict[str, Any]], section: str) -> None:
    """Add (or replace: same campaign name and start) each doc in the ledger."""
    path = Path(path)
    kept = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    new = [ledger_doc(d, section) for d in docs]
    ids = {(d.get("name"), d.get("started")) for d in new}
    kept = [d for d in kept if (d.get("name"), d.get("started")) not in ids] + new
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in kept))


def section_markers(section: str) -> tuple[str, str]:
    return f"<!-- detection section {section}: generated, do not edit by hand -->", f"<!-- /detection section {section} -->"


def replace_section(page: str, section: str, body: str) -> str:
    """The page with the section's text replaced (or added at the end); everything else kept as it was."""
    start, end = section_markers(section)
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    if start in page and end in page:
        head, rest = page.split(start, 1)
        return head + block + rest.split(end, 1)[1].lstrip("\n")
    return page.rstrip("\n") + "\n\n" + block


SECTION_TITLES = {"txn": "Transactions and consumer groups",
                  "claim1": "Claim 1 measured again: the default broker under random faults, both clients (issue 38)"}


def write_detection(campaign_dirs: str | Path | list[str | Path], out: str | Path, command: str,
                    notes: str = "", section: str = "", ledger: str | Path | None = None) -> Path:
    """Write the table to `out` (with a section: only that section of the page, the rest kept). With a
    ledger, the campaigns given are recorded in it and the table is made from all it holds for the section."""
    dirs = campaign_dirs if isinstance(campaign_dirs, list) else [campaign_dirs]
    docs = load_campaign_docs(dirs)
    if ledger is not None:
        record_in_ledger(ledger, docs, section)
        docs = read_ledger(ledger, section)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not section:
        out.write_text(render_markdown(docs, command, notes))
        return out
    body = render_markdown(docs, command, notes, title=SECTION_TITLES.get(section, section), level=2)
    out.write_text(replace_section(out.read_text() if out.exists() else "", section, body))
    return out
