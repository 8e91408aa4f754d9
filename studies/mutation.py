"""Detection power measured by mutation (issue 22, deliverable 3): run each mutant of the broker under fault
plans and write docs/MUTATION.md.

The catalogue is clusters/mutants.py. A mutant's run gets a temporary copy of clusters/ with the mutant's
edits (clusters/code_copy.py), named by the run's `node_code`: the local backends put it first on the
nodes' Python path, the docker backend mounts it over the image's code, so no image or tag is built per
mutant. Every node logs the digest of the code it runs at start-up (event `node_code`, from
clusters/broker/code_digest.py); after the run the digests in the collected node logs are compared with
the copy's, and the run's `mutant.json` says whether they matched (`code_verified`). A run whose nodes
ran other code is not counted.

Runs are stored as ordinary runs (`<store>/mutant-<name>-<plan>/<stamp>/`) plus `mutant.json` (the
mutant, plan, seed, run length, the copy's digest and what the nodes logged). A measurement skips a
(mutant, plan, seed, run length) already in the store with the same mutated-code digest, so an
interrupted measurement resumes where it stopped, and an edit of the broker (a new digest) runs again.

What caught a run comes from results.json: each checker's entry is named, and a checker's source is
`SOURCES[name]` (or the entry's own "source" key, if it has one): `trace` for the protocol trace
checker (checkers/trace.py, named "trace"), `state` for the end-of-run state dumps ("replicas"), and
`history` for every other checker (the client history). The time of the first proof is the earliest
op time an anomaly's examples carry (studies/detection.py first_anomaly_s), or an example's own
`time_s` (seconds from the run's start), which a trace anomaly may carry instead of ops.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.broker import node_code_digest
from kafkaesque_harness.clusters.code_copy import REPO_ROOT, CodeCopy, edited_texts
from kafkaesque_harness.clusters.mutants import MUTANTS, Mutant
from kafkaesque_harness.results.confidence import cell_text, rate_text
from kafkaesque_harness.results.store import STORE_NOTE, STORE_PLACEHOLDER
from kafkaesque_harness.studies.detection import first_anomaly_s

# The fault plans: the protocol-aware nemesis, and random faults of four kinds (as docs/DETECTION.md's
# rate campaigns: a fault every 6 s or so, on random nodes, recovery wait 5 s). `disk`, run only when named
# (--plan disk), is for the durability mutants the other two cannot reach: segment files damaged (bit flips,
# a cut tail, a chunk rolled back) and read back at a restart, and power cuts. `idempotent`, also only when
# named, runs the protocol nemesis with idempotent producers (the queue workload's default producers have no
# producer id, so the broker's producer-state rules are never exercised). `membership` adds partition
# reassignment, the one path on which a leader stays leader across a leader-epoch bump. `small-fetches` is
# `random` without power cuts, with a replica fetch of about 1 KiB and an HWM checkpoint every 100 ms: a
# follower that comes back behind takes many responses to catch up, each leaving it below the leader's HWM,
# and the checkpoints (which the trace records with each replica's HWM and LEO) land inside that window.
# No power cuts: with them the default broker lost acknowledged writes in balanced unclean recoveries after
# both ELR members had restarted uncleanly, as it did under `random` with the same seed
# (docs/MUTATION-notes.md), a loss the history checkers count; with kills, pauses and partitions alone no
# acknowledged write may be lost.
# `corruption` is `disk` without power cuts: damaged segments read back at a restart, on a minority of each
# partition's replicas. With power cuts too (`disk`) the default broker lost acknowledged writes in
# balanced unclean recoveries (docs/MUTATION-notes.md); with corruption alone two intact replicas remain.
PLANS: dict[str, dict[str, Any]] = {
    "protocol": {"nemesis": ["protocol"]},
    "random": {"nemesis": ["kill", "pause", "partition", "lossy-crash"], "nemesis_target": "random-node"},
    "disk": {"nemesis": ["file-corruption", "lossy-crash"]},
    "corruption": {"nemesis": ["file-corruption"]},
    "idempotent": {"nemesis": ["protocol"], "workload_options": {"idempotent": True}},
    "membership": {"nemesis": ["membership", "kill"]},
    "small-fetches": {"nemesis": ["kill", "pause", "partition"], "nemesis_target": "random-node",
                      "replica_fetch_max_bytes": 1024, "hwm_checkpoint_interval_ms": 100},
}
# The coordinators' mutants (issue 40) need clients that reach their code: transactional producers and
# read_committed consumers (the txn workload; producer_state.py's sequences and the LSO too), or a consumer
# group (the queue workload in subscribe mode). Their plans are the protocol nemesis (its coordinator moves and
# sequences aim at the workload's transactional ids and group) and random faults with `stop` (a controlled
# shutdown moves a coordinator as a kill does not).
# Subscribe mode, with each process's clients crashed about every 30 s (a crash ends the process; a fresh one
# joins): members leave (kafka-python's close sends LeaveGroup; a dropped librdkafka member is expired at its
# session timeout) and join while the coordinator stays up, so the group goes through generations the
# coordinator's faults alone never give it (a 180 s protocol run once committed every offset in generation 1,
# issue 40), and a member's commits race each rebalance.
# Four processes, one consumer per partition: with the run's default ten, each crashing every 20 s, the group
# rebalanced every second or two and, on the loaded machine, no member kept an assignment long enough to read:
# 5 assignments against 116 revocations in 120 s, not one record polled or offset committed before the final
# reads (2026-11-28, the first two groups runs of docs/MUTATION-notes.md), so no commit reached the mutants.
GROUP_WORKLOAD = {"queue_mode": "subscribe", "crash_clients_interval_s": 30}
GROUP_CONCURRENCY = 4
PLANS.update({
    "txn": {"workload": "txn", "nemesis": ["protocol"]},
    "txn-random": {"workload": "txn", "nemesis": ["kill", "pause", "partition", "stop"],
                   "nemesis_target": "random-node"},
    "groups": {"workload_options": GROUP_WORKLOAD, "concurrency": GROUP_CONCURRENCY, "nemesis": ["protocol"]},
    "groups-random": {"workload_options": GROUP_WORKLOAD, "concurrency": GROUP_CONCURRENCY,
                      "nemesis": ["kill", "pause", "stop"], "nemesis_target": "random-node"},
})
# The protocol nemesis with only its moves and sequences aimed at the coordinators (nemesis/protocol.py
# COORDINATOR_MOVES): only when named, for the mutants the full deck did not reach in a short run. Under
# txn-coord half the transactions abort (the workload's default is one in ten), so a coordinator killed while a
# transaction ends finds an abort as often as a commit (txn-load-skips-prepared-abort is about the aborts).
COORDINATOR_ONLY = {"nemesis": ["protocol"], "nemesis_options": {"protocol_moves": "coordinator"}}
PLANS.update({
    "txn-coord": {"workload": "txn", "workload_options": {"txn_abort_p": 0.5}, **COORDINATOR_ONLY},
    "groups-coord": {"workload_options": GROUP_WORKLOAD, "concurrency": GROUP_CONCURRENCY, **COORDINATOR_ONLY},
})
DEFAULT_PLANS = ("protocol", "random")
TXN_PLANS, GROUP_PLANS = ("txn", "txn-random"), ("groups", "groups-random")
TXN_FILES = ("clusters/broker/txn_coordinator.py", "clusters/broker/txn_shell.py", "clusters/broker/producer_state.py")
GROUP_FILES = ("clusters/broker/group_coordinator.py",)


def default_plans(m: Mutant) -> tuple[str, ...]:
    """The plans a mutant runs under when none is named: its workload's for the coordinators' files, else
    DEFAULT_PLANS (whose queue workload in assign mode never reaches a coordinator)."""
    if any(f in TXN_FILES for f in m.files):
        return TXN_PLANS
    if any(f in GROUP_FILES for f in m.files):
        return GROUP_PLANS
    return DEFAULT_PLANS
COMMON = {"nemesis_interval": 6.0, "recovery_wait": 5.0, "min_isr": 2, "acks": "all", "flush_policy": "never"}
SOURCES = {"trace": "trace", "replicas": "state"}  # any other checker: "history"
NOT_FINDINGS = ("faults", "progress")  # evidence checkers: they make a run unknown, never invalid
SOURCE_ORDER = ("history", "state", "trace")
RUN_FILE = "mutant.json"
LEDGER = "docs/MUTATION-runs.jsonl"  # every counted run's outcome, committed: a table outlives the store it came from
HARNESS_FAILED = 3  # the exit status of a run the harness itself failed (harness/runner.py EXIT_HARNESS)



# --- the catalogue ------------------------------------------------------------------------------------------
def catalogue_problems(root: Path = REPO_ROOT, mutants: tuple[Mutant, ...] = MUTANTS) -> list[str]:
    """One sentence per mutant edit that does not apply exactly once to the code under `root`, per
    duplicate name, and per mutant with no edit; [] when the catalogue is whole."""
    out = []
    seen: set[str] = set()
    for m in mutants:
        if m.name in seen:
            out.append(f"mutant {m.name}: the name is used twice in clusters/mutants.py; rename one.")
        seen.add(m.name)
        if not m.edits:
            out.append(f"mutant {m.name}: it has no edit; give it one.")
        out += edited_texts(root, m.edits, f"mutant {m.name}")[1]
    return out


def select(names: list[str] | None) -> list[Mutant]:
    """The mutants named (all when none); a ValueError naming the unknown ones."""
    if not names:
        return list(MUTANTS)
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown mutant {', '.join(unknown)}; `kafkaesque mutate --list` names them")
    return [known[n] for n in names]


def mutant_copy(m: Mutant) -> CodeCopy:
    return CodeCopy(m.edits, label=m.name)


# --- one run ------------------------------------------------------------------------------------------------
def test_name(mutant: str, plan: str) -> str:
    return f"mutant-{mutant}-{plan}"


def node_digests(run_dir: Path) -> dict[str, str]:
    """node -> the code digest it logged at start-up (the last one; every start logs one)."""
    out = {}
    nodes = run_dir / "nodes"
    for log in sorted(nodes.glob("*/*.log")) if nodes.is_dir() else []:
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if '"node_code"' not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "node_code":
                out.setdefault(log.parent.name, set()).add(e.get("digest"))
    return {n: ",".join(sorted(str(x) for x in d)) for n, d in out.items()}


def stored_runs(store: Path) -> list[dict[str, Any]]:
    """Every mutant run in the store with its mutant.json and results.json (`results`: None when absent)."""
    out = []
    for f in sorted(store.glob(f"mutant-*/*/{RUN_FILE}")):
        if f.parent.is_symlink():
            continue  # `latest`: the same run again
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        try:
            doc["results"] = json.loads((f.parent / "results.json").read_text())
        except (OSError, ValueError):
            doc["results"] = None
        doc["run_dir"] = str(f.parent)
        out.append(doc)
    return out


# --- the ledger: each run's outcome without its files --------------------------------------------------------
RECORD_KEYS = ("mutant", "plan", "seed", "time_limit", "cluster", "digest", "code_verified", "exit", "mono_start")


def run_record(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored run (stored_runs) as one ledger line: its mutant.json facts, the run dir's name, and what
    caught it (classify) with the checkers' verdicts, as of the checkers that wrote its results.json."""
    if "found" in doc:
        return doc  # already a record
    results = doc.get("results") if isinstance(doc.get("results"), dict) else None
    rec: dict[str, Any] = {k: doc.get(k) for k in RECORD_KEYS}
    rec["run"] = Path(doc.get("run_dir", "")).name
    if results is None:
        return {**rec, "finished": False}
    checkers = results.get("checkers") or {}
    rec.update(
        finished=True, interrupted=results.get("interrupted"), valid=results.get("valid"),
        found=classify(results, doc.get("mono_start")),
        traced=any(source_of(n, c) == "trace" for n, c in checkers.items()),
        unknown_why=sorted(f"{n}: {str(c['unknown_reasons'][0])[:120]}" for n, c in checkers.items()
                           if isinstance(c, dict) and c.get("valid") == "unknown" and c.get("unknown_reasons")),
        checked_by=results.get("checked_by"))
    return rec


