"""The simulator's power (issue 41 item 6, the start of issue 42): seed sweeps of `kafkaesque sim` per broker variant,
kept in a committed ledger, and docs/SIMULATION.md rendered from it.

A sweep row is one broker (the default or a flaw variant of clusters/reference.py), one workload setting and one
fault mix, under the simulator settings of SWEEP_SETTINGS; its seeds run from a start seed until the row has
`failures` failing seeds or `seeds` seeds (harness/sim_sweep.py runs them, each a whole `kafkaesque sim` run). One
ledger line per seed (docs/SIMULATION-runs.jsonl): the verdict, the anomaly kinds, which checkers caught it (as
studies/mutation.py classifies a run: `history` for the client history's checkers, `state` for the end-of-run
replica dumps, `trace` for the brokers' protocol trace), the virtual and CPU seconds it took, and for a failing
seed its run dir in the store (the only run dirs a sweep keeps).

The page says for the default broker "0 of N seeds: rate below x% (95%)" or lists each anomaly with its seed, and
for each flaw variant the seeds to its first catch, the share of seeds that caught it with its 95% interval
(results/confidence.py), the checkers that caught it, and beside it the real runs' rate of docs/DETECTION.md (read
from that page's "Every row" tables). Every figure on it is simulated, and the page says so.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.mutants import MUTANTS, Mutant
from kafkaesque_harness.results.confidence import cell_text, rate_text
from kafkaesque_harness.results.store import STORE_NOTE, STORE_PLACEHOLDER
from kafkaesque_harness.studies.mutation import GROUP_FILES, SOURCE_ORDER, TXN_FILES, classify, ledger_lines
from kafkaesque_harness.studies.mutation import LEDGER as MUTATION_LEDGER
from kafkaesque_harness.studies.mutation import read_ledger as read_mutation_ledger
from kafkaesque_harness.studies.mutation import summarize as summarize_mutants

LEDGER = "docs/SIMULATION-runs.jsonl"
DEFAULT = "default"
ISSUE_SEEDS = 1000  # issue 41 item 6: every flaw variant found within 1,000 seeds
# The simulator's faults (harness/simulate.py SIM_FAULTS) but the lossy crash: one at a time on a node drawn from
# every node, controllers included. Without lossy-crash because a simulated power cut leaves the broker no report
# of it (the lossy file system's status file, server.py lossy_drops_seen, is a real run's only), so the trace
# rule log-shorter-after-restart holds a power cut's legitimate loss against the broker (this study's first seeds:
# no-elr seed 2, broker-1 power-cut at 9.6 virtual s and its logs empty at the restart, "no power cut explains
# it"). A variant caught that way would be caught for the simulator's gap, not for its flaw; the row
# `default-power-cut` measures the default broker under the whole mix.
FAULT_MIX = ("kill", "pause", "partition", "clock")
POWER_CUT_MIX = ("kill", "pause", "partition", "lossy-crash", "clock")
# The protocol nemesis's moves and sequences, simulated (harness/simulate.py SimNemesis): faults held together,
# aimed at a partition's roles; what reaches unclean-election and no-epoch-fencing, which single faults do not.
PROTOCOL_MIX = ("protocol",)
OVERLAPPING = {"nemesis_schedule": "mix"}
# Each seed draws its own faults, cluster, flush policy, clients and BUGGIFY points (harness/sim_swarm.py): the
# row's fault mix, schedule and cluster settings are the seed's, not these.
SWARM = {"swarm": True}
# What every row's seeds share (kafkaesque sim's options). Short runs with faults every few virtual seconds: a
# seed's CPU cost grows with its ops, and the sweep's power with its seeds (measured: docs/SIMULATION.md's costs).
SWEEP_SETTINGS: dict[str, Any] = {
    "time_limit": 40.0, "rate": 40.0, "concurrency": 5, "nemesis_interval": 1.5, "recovery_wait": 10.0,
    "brokers": 3, "controllers": 1, "replication_factor": 3, "min_isr": 2, "partitions": 2, "acks": "all",
    "flush_policy": "never",
}
# Subscribe mode with client crashes, as studies/mutation.py's group plans: members leave and join while the
# coordinator stays up, so commits race rebalances.
GROUP_OPTIONS = {"queue_mode": "subscribe", "crash_clients_interval_s": 10}


@dataclass(frozen=True)
class SweepRow:
    """One sweep: a broker, a workload setting, a fault mix."""

    name: str
    variant: str
    workload: str = "queue"
    workload_options: dict[str, Any] = field(default_factory=dict)
    nemesis: tuple[str, ...] = FAULT_MIX
    overrides: dict[str, Any] = field(default_factory=dict)  # SWEEP_SETTINGS this row changes (a test's shorter runs)
    mutant: str = ""  # a catalogue mutant (clusters/mutants.py) the default broker runs as, `kafkaesque sim --mutant`

    @property
    def label(self) -> str:
        """The broker the row runs: its flaw variant's name, or `mutant NAME`."""
        return f"mutant {self.mutant}" if self.mutant else self.variant

    @property
    def is_default(self) -> bool:
        """The default broker as shipped (neither a flaw variant nor a mutant)."""
        return self.variant == DEFAULT and not self.mutant

    def workload_label(self) -> str:
        mode = self.workload_options.get("queue_mode")
        return f"{self.workload} ({mode})" if mode else self.workload

    def settings(self) -> dict[str, Any]:
        """Everything a seed's run depends on besides the seed (a ledger line carries it, so a row's seeds are
        counted together only when they ran alike)."""
        return {**SWEEP_SETTINGS, **self.overrides, "broker_variant": self.variant, "workload": self.workload,
                "workload_options": dict(sorted(self.workload_options.items())), "nemesis": list(self.nemesis),
                # only a mutant's row names it: the ledger lines of the other rows keep their settings
                **({"mutant": self.mutant} if self.mutant else {})}

    def replay_command(self, seed: int) -> str:
        """The `kafkaesque sim` line that replays one of this row's seeds."""
        s = self.settings()
        parts = ["kafkaesque sim", f"--seed {seed}", f"--broker-variant {self.variant}", f"--workload {self.workload}",
                 *(f"--workload-option {k}={v}" for k, v in s["workload_options"].items()),
                 f"--nemesis {','.join(self.nemesis)}", *([f"--mutant {self.mutant}"] if self.mutant else [])]
        for key in ("time_limit", "rate", "concurrency", "nemesis_interval", "recovery_wait", "brokers", "controllers",
                    "replication_factor", "min_isr", "partitions", "acks", "flush_policy", "nemesis_schedule"):
            if key not in s:  # a row's own setting (the schedule: sequential unless the row says)
                continue
            value = s[key]
            parts.append(f"--{key.replace('_', '-')} {value:g}" if isinstance(value, float) else
                         f"--{key.replace('_', '-')} {value}")
        if s.get("swarm"):
            parts.append("--swarm")
        return " ".join(parts)


