"""`pipeline summarize`: campaign aggregates as Spark jobs, written as JSON for the campaign HTML.

  cells      per (nemesis, broker_variant, acks, flush_policy): runs, verdicts, and the sum of
             each queue anomaly count (from the Spark queue checks, queue_checks.py)
  latency    p50/p95/p99/max of ok ops' latency (completion time - invoke time), by nemesis
             and op (send, poll), for ops invoked inside a fault window and outside all of them
  recovery   per heal (a fault window's end): seconds until throughput recovered, i.e. the
             first whole second after the heal whose ok completions reach 80% of the run's
             throughput outside fault windows; null when it never does before the next fault
             or the end of the main phase (final reads excluded). Summarised per cell.
"""

from __future__ import annotations

from typing import Any

from kafkaesque_harness.results.pipeline.queue_checks import (
    COUNT_COLUMNS,
    RUN,
    judged_runs,
    load_tables,
    pair_ops,
    queue_anomaly_counts,
)

CELL = ["nemesis", "broker_variant", "acks", "flush_policy"]
RECOVERED_FRACTION = 0.8
MAIN_PHASE_OPS = ("send", "poll")  # final reads run after the main phase: not throughput


def _rows(df) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def summarize(spark, warehouse: str, campaigns: list[str] | None = None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    runs, ops, reads = load_tables(spark, warehouse, campaigns)
    runs = runs.cache()
    counts = queue_anomaly_counts(judged_runs(runs), ops, reads)
    per_run = runs.select(*RUN, *CELL).join(counts, RUN, "left")
    cells = per_run.groupBy(*CELL).agg(
        F.count(F.lit(1)).alias("runs"),
        *[F.sum(F.when(F.col("verdict") == v, 1).otherwise(0)).alias(f"verdict_{v}")
          for v in ("true", "false", "unknown")],
        *[F.sum(c).alias(c) for c in COUNT_COLUMNS]).orderBy(*CELL)

    windows = (runs.select(*RUN, F.explode("fault_windows").alias("w"))
               .select(*RUN, "w.fault", "w.start_ns", "w.end_ns").cache())
    # Range joins name their sides' columns apart (w_*, h_*): conditions on df.column references of
    # DataFrames derived from one another can resolve to the same side and join everything to everything.
    wins = windows.select(F.col("campaign").alias("w_campaign"), F.col("run").alias("w_run"), "start_ns", "end_ns")

    def in_window(time_col: str):
        return ((F.col("campaign") == F.col("w_campaign")) & (F.col("run") == F.col("w_run"))
                & (F.col(time_col) >= F.col("start_ns")) & (F.col(time_col) < F.col("end_ns")))

    pairs = pair_ops(ops).where((F.col("outcome") == "ok") & F.col("c_time").isNotNull()) \
        .select(*RUN, "f", "inv_time", "c_time", ((F.col("c_time") - F.col("inv_time")) / 1e6).alias("latency_ms"))
    inside = pairs.join(wins, in_window("inv_time"), "left_semi").withColumn("phase", F.lit("fault"))
    outside = pairs.join(wins, in_window("inv_time"), "left_anti").withColumn("phase", F.lit("no-fault"))
    pct = F.percentile_approx("latency_ms", [0.5, 0.95, 0.99])
    latency = (inside.unionByName(outside).join(runs.select(*RUN, "nemesis"), RUN)
               .groupBy("nemesis", "f", "phase")
               .agg(F.count(F.lit(1)).alias("ops"), pct.alias("p"), F.max("latency_ms").alias("max_ms"))
               .select("nemesis", "f", "phase", "ops", F.col("p")[0].alias("p50_ms"), F.col("p")[1].alias("p95_ms"),
                       F.col("p")[2].alias("p99_ms"), "max_ms")
               .orderBy("nemesis", "f", "phase"))

    # Throughput outside faults per run: ok main-phase completions there / seconds of the main phase outside faults.
    main = pairs.where(F.col("f").isin(*MAIN_PHASE_OPS))
    span = main.groupBy(*RUN).agg(F.min("inv_time").alias("t0"), F.max("c_time").alias("t1"))
    fault_ns = windows.join(span, RUN).groupBy(*RUN).agg(F.sum(
        F.greatest(F.lit(0), F.least("end_ns", "t1") - F.greatest("start_ns", "t0"))).alias("fault_ns"))
    calm_ops = main.join(wins, in_window("c_time"), "left_anti").groupBy(*RUN).agg(F.count(F.lit(1)).alias("calm_ops"))
    baseline = (span.join(fault_ns, RUN, "left").join(calm_ops, RUN, "left").fillna(0, ["fault_ns", "calm_ops"])
                .withColumn("ops_per_s", F.col("calm_ops") / ((F.col("t1") - F.col("t0") - F.col("fault_ns")) / 1e9)))
    # Each heal, and the time until the next fault starts (or the main phase ends).
    starts = wins.select("w_campaign", "w_run", F.col("start_ns").alias("next_start_ns"))
    heals = (windows.join(starts, (F.col("campaign") == F.col("w_campaign")) & (F.col("run") == F.col("w_run"))
                          & (F.col("next_start_ns") >= F.col("end_ns")), "left")
             .groupBy(*RUN, "fault", "end_ns").agg(F.min("next_start_ns").alias("next_ns"))
             .join(span, RUN).select(*RUN, "fault", F.col("end_ns").alias("heal_ns"),
                                     F.coalesce(F.least("next_ns", "t1"), F.col("t1")).alias("until_ns")))
    h = heals.select(F.col("campaign").alias("h_campaign"), F.col("run").alias("h_run"), "fault", "heal_ns",
                     "until_ns")
    buckets = (main.join(h, (F.col("campaign") == F.col("h_campaign")) & (F.col("run") == F.col("h_run"))
                         & (F.col("c_time") >= F.col("heal_ns")) & (F.col("c_time") < F.col("until_ns")))
               .select(*RUN, "fault", "heal_ns", F.floor((F.col("c_time") - F.col("heal_ns")) / 1e9).alias("second"))
               .groupBy(*RUN, "fault", "heal_ns", "second").agg(F.count(F.lit(1)).alias("ops")))
    recovered = (buckets.join(baseline.select(*RUN, "ops_per_s"), RUN)
                 .where(F.col("ops") >= F.lit(RECOVERED_FRACTION) * F.col("ops_per_s"))
                 .groupBy(*RUN, "fault", "heal_ns").agg(F.min("second").alias("recovery_s")))
    per_heal = (heals.join(recovered, [*RUN, "fault", "heal_ns"], "left")
                .join(baseline.select(*RUN, "ops_per_s"), RUN, "left")
                .join(runs.select(*RUN, *CELL), RUN).cache())
    recovery_cells = per_heal.groupBy(*CELL, "fault").agg(
        F.count(F.lit(1)).alias("heals"), F.count("recovery_s").alias("recovered"),
        F.percentile_approx("recovery_s", 0.5).alias("median_s"), F.max("recovery_s").alias("max_s"),
        F.avg("recovery_s").alias("mean_s")).orderBy(*CELL, "fault")
    return {
        "warehouse": warehouse,
        "campaigns": campaigns or "all",
        "runs": runs.count(),
        "cells": _rows(cells),
        "latency": _rows(latency),
        "recovery": {"definition": f"seconds from a heal to the first whole second with at least "
                                   f"{RECOVERED_FRACTION:.0%} of the run's ok ops/s outside fault windows",
                     "cells": _rows(recovery_cells),
                     "heals": _rows(per_heal.select(*RUN, "fault", "heal_ns", "recovery_s", "ops_per_s")
                                    .orderBy(*RUN, "heal_ns"))},
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def print_summary(summary: dict[str, Any], console) -> None:
    from rich.table import Table

    t = Table(title=f"anomalies by cell ({summary['runs']} runs)")
    for c in (*CELL, "runs", "valid", "invalid", "unknown", *COUNT_COLUMNS):
        t.add_column(c.replace("_", " "), overflow="fold")
    for r in summary["cells"]:
        t.add_row(*[_fmt(r[c]) for c in CELL], _fmt(r["runs"]), _fmt(r["verdict_true"]), _fmt(r["verdict_false"]),
                  _fmt(r["verdict_unknown"]), *[_fmt(r[c]) for c in COUNT_COLUMNS])
    console.print(t)
    t = Table(title="latency of ok ops (ms), inside vs outside fault windows")
    for c in ("nemesis", "f", "phase", "ops", "p50_ms", "p95_ms", "p99_ms", "max_ms"):
        t.add_column(c)
    for r in summary["latency"]:
        t.add_row(*[_fmt(r[c]) for c in ("nemesis", "f", "phase", "ops", "p50_ms", "p95_ms", "p99_ms", "max_ms")])
    console.print(t)
    t = Table(title="recovery after heals (s): " + summary["recovery"]["definition"])
    for c in (*CELL, "fault", "heals", "recovered", "median_s", "mean_s", "max_s"):
        t.add_column(c.replace("_", " "))
    for r in summary["recovery"]["cells"]:
        t.add_row(*[_fmt(r[c]) for c in (*CELL, "fault", "heals", "recovered", "median_s", "mean_s", "max_s")])
    console.print(t)