def ledger_lines(path: str | Path | None) -> list[dict[str, Any]]:
    """A JSONL ledger's records, one a line (none when there is no ledger); a torn or non-object line is skipped."""
    if path is None or not Path(path).is_file():
        return []
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line
        if isinstance(rec, dict):
            out.append(rec)
    return out


def read_ledger(path: str | Path | None) -> list[dict[str, Any]]:
    """The ledger's run records (none when there is no ledger); a torn or foreign line is skipped."""
    return [r for r in ledger_lines(path) if "found" in r and "mutant" in r]


def ledger_unit_tests(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """The ledger's `--unit-tests` outcomes (lines {"unit_tests": {"mutant", "digest", "killed", "summary"}})."""
    return {r["unit_tests"]["mutant"]: r["unit_tests"] for r in ledger_lines(path)
            if isinstance(r.get("unit_tests"), dict) and "mutant" in r["unit_tests"]}


def all_records(store: str | Path, ledger: str | Path | None) -> list[dict[str, Any]]:
    """The ledger's records updated by the store's runs (a run in both: the store's, as re-checked last)."""
    by_run = {(r.get("run"), r.get("mutant"), r.get("plan")): r for r in read_ledger(ledger)}
    for doc in stored_runs(Path(store)):
        rec = run_record(doc)
        if rec.get("finished"):
            by_run[(rec["run"], rec["mutant"], rec["plan"])] = rec
    return sorted(by_run.values(), key=lambda r: (str(r.get("run")), str(r.get("mutant")), str(r.get("plan"))))


def write_ledger(records: list[dict[str, Any]], path: str | Path,
                 units: dict[str, dict[str, Any]] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    lines = records + [{"unit_tests": u} for _, u in sorted((units or {}).items())]
    tmp.write_text("".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in lines))
    tmp.replace(path)
    return path


def counts(doc: dict[str, Any]) -> bool:
    """Whether a stored run counts (and need not be made again): finished, the nodes proved they ran the
    mutant's code, and the harness did not fail it."""
    rec = run_record(doc)
    return (bool(rec.get("finished")) and not rec.get("interrupted") and bool(rec.get("code_verified"))
            and rec.get("exit") != HARNESS_FAILED)


def run_key(doc: dict[str, Any]) -> tuple:
    return (doc.get("mutant"), doc.get("plan"), doc.get("seed"), float(doc.get("time_limit", 0)), doc.get("digest"))


def stored_unit_tests(store: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted((store / "unit-tests").glob("*.json")):
        try:
            d = json.loads(f.read_text())
            out[d["mutant"]] = d
        except (OSError, ValueError, KeyError):
            continue
    return out


# --- what caught a run ----------------------------------------------------------------------------------------
def source_of(name: str, entry: dict[str, Any]) -> str:
    s = entry.get("source") if isinstance(entry, dict) else None
    return s if isinstance(s, str) and s else SOURCES.get(name, "history")


def _example_time_s(results: dict[str, Any]) -> float | None:
    ts = []
    for c in (results.get("checkers") or {}).values():
        for a in c.get("anomalies", []):
            for ex in a.get("examples", []) if isinstance(a, dict) else []:
                if isinstance(ex, dict) and isinstance(ex.get("time_s"), (int, float)):
                    ts.append(float(ex["time_s"]))
    return min(ts) if ts else None


def _monos(x: Any) -> list[float]:
    if isinstance(x, dict):
        own = [float(x["mono"])] if isinstance(x.get("mono"), (int, float)) else []
        return own + [t for v in x.values() for t in _monos(v)]
    if isinstance(x, list):
        return [t for v in x for t in _monos(v)]
    return []


def _mono_time_s(results: dict[str, Any], mono_start: float | None) -> float | None:
    """For anomalies proven by node lines (the protocol trace's carry each line's `mono`, the node's
    CLOCK_MONOTONIC, which the harness shares on the local and docker backends: one kernel): per example
    its latest line, the earliest over the examples, as seconds after `mono_start` (the harness's
    monotonic clock when the run started, mutant.json)."""
    if mono_start is None:
        return None
    proven = []
    for c in (results.get("checkers") or {}).values():
        for a in c.get("anomalies", []):
            for ex in a.get("examples", []) if isinstance(a, dict) else []:
                ms = _monos(ex)
                if ms:
                    proven.append(max(ms) - mono_start)
    return max(min(proven), 0.0) if proven else None


def _client_only(anomaly: dict[str, Any]) -> bool:
    """Every instance of the anomaly follows from a client library's own act (checkers/clients.py `whose`): e.g.
    kafka-python failing a send itself while its commit_transaction returned. The shipped broker shows these too
    (the txn plan's default-broker run, docs/MUTATION-notes.md), so they prove nothing against a mutant."""
    whose = anomaly.get("whose")
    count = anomaly.get("count")
    return (isinstance(whose, dict) and set(whose) == {"client"} and isinstance(count, int)
            and whose["client"] >= count)


def _without_client_only(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A checker's entry without its client-only anomalies; None when nothing else is left to count."""
    anomalies = entry.get("anomalies") or []
    left = [a for a in anomalies if not (isinstance(a, dict) and _client_only(a))]
    if len(left) == len(anomalies):
        return entry
    if not left:
        return None
    names = {a.get("name") for a in left if isinstance(a, dict)}
    return {**entry, "anomalies": left, "anomaly_types": [k for k in entry.get("anomaly_types") or [] if k in names]}


def classify(results: dict[str, Any], mono_start: float | None = None) -> dict[str, Any]:
    """{"by": {source: [anomaly names]}, "first_s": {source: seconds or None}, "valid": ...}. `mono_start`: the
    harness's monotonic clock at the run's start, to place node lines (trace anomalies) in the run; by default
    the history's own start (results.json run.clock.monotonic_start_ns, the op times' zero)."""
    clock = (results.get("run") or {}).get("clock") or {}
    if isinstance(clock.get("monotonic_start_ns"), int):
        mono_start = clock["monotonic_start_ns"] / 1e9
    by: dict[str, set[str]] = {}
    first: dict[str, float | None] = {}
    for name, entry in (results.get("checkers") or {}).items():
        if not isinstance(entry, dict) or name in NOT_FINDINGS or entry.get("valid") is not False:
            continue
        entry = _without_client_only(entry)
        if entry is None:
            continue
        kinds = [str(k) for k in entry.get("anomaly_types") or []] or [name]
        src = source_of(name, entry)
        by.setdefault(src, set()).update(kinds)
        one = {"checkers": {name: entry}}
        times = [t for t in (first_anomaly_s(one), _example_time_s(one), _mono_time_s(one, mono_start))
                 if t is not None]
        if times:
            t = min(times)
            first[src] = t if first.get(src) is None else min(t, first[src])  # type: ignore[type-var]
        else:
            first.setdefault(src, None)
    return {"by": {s: sorted(by[s]) for s in SOURCE_ORDER if s in by} | {s: sorted(v) for s, v in by.items()
                                                                       if s not in SOURCE_ORDER},
            "first_s": first, "valid": results.get("valid")}


@dataclass
class MutantRow:
    mutant: Mutant
    runs: int = 0
    unverified: int = 0               # runs whose nodes did not prove they ran the mutant's code
    unknown: int = 0
    by_plan: dict[str, list[int]] = field(default_factory=dict)   # plan -> [caught, runs]
    caught: dict[str, int] = field(default_factory=dict)          # source -> runs it caught
    anomalies: dict[str, set[str]] = field(default_factory=dict)  # source -> anomaly names
    firsts: list[float] = field(default_factory=list)             # per caught run: first proof, any source
    unit: dict[str, Any] | None = None
    caught_runs: int = 0
    traced: int = 0                   # runs that had a trace checker at all (checkers/trace.py)
    unknown_why: set[str] = field(default_factory=set)  # why an uncaught run's verdict was unknown
    failed: int = 0                   # runs the harness failed (exit 3) or that were interrupted: made again


    @property
    def median_first_s(self) -> float | None:
        return round(statistics.median(self.firsts), 1) if self.firsts else None

    @property
    def verdict(self) -> str:
        if not self.runs:
            return "not run"
        if not self.caught_runs:
            return "not caught" + (f" ({self.unknown} of {self.runs} run(s) unknown: "
                                   f"{'; '.join(sorted(self.unknown_why)) or 'see the runs'})" if self.unknown else "")
        srcs = [s for s in SOURCE_ORDER if self.caught.get(s)]
        return "caught by " + " + ".join(srcs)


def summarize(runs: list[dict[str, Any]], units: dict[str, dict[str, Any]] | None = None,
              mutants: tuple[Mutant, ...] = MUTANTS) -> list[MutantRow]:
    """One row per catalogue mutant over the stored runs (only runs of the mutant's current digest count
    when `digest` is known for it; a run of an older mutation of the code is left out)."""
    rows = {m.name: MutantRow(m) for m in mutants}
    for d in map(run_record, runs):
        row = rows.get(d.get("mutant"))
        if row is None or not d.get("finished"):
            continue
        if not d.get("code_verified"):
            row.unverified += 1
            continue
        if d.get("exit") == HARNESS_FAILED or d.get("interrupted"):
            row.failed += 1
            continue
        row.runs += 1
        row.traced += bool(d.get("traced"))
        found = d["found"]
        cell = row.by_plan.setdefault(str(d.get("plan")), [0, 0])
        cell[1] += 1
        if d.get("valid") == "unknown" and not found["by"]:
            row.unknown += 1
            row.unknown_why.update(d.get("unknown_why") or [])
        if found["by"]:
            row.caught_runs += 1
            cell[0] += 1
            for s, names in found["by"].items():
                row.caught[s] = row.caught.get(s, 0) + 1
                row.anomalies.setdefault(s, set()).update(names)
            times = [t for t in found["first_s"].values() if t is not None]
            if times:
                row.firsts.append(min(times))
    for name, u in (units or {}).items():
        if name in rows:
            rows[name].unit = u
    return list(rows.values())


# --- docs/MUTATION.md ---------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    """Text for a Markdown table cell (a `|` in a rule, such as |ISR|, would split it)."""
    return text.replace("|", "\\|")


def render_markdown(rows: list[MutantRow], command: str, settings: str, notes: str = "") -> str:
    measured = [r for r in rows if r.runs]
    caught = [r for r in measured if r.caught_runs]
    by_history = [r for r in measured if r.caught.get("history")]
    by_trace = [r for r in measured if r.caught.get("trace")]
    by_state_only = [r for r in caught if not r.caught.get("history") and not r.caught.get("trace")]
    plans = sorted({p for r in rows for p in r.by_plan})
    lines = [
        "# Mutation table", "",
        f"Generated by `{command}` on this machine{STORE_NOTE if STORE_PLACEHOLDER in command else ''}. {settings}", "",
        "Each mutant breaks one protocol rule in one place of the reference broker's default code path "
        "(clusters/mutants.py: the edit, the rule and its citation). A run gets a temporary copy of the code "
        "with the mutant applied; it counts only if every node logged the copy's code digest at start-up. "
        "`history` is the client history's checkers, `state` the end-of-run state dumps (`replicas`), "
        "`trace` the protocol trace checker (checkers/trace.py). `first proof` is the median over the caught runs of the seconds from the run's start to "
        "the first op (or trace line) that proved an anomaly; `-` where only the end-of-run dumps or the "
        "final read prove it. Every caught/runs cell is k/n with its 95% Clopper-Pearson interval "
        "(results/confidence.py); `caught in` is over all of a mutant's counted runs.", "",
        "## Summary", "",
        f"- Mutants measured: {len(measured)} of {len(rows)} in the catalogue.",
        f"- Caught (any source, in at least one run): {rate_text(len(caught), len(measured)).replace('runs', 'mutants')}.",
        f"- Caught by the client histories (what a history-only check finds, whatever else caught it too): {rate_text(len(by_history), len(measured)).replace('runs', 'mutants')}.",
        f"- Caught by the trace checker: {rate_text(len(by_trace), len(measured)).replace('runs', 'mutants')}"
        + ("." if any(r.traced for r in measured) else " (no run had a trace checker: checkers/trace.py was not "
                                                        "in the code these runs were made with)."),
        f"- Caught only by the end-of-run state dumps: {len(by_state_only)}.",
        f"- Not caught, with an unknown verdict in every run (e.g. the cluster never answered the final reads "
        f"after the heal: a liveness failure the checkers do not call a violation): "
        f"{sum(1 for r in measured if not r.caught_runs and r.unknown == r.runs)}.",
    ]
    units = [r for r in rows if r.unit is not None]
    if units:
        killed = [r for r in units if r.unit["killed"]]
        lines.append(f"- Killed by the broker's unit tests (`--unit-tests`): {len(killed)} of {len(units)} tried "
                     "(a mutant they kill is still kept: the question here is what a fault-injection run finds).")
    lines += ["", "## Per mutant", "",
              "| mutant | file | verdict | caught in (95%) | " + " | ".join(f"`{p}` caught/runs" for p in plans)
              + " | history | state | trace | first proof (s, median) | unit tests | rule |",
              "|---|---|---|---|" + "---|" * len(plans) + "---|---|---|---|---|---|"]
    for r in rows:
        cells = [cell_text(*r.by_plan[p]) if p in r.by_plan else "-" for p in plans]

        def src(s: str, r: MutantRow = r) -> str:
            return f"{r.caught[s]} ({', '.join(sorted(r.anomalies[s]))})" if r.caught.get(s) else "-"

        verdict = r.verdict + (f"; {r.unverified} unverified run(s) left out" if r.unverified else "") + (
            f"; {r.failed} run(s) the harness failed or was interrupted in left out" if r.failed else "")
        unit = "-" if r.unit is None else ("killed" if r.unit["killed"] else "survived")
        first = "-" if r.median_first_s is None else f"{r.median_first_s:g}"
        files = ", ".join(f"`{f.removeprefix('clusters/broker/')}`" for f in r.mutant.files)
        lines.append(f"| `{r.mutant.name}` | {files} | {verdict} | {cell_text(r.caught_runs, r.runs)} | "
                     + " | ".join(cells)
                     + f" | {src('history')} | {src('state')} | {src('trace')} | {first} | {unit} | "
                       f"{_cell(r.mutant.rule)} ({_cell(r.mutant.cite)}) |")
    survivors = [r for r in measured if not r.caught_runs]
    lines += ["", "## Survivors", ""]
    if survivors:
        lines += [f"- `{r.mutant.name}`: expected: {r.mutant.expect}." for r in survivors]
    else:
        lines.append("None among the mutants measured.")
    if notes.strip():
        lines += ["", notes.strip()]
    return "\n".join(lines) + "\n"


def describe_runs(runs: list[dict[str, Any]]) -> str:
    """What the stored runs were: plans, run lengths, seeds, clusters and when (one sentence)."""
    counted = [run_record(d) for d in runs if counts(d)]
    if not counted:
        return "The store holds no finished mutant run."

    def listed(key: str, fmt: Callable[[Any], str] = str) -> str:
        return ", ".join(fmt(v) for v in sorted({d.get(key) for d in counted}, key=str))

    stamps = sorted(str(d["run"]) for d in counted)
    return (f"{len(counted)} runs ({stamps[0]} to {stamps[-1]}); plans: {listed('plan')}; run length: "
            f"{listed('time_limit', lambda t: f'{float(t):g} s')}; seeds: {listed('seed')}; cluster: "
            f"{listed('cluster')}; acks=all, flush never, min ISR 2.")


def write_mutation_doc(store: str | Path, out: str | Path, command: str, notes: str = "",
                       ledger: str | Path | None = None) -> Path:
    """The table from the ledger's records and the store's runs; with a ledger, it is brought up to date first."""
    store = Path(store)
    runs = all_records(store, ledger)
    units = ledger_unit_tests(ledger) | stored_unit_tests(store)
    if ledger is not None:
        write_ledger(runs, ledger, units)
    rows = summarize(runs, units)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(rows, command, describe_runs(runs), notes))
    return out


def current_digest() -> str:
    """The digest of this tree's node code (what an unmutated run logs)."""
    return node_code_digest(REPO_ROOT)