# The rows the study runs: the default broker under each workload setting the variants need, and each flaw variant
# under the workload that reaches its code (the transaction flaws: transactional producers and read_committed
# consumers; the group flaw: a consumer group).
ROWS: dict[str, SweepRow] = {r.name: r for r in (
    SweepRow("default", DEFAULT),
    SweepRow("default-txn", DEFAULT, "txn"),
    SweepRow("default-group", DEFAULT, "queue", GROUP_OPTIONS),
    SweepRow("default-power-cut", DEFAULT, nemesis=POWER_CUT_MIX),
    SweepRow("truncate-to-hw", "truncate-to-hw"),
    SweepRow("no-elr", "no-elr"),
    SweepRow("unclean-election", "unclean-election"),
    SweepRow("no-epoch-fencing", "no-epoch-fencing"),
    SweepRow("txn-markers-no-epoch-bump", "txn-markers-no-epoch-bump", "txn"),
    SweepRow("read-committed-to-hwm", "read-committed-to-hwm", "txn"),
    SweepRow("zombie-not-fenced", "zombie-not-fenced", "txn"),
    SweepRow("offsets-commit-acks-1", "offsets-commit-acks-1", "queue", GROUP_OPTIONS),
    SweepRow("default-protocol", DEFAULT, nemesis=PROTOCOL_MIX, overrides=OVERLAPPING),
    SweepRow("default-swarm", DEFAULT, overrides=SWARM),
    SweepRow("unclean-election-protocol", "unclean-election", nemesis=PROTOCOL_MIX, overrides=OVERLAPPING),
    SweepRow("no-epoch-fencing-protocol", "no-epoch-fencing", nemesis=PROTOCOL_MIX, overrides=OVERLAPPING),
)}
MUTANT_PREFIX = "mutant-"


def mutant_row(m: Mutant) -> SweepRow:
    """A catalogue mutant's row: the default broker as the mutant, under the workload that reaches its code (as
    studies/mutation.py default_plans picks its plans: the txn workload for the transaction coordinator's and the
    producer state's files, a consumer group for the group coordinator's, the queue workload in assign mode else)."""
    if any(f in TXN_FILES for f in m.files):
        return SweepRow(MUTANT_PREFIX + m.name, DEFAULT, "txn", mutant=m.name)
    if any(f in GROUP_FILES for f in m.files):
        return SweepRow(MUTANT_PREFIX + m.name, DEFAULT, "queue", GROUP_OPTIONS, mutant=m.name)
    return SweepRow(MUTANT_PREFIX + m.name, DEFAULT, mutant=m.name)


ROWS.update({r.name: r for r in map(mutant_row, MUTANTS)})


def select_rows(names: list[str] | None) -> list[SweepRow]:
    """The rows named (all when none); an unknown name is a ValueError naming the valid ones."""
    if not names:
        return list(ROWS.values())
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise ValueError(f"unknown sweep row {', '.join(unknown)}; valid: {', '.join(ROWS)}.")
    return [ROWS[n] for n in names]


# --- one seed's ledger line -------------------------------------------------------------------------------------

def seed_record(row: SweepRow, seed: int, exit_code: int, results: dict[str, Any] | None, cpu_s: float,
                virtual_s: float | None, run: str | None, digest: str) -> dict[str, Any]:
    """A seed's outcome as the ledger keeps it. `run`: its run dir relative to the store, for a kept (failing) seed."""
    results = results or {}
    found = classify(results) if results else {"by": {}, "first_s": {}, "valid": "unknown"}
    checkers = results.get("checkers") or {}
    return {
        "row": row.name, "variant": row.variant, "seed": seed, "settings": row.settings(), "digest": digest,
        "valid": results.get("valid", "unknown"), "exit": exit_code, "by": found["by"],
        "first_s": found["first_s"], "anomalies": sorted({k for kinds in found["by"].values() for k in kinds}),
        "unknown_why": sorted(f"{n}: {str(c['unknown_reasons'][0])[:120]}" for n, c in checkers.items()
                              if isinstance(c, dict) and c.get("valid") == "unknown" and c.get("unknown_reasons")),
        "whose": whose_counts(results), "error": results.get("error"), "cpu_s": round(cpu_s, 3),
        "virtual_s": None if virtual_s is None else round(virtual_s, 3), "run": run,
    }


OWNER_ORDER = ("broker", "client", "harness", "unattributed")  # checkers/clients.py's owners, the broker's first


def whose_counts(results: dict[str, Any]) -> dict[str, int]:
    """The run's attribution (checkers/clients.py attribution): owner -> anomalies it has, those with any."""
    a = results.get("attribution") or {}
    return {o: a[o] for o in OWNER_ORDER if isinstance(a.get(o), int) and a[o] > 0}


def failed(rec: dict[str, Any]) -> bool:
    """A seed that caught something: its checkers judged the run invalid."""
    return rec.get("valid") is False


def history_virtual_s(history_path: Path) -> float | None:
    """Virtual seconds from the main phase's start to the history's last event (its times are virtual ns)."""
    last = None
    try:
        with open(history_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    last = line
    except OSError:
        return None
    try:
        return json.loads(last)["time"] / 1e9 if last else None
    except (ValueError, KeyError, TypeError):
        return None


# --- the ledger --------------------------------------------------------------------------------------------------

def read_ledger(path: str | Path) -> list[dict[str, Any]]:
    """The ledger's seed records; a torn or foreign line is skipped."""
    return [rec for rec in ledger_lines(path) if "row" in rec and "seed" in rec]


def append_to_ledger(path: str | Path, rec: dict[str, Any]) -> None:
    """One line per seed, appended as it finishes: an interrupted sweep keeps every seed it made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def row_records(records: list[dict[str, Any]], row: SweepRow) -> list[dict[str, Any]]:
    """A row's seeds that ran with its current settings on the code of its latest seed (the digest of the row's last
    ledger line: a row swept again after the broker or the simulator changed counts the new sweep's seeds alone, not
    the older code's), one per seed (the last line of a seed wins), in seed order."""
    settings = json.dumps(row.settings(), sort_keys=True)
    mine = [r for r in records if r.get("row") == row.name and json.dumps(r.get("settings"), sort_keys=True) == settings]
    if not mine:
        return []
    digest = mine[-1].get("digest")
    by_seed = {r["seed"]: r for r in mine if r.get("digest") == digest}
    return [by_seed[s] for s in sorted(by_seed)]


# --- what a row's seeds say --------------------------------------------------------------------------------------

@dataclass
class RowSummary:
    row: SweepRow
    seeds: int
    caught: int
    unknown: int
    errors: int
    first_seed: int | None        # the lowest failing seed
    seeds_to_first: int | None    # seeds run up to and including it, from the row's lowest seed
    start_seed: int | None
    by_source: dict[str, int]     # checker source -> failing seeds it caught
    anomalies: dict[str, int]     # anomaly kind -> failing seeds that showed it
    failing: list[dict[str, Any]]
    cpu_s: list[float]
    virtual_s: list[float]
    records: list[dict[str, Any]]


def summarize(row: SweepRow, records: list[dict[str, Any]]) -> RowSummary:
    recs = row_records(records, row)
    seeds = [r["seed"] for r in recs]
    failing = [r for r in recs if failed(r)]
    start = min(seeds) if seeds else None
    first = min((r["seed"] for r in failing), default=None)
    by_source: Counter[str] = Counter()
    anomalies: Counter[str] = Counter()
    for r in failing:
        by_source.update(list(r.get("by") or {}))  # one count per seed and source
        anomalies.update(r.get("anomalies") or [])
    return RowSummary(
        row=row, seeds=len(recs), caught=len(failing), unknown=sum(r.get("valid") == "unknown" for r in recs),
        errors=sum(bool(r.get("error")) for r in recs), first_seed=first,
        seeds_to_first=None if first is None else sum(1 for x in seeds if x <= first), start_seed=start,
        by_source=dict(by_source), anomalies=dict(anomalies), failing=failing,
        cpu_s=[r["cpu_s"] for r in recs if isinstance(r.get("cpu_s"), (int, float))],
        virtual_s=[r["virtual_s"] for r in recs if isinstance(r.get("virtual_s"), (int, float))], records=recs)


# --- the real runs' rates (docs/DETECTION.md) ----------------------------------------------------------------------

REAL_PLANS = ("protocol", "kill,partition")


def detection_rates(page: str) -> dict[str, dict[str, list[int]]]:
    """variant -> fault plan -> [runs that found an anomaly, runs], summed over the rows of every "Every row" table
    of docs/DETECTION.md at acks=all and min ISR 2 or more (the contract the default is clean under). Read from
    the page's columns by their headers, so both sections' tables (with and without a workload column) count."""
    rates: dict[str, dict[str, list[int]]] = {}
    header: list[str] | None = None
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            header = None
            continue
        if cells[:1] == ["variant"] and "found (95%)" in cells:
            header = cells
            continue
        if header is None or set(cells[0]) <= {"-"} or len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        if row.get("acks") not in ("all", "-1") or not row.get("min ISR", "0").isdigit() or int(row["min ISR"]) < 2:
            continue
        found = row["found (95%)"].split(" ", 1)[0]
        if "/" not in found:
            continue
        k, n = (int(x) for x in found.split("/", 1))
        plan = row["fault plan"].strip("`")
        cell = rates.setdefault(row["variant"], {}).setdefault(plan, [0, 0])
        cell[0] += k
        cell[1] += n
    return rates


# --- rendering -------------------------------------------------------------------------------------------------

def _seed_text(n: int) -> str:
    return "1 seed" if n == 1 else f"{n} seeds"


def _sources_text(s: RowSummary) -> str:
    order = [src for src in SOURCE_ORDER if src in s.by_source] + sorted(set(s.by_source) - set(SOURCE_ORDER))
    return ", ".join(f"{src} {s.by_source[src]}" for src in order) or "-"


def _anomalies_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def _mean(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.1f}" if xs else "-"


def _settings_text() -> str:
    s = SWEEP_SETTINGS
    return (f"{s['time_limit']:g} virtual s of main phase at {s['rate']:g} ops/s over {s['concurrency']} client "
            f"processes, then a heal, {s['recovery_wait']:g} s of recovery and the final reads; "
            f"{s['controllers']} controller and {s['brokers']} brokers, {s['partitions']} partitions with replication "
            f"factor {s['replication_factor']} and min ISR {s['min_isr']}, acks={s['acks']}, flush {s['flush_policy']}; "
            f"faults {', '.join(FAULT_MIX)} (a row may name others), one at a time on a node drawn from every node (controllers included), "
            f"a start and its stop {s['nemesis_interval']:g} virtual s apart on average")


def _default_section(summaries: list[RowSummary]) -> list[str]:
    lines = ["## The default broker", ""]
    rows = [s for s in summaries if s.row.is_default]
    if not rows:
        return lines + ["No seed of the default broker in the ledger.", ""]
    for s in rows:
        label = f"`{s.row.name}` ({s.row.workload_label()})"
        if not s.seeds:
            lines.append(f"- {label}: not run.")
            continue
        if not s.caught:
            # an unknown seed is no evidence of a clean run: the bound counts the seeds judged valid
            judged = s.seeds - s.unknown
            lines.append(f"- {label}: an anomaly in {rate_text(0, judged, unit='seeds judged')}"
                         + (f"; {s.unknown} more seeds unknown, not counted (evidence missing: {_unknown_reasons(s)})"
                            if s.unknown else "") + ".")
            continue
        brokers = [r for r in s.failing if (r.get("whose") or {}).get("broker") or "whose" not in r]
        lines.append(f"- {label}: **{rate_text(s.caught, s.seeds, unit='seeds')} found an anomaly**; the broker's "
                     f"(an anomaly the checkers give the broker, or a seed that ran before the ledger said whose): "
                     f"**{rate_text(len(brokers), s.seeds, unit='seeds')}**; the others' anomalies are a client's alone "
                     "(`whose`: anomalies per owner, checkers/clients.py):")
        for r in s.failing:
            whose = ", ".join(f"{o} {n}" for o, n in (r.get("whose") or {}).items()) or "not recorded"
            lines.append(f"  - seed {r['seed']}: {', '.join(r.get('anomalies') or ['invalid'])}, caught by "
                         f"{', '.join(sorted(r.get('by') or {})) or '-'}; whose: {whose}; run "
                         f"`{r.get('run') or 'not kept'}`; replay: `{s.row.replay_command(r['seed'])}`")
    return lines + [""]


def _unknown_reasons(s: RowSummary) -> str:
    """The reasons the row's unknown seeds give, the commonest first (each reason's checker and words)."""
    reasons: Counter[str] = Counter()
    for r in s.records:
        if r.get("valid") == "unknown":
            reasons.update(str(w).split(" (", 1)[0] for w in r.get("unknown_why") or ["no reason recorded"])
    return "; ".join(f"{w} ({n})" for w, n in reasons.most_common(3))


def _within(s: RowSummary) -> str:
    if not s.seeds:
        return "not run"
    if s.seeds_to_first is not None:
        return ("yes" if s.seeds_to_first <= ISSUE_SEEDS else "no") + f", at seed {s.first_seed}"
    return f"**not found in {_seed_text(s.seeds)}** (the budget)"


def _variant_section(summaries: list[RowSummary], real: dict[str, dict[str, list[int]]]) -> list[str]:
    lines = ["## The flaw variants", "",
             "Per variant: the seeds run (from its start seed, until its first failing seeds or its budget), the seeds "
             "up to and including the first that caught it, the share of seeds that caught it with its 95% interval, "
             "which checkers caught them (seeds per source: `history` the client history's checkers, `state` the "
             "end-of-run replica dumps, `trace` the brokers' protocol trace), and the anomaly kinds (seeds that showed "
             "each), and of those the kinds the default broker never showed under the same workload and faults "
             "(`beyond default`: the flaw's own; empty when the default's row has no seeds). Beside them, "
             "docs/DETECTION.md's real runs at acks=all, min ISR 2: found/runs of the "
             "protocol-aware nemesis and of random kill and partition faults, over every row of that plan. A row "
             "stops at its first few failing seeds, so its share is the rate over the seeds it ran, an honest "
             "estimate only with that stopping rule in mind: it leans high when the first catches come early.", "",
             "| variant | workload | seeds run | seeds to first catch | caught (95%) | caught by | anomalies | beyond "
             f"default | unknown | within {ISSUE_SEEDS:,} seeds | real: `protocol` | real: `kill,partition` |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        if s.row.variant == DEFAULT:  # the default's rows and the mutants' have sections of their own
            continue
        plans = real.get(s.row.variant, {})
        reals = [cell_text(*plans[p]) if p in plans else "not run" for p in REAL_PLANS]
        twin = default_twin(s, summaries)
        beyond = "" if twin is None or not twin.seeds else ", ".join(sorted(set(s.anomalies) - set(twin.anomalies))) or "-"
        lines.append(f"| {s.row.variant} | {s.row.workload_label()} | {s.seeds} | "
                     f"{s.seeds_to_first if s.seeds_to_first is not None else '-'} | {cell_text(s.caught, s.seeds)} | "
                     f"{_sources_text(s)} | {_anomalies_text(s.anomalies)} | {beyond} | {s.unknown} | {_within(s)} | "
                     f"{reals[0]} | {reals[1]} |")
    return lines + [""]


def mutation_rates(ledger_path: str | Path) -> dict[str, list[int]]:
    """mutant -> [real runs that caught it, real runs] as docs/MUTATION.md counts them (studies/mutation.py's
    ledger and summary: runs whose nodes proved they ran the mutant, the harness's failures left out)."""
    return {r.mutant.name: [r.caught_runs, r.runs] for r in summarize_mutants(read_mutation_ledger(ledger_path))}


def _beyond_client(s: RowSummary) -> str:
    """The failing seeds with an anomaly not the client's alone (a seed whose ledger line has no `whose`: not known)."""
    known = [r for r in s.failing if "whose" in r]
    n = sum(1 for r in known if set(r["whose"]) - {"client"})
    return str(n) + (f" ({len(s.failing) - len(known)} not known)" if len(known) < len(s.failing) else "")


def _mutant_section(summaries: list[RowSummary], real: dict[str, list[int]]) -> list[str]:
    rows = [s for s in summaries if s.row.mutant]
    if not rows:
        return []
    lines = ["## The mutants", "",
             "Each catalogue mutant of clusters/mutants.py (one protocol rule broken in one place) run as the default "
             "broker with `kafkaesque sim --mutant NAME`, under the workload that reaches its code (the txn workload "
             "for txn_coordinator.py, txn_shell.py and producer_state.py, a consumer group in subscribe mode with "
             "client crashes for group_coordinator.py, the queue workload in assign mode else) and the faults of "
             "every row. Per mutant: the seeds run (from seed 1 until its first failing seeds or its budget), the "
             "seeds up to and including the first that caught it, the share that caught it with its 95% interval, "
             "the checkers that caught them (seeds per source), the anomaly kinds (seeds that showed each), the "
             "default broker's kinds left out when its row of the same workload has seeds (`beyond default`), the "
             "CPU seconds a seed cost, and beside them docs/MUTATION.md's real runs (caught/runs over every plan "
             "it ran, protocol nemesis and random faults). The stopping rule makes a caught mutant's share lean "
             "high; a mutant no seed caught was given a small budget, not 1,000 seeds.", "",
             "The last column counts the caught seeds with an anomaly the checkers do not give the client alone "
             "(`whose`, checkers/clients.py): a seed caught only by the client's own acts (under the txn workload, "
             "kafka-python's failed sends in committed transactions, as the default broker's) is no catch of the "
             "mutant.", "",
             "| mutant | workload | seeds run | seeds to first catch | caught (95%) | caught by | anomalies | beyond "
             "default | unknown | CPU s per seed | real: MUTATION.md | caught not by the client alone |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        twin = default_twin(s, summaries)
        beyond = "" if twin is None or not twin.seeds else ", ".join(sorted(set(s.anomalies) - set(twin.anomalies))) or "-"
        r = real.get(s.row.mutant)
        seeds_to = s.seeds_to_first if s.seeds_to_first is not None else ("-" if s.seeds else "not run")
        lines.append(f"| `{s.row.mutant}` | {s.row.workload_label()} | {s.seeds} | {seeds_to} | "
                     f"{cell_text(s.caught, s.seeds) if s.seeds else '-'} | {_sources_text(s)} | "
                     f"{_anomalies_text(s.anomalies)} | {beyond} | {s.unknown} | {_mean(s.cpu_s)} | "
                     f"{cell_text(*r) if r and r[1] else 'not run'} | {_beyond_client(s)} |")
    lines += ["", "A mutant's seed replays with the `default` row's command of its workload (the last section) and "
              "`--mutant NAME`, e.g. `" + rows[0].row.replay_command(1) + "`.", ""]
    return lines


def default_twin(s: RowSummary, summaries: list[RowSummary]) -> RowSummary | None:
    """The default broker's row with the same settings as a variant's row but the broker (its workload, options
    and faults): what the variant shows beyond it is the flaw's."""
    want = {k: v for k, v in {**s.row.settings(), "broker_variant": DEFAULT}.items() if k != "mutant"}
    return next((d for d in summaries if d.row.is_default and d.row.settings() == want), None)


def _failing_seeds(summaries: list[RowSummary]) -> list[str]:
    lines = ["## The failing seeds", "",
             "Each failing seed of a flaw variant or a mutant, its anomalies and checkers, its run dir (kept in the store the sweep "
             "wrote: runs of seeds that passed are not kept); `kafkaesque sim` with the row's settings (the last "
             "section) and the seed replays it byte for byte on the code that ran it.", "",
             "| variant or mutant | seed | anomalies | caught by | run |", "|---|---|---|---|---|"]
    any_row = False
    for s in summaries:
        if s.row.is_default:
            continue
        for r in s.failing:
            any_row = True
            lines.append(f"| {s.row.label} | {r['seed']} | {', '.join(r.get('anomalies') or []) or '-'} | "
                         f"{', '.join(sorted(r.get('by') or {})) or '-'} | `{r.get('run') or 'not kept'}` |")
    if not any_row:
        lines.append("| - | - | no failing seed | | |")
    return lines + [""]


def _rows_and_costs(summaries: list[RowSummary]) -> list[str]:
    lines = ["## The rows, their settings and costs", "",
             "CPU seconds per seed (a whole `kafkaesque sim` run: the cluster, the clients, the checkers and the "
             "report) were measured on a loaded machine shared with real runs: they say what this sweep cost, not "
             "what the simulator costs at best (benchmarks/bench_sim.py measures that).", "",
             "| row | broker | workload | faults | seeds | unknown | harness errors | CPU s per seed (mean) | "
             "virtual s per seed (mean) | replay a seed |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        if s.row.mutant:  # in the mutants' table, with the command that replays them
            continue
        lines.append(f"| `{s.row.name}` | {s.row.variant} | {s.row.workload_label()} | {', '.join(s.row.nemesis)} | "
                     f"{s.seeds} | {s.unknown} | {s.errors} | {_mean(s.cpu_s)} | {_mean(s.virtual_s)} | "
                     f"`{s.row.replay_command(s.start_seed if s.start_seed is not None else 0)}` |")
    return lines + [""]


def render_markdown(records: list[dict[str, Any]], command: str, detection_page: str = "", notes: str = "",
                    rows: list[SweepRow] | None = None, mutation_real: dict[str, list[int]] | None = None) -> str:
    """docs/SIMULATION.md from the ledger's records (every row of ROWS, or `rows`)."""
    summaries = [summarize(row, records) for row in (rows or list(ROWS.values()))]
    real = detection_rates(detection_page)
    total = sum(s.seeds for s in summaries)
    lines = [
        "# Simulation: the harness's power in the deterministic simulator", "",
        "**Every figure on this page was simulated**: each seed is one `kafkaesque sim` run (the reference cluster's "
        "own node programs and simulated clients in one process, in virtual time, under one seed), not a run of "
        "real processes; only the columns marked `real` come from real runs (docs/DETECTION.md).", "",
        f"Generated by `{command}`{STORE_NOTE if STORE_PLACEHOLDER in command else ''} from the ledger "
        f"{LEDGER} ({total} seeds). Rates are k/n with their 95% Clopper-Pearson interval; none of n is read "
        "as \"rate below x% (95%)\", the one-sided bound (results/confidence.py).", "",
        f"Every seed ran with these settings: {_settings_text()}. A seed is caught when the checkers judge its run "
        "invalid; a run missing evidence (a fault the schedule never applied, no progress) is unknown, never "
        "counted as clean or caught.", "",
        *_default_section(summaries), *_variant_section(summaries, real),
        *_mutant_section(summaries, mutation_real or {}), *_failing_seeds(summaries),
        *_rows_and_costs(summaries),
    ]
    if notes.strip():
        lines += [notes.strip(), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_simulation_doc(ledger: str | Path, out: str | Path, command: str, detection: str | Path | None = None,
                         notes: str = "", mutation_ledger: str | Path | None = MUTATION_LEDGER) -> Path:
    """Render the page from the ledger (and docs/DETECTION.md's real runs, when the page exists, and
    docs/MUTATION.md's, from its ledger)."""
    page = Path(detection).read_text() if detection is not None and Path(detection).is_file() else ""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    real = mutation_rates(mutation_ledger) if mutation_ledger is not None else {}
    out.write_text(render_markdown(read_ledger(ledger), command, page, notes, mutation_real=real))
    return out

