"""The queue checks as Spark DataFrame jobs over the ingested tables (results/pipeline/ingest.py).

Same definitions as checkers/queue.py, which is the one definition of each anomaly; this
module restates them as set operations so a campaign of runs is checked in one Spark job,
and the differential test (tests/integration/test_pipeline.py) holds the two equal, run by run:

  pairing     checkers pair an invoke with the next op of its process when that op is not an
              invoke (history.pair_ops); no such op: indeterminate (info). Here: ingest applied
              the same rule as the lines passed and wrote each completion's invocation beside it
              (ops.inv_*, reads.inv_seq): a window over every op sorted by process was the
              check's largest job.
  reads       records of ok poll / final-poll pairs (a record's kind must match the invoke's f)
  lost-write  an ok send (key, offset, value from its completion) whose key has a final read,
              and whose value is in no final read of the key, or whose offset (when not negative:
              acknowledged without one, queue.ACK_WITHOUT_OFFSET) is below the key's highest final
              HWM and no read saw the value at that offset
  unexpected  a (key, value) read but never sent (any send invoke, whatever its outcome)
  duplicate   a (key, value) read at two or more offsets
  inconsistent-offsets  per (key, offset), distinct values read minus one
  nonmonotonic-poll / poll-skip  per (process, key), each record read compared with the one
              before it: the previous record of the same op, else the last record of an
              earlier *poll* (final-polls do not move a consumer's position; ingest followed these
              positions as the lines passed: reads.prev_offset, prev_time): offset <= prev is
              nonmonotonic; offset > prev + 1 is a jump, and a poll-skip when an offset between
              is proven to exist in the same era (a read returned a record there, or an ok send
              was acknowledged there), else a gap (no anomaly)
  verdict     false on any anomaly; else unknown when an ok send's key has no final read, or when
              no send was ok at all; else true
"""

from __future__ import annotations

from typing import Any

from kafkaesque_harness.checkers.queue import SUBSCRIBE_ANOMALY_TYPES
from kafkaesque_harness.results.pipeline.ingest import QUEUE_ANOMALIES, _column

RUN = ["campaign", "run"]
# lost_write, unexpected, ...: the assign-mode anomalies; a consumer group's (subscribe mode) are judged in-process only
COUNT_COLUMNS = [_column(n) for n in QUEUE_ANOMALIES if n not in SUBSCRIBE_ANOMALY_TYPES]


def load_tables(spark, warehouse: str, campaigns: list[str] | None = None, runs: list[str] | None = None):
    """(runs, ops, reads) DataFrames, restricted to the given campaigns / run ids (partition pruning)."""
    from pyspark.sql import functions as F

    def read(table: str):
        reader = spark.read.option("basePath", f"{warehouse}/{table}")
        if table == "runs":  # small; runs ingested before a column was added read it as null
            reader = reader.option("mergeSchema", "true")
        df = reader.parquet(f"{warehouse}/{table}")
        if campaigns:
            df = df.where(F.col("campaign").isin(campaigns))
        if runs:
            df = df.where(F.col("run").isin(runs))
        return df

    return read("runs"), read("ops"), read("reads")


def judged_runs(runs):
    """The runs these checks judge: the queue workload's in assign mode. A consumer group's runs (subscribe
    mode) are judged in-process only: their members' reads go back and jump by design, and group-skip and
    lost-commit are not restated here."""
    from pyspark.sql import functions as F

    queue = runs.where(F.col("workload") == "queue")
    if "queue_mode" not in runs.columns:  # a warehouse ingested before the column: every run assigned
        return queue
    return queue.where(F.col("queue_mode").isNull() | (F.col("queue_mode") != "subscribe"))


def pair_ops(ops):
    """One row per completed client invocation: its fields (inv_*), its completion's (c_*) and outcome (the
    completion's type). Ingest paired them as the lines passed (history.pair_stream's rule); an invocation
    without a completion has no row here (no check reads one: `sent` reads the invocations themselves)."""
    from pyspark.sql import functions as F

    return (ops.where(F.col("inv_seq").isNotNull())
            .select(*RUN, "process", F.col("inv_f").alias("f"), "inv_seq", "inv_time", "inv_key", "inv_value",
                    *[F.col(c).alias(f"c_{c}") for c in ("seq", "time", "key", "value", "offset", "hwm", "resent")],
                    F.col("type").alias("outcome")))


def _cutoffs(runs) -> dict[tuple[str, str], int]:
    """Each run's last fault beyond the durability contract, for the runs that had one (a few rows)."""
    from pyspark.sql import functions as F

    if "beyond_budget_ns" not in runs.columns:  # a warehouse ingested before the column: no such fault
        return {}
    return {(r["campaign"], r["run"]): r["beyond_budget_ns"]
            for r in runs.where(F.col("beyond_budget_ns").isNotNull()).select(*RUN, "beyond_budget_ns").collect()}


def _cutoff_of(cutoffs: dict[tuple[str, str], int]):
    """The run's cutoff as a column (null: none), looked up in a literal map: a join with the runs table
    would shuffle every read record for a column that is null in almost every run."""
    from pyspark.sql import functions as F

    if not cutoffs:
        return F.lit(None).cast("long")
    lookup = F.create_map(*[x for (c, r), ns in sorted(cutoffs.items()) for x in (F.lit(f"{c}/{r}"), F.lit(ns))])
    return lookup[F.concat_ws("/", "campaign", "run")].cast("long")


def queue_anomaly_counts(runs, ops, reads):
    """Per run: campaign, run, the six anomaly counts, uncovered (ok sends of keys without a final read), verdict."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    pairs = pair_ops(ops)
    # Every value a send carried (any outcome), once, with the produce requests the client sent it in when
    # it re-sent it: up to that many copies of the value are its own (checkers/queue.py resent_copies),
    # counted apart, not a duplicate.
    sent = (ops.where(F.col("process").isNotNull() & (F.col("type") == "invoke") & (F.col("f") == "send"))
            .select(*RUN, "key", "value", F.lit(None).cast("long").alias("requests")))
    resent = (pairs.where((F.col("f") == "send") & F.col("c_resent").isNotNull())
              .select(*RUN, F.col("inv_key").alias("key"), F.col("inv_value").alias("value"),
                      F.col("c_resent").alias("requests")))
    sends = (sent.unionByName(resent).groupBy(*RUN, "key", "value")
             .agg(F.max("requests").alias("requests")).withColumn("sent", F.lit(True)))
    # An ok send acknowledged before the run's last fault beyond the durability contract is not a
    # lost write when missing (checkers/queue.py): it is counted apart, as there.
    cutoff = _cutoff_of(_cutoffs(runs))

    # Each completion's era: before the run's last fault beyond the budget (0) or after it (1); reads are
    # compared, and offsets proven to exist, within their era only (checkers/queue.py says why).
    def era(time):
        return F.when(cutoff.isNotNull() & (F.col(time) >= cutoff), 1).otherwise(0)

    acked = (pairs.where((F.col("f") == "send") & (F.col("outcome") == "ok"))
                 .select(*RUN, F.col("c_key").alias("key"), F.col("c_offset").alias("offset"),
                         F.col("c_value").alias("value"), era("c_time").alias("era"),
                         (cutoff.isNotNull() & (F.col("c_time") < cutoff)).alias("excused")))
    read_ops = pairs.where(F.col("f").isin("poll", "final-poll") & (F.col("outcome") == "ok"))
    # The records of ok reads (ingest paired each with its invocation, of the same f). Not persisted: reading
    # the Parquet columns again is cheaper than writing the rows to local disk (1M ops: 4.7 s against 14.7 s).
    # A record's consumer position (ingest followed it, per process and key, as the lines passed) counts in the
    # record's era only: a process's completions are in time order (ingest refuses a run where they are not and
    # eras matter), so a position from the era before means no earlier record of this one.
    prev = F.when(era("prev_time") == era("time"), F.col("prev_offset"))
    rd = reads.where(F.col("inv_seq").isNotNull()).select(*RUN, "kind", "key", "offset", "value",
                                                          era("time").alias("era"), prev.alias("prev"))
    final_hwm = (read_ops.where((F.col("f") == "final-poll") & F.col("c_hwm").isNotNull())
                 .groupBy(*RUN, F.col("c_key").alias("key")).agg(F.max("c_hwm").alias("hwm")))
    in_final = (rd.where(F.col("kind") == "final-poll").select(*RUN, "key", "value").distinct()
                .withColumn("in_final", F.lit(True)))
    seen = rd.select(*RUN, "era", "key", "offset", "value").distinct().persist(StorageLevel.DISK_ONLY)

    def per_run(df, name):
        return df.groupBy(*RUN).agg(F.count(F.lit(1)).alias(name))

    inconsistent = (seen.groupBy(*RUN, "era", "key", "offset").agg(F.count(F.lit(1)).alias("n"))
                    .groupBy(*RUN).agg(F.sum(F.col("n") - 1).cast("long").alias("inconsistent_offsets")))
    # Each value read, per era, with the offsets it was read at and what its sends say of it: one join for
    # both counts below, kept (Spark did not reuse it across the two; 1M ops: 37 s against 41-44 s)
    by_value = (seen.groupBy(*RUN, "era", "key", "value").agg(F.count(F.lit(1)).alias("n_offsets"))
                .join(sends, [*RUN, "key", "value"], "left").persist(StorageLevel.DISK_ONLY))
    duplicate = per_run(by_value.where(F.col("n_offsets") > F.coalesce(F.col("requests"), F.lit(1))), "duplicate")
    unexpected = per_run(by_value.where(F.col("sent").isNull()).select(*RUN, "key", "value").distinct(), "unexpected")

    seen_flag = seen.select(*RUN, "key", "offset", "value").distinct().withColumn("seen_at_offset", F.lit(True))
    judged = (acked.join(final_hwm, [*RUN, "key"], "left")
              .join(in_final, [*RUN, "key", "value"], "left")
              .join(seen_flag, [*RUN, "key", "offset", "value"], "left"))
    lost_cond = F.col("hwm").isNotNull() & ~F.col("excused") & (
        F.col("in_final").isNull() | ((F.col("offset") >= 0) & (F.col("offset") < F.col("hwm"))
                                      & F.col("seen_at_offset").isNull()))
    acked_counts = judged.groupBy(*RUN).agg(
        F.sum(F.when(lost_cond, 1).otherwise(0)).cast("long").alias("lost_write"),
        F.sum(F.when(F.col("hwm").isNull(), 1).otherwise(0)).cast("long").alias("uncovered"),
        F.count(F.lit(1)).alias("acked_sends"))

    # Only the steps that are not to the next offset matter, and few are: kept for both counts below.
    odd_steps = (rd.select(*RUN, "era", "key", "offset", "prev")
                 .where(F.col("prev").isNotNull() & (F.col("offset") != F.col("prev") + 1))
                 .persist(StorageLevel.DISK_ONLY))
    nonmonotonic = per_run(odd_steps.where(F.col("offset") <= F.col("prev")), "nonmonotonic_poll")
    skips = per_run(_proven_skips(odd_steps.where(F.col("offset") > F.col("prev") + 1), seen, acked), "poll_skip")

    out = runs.select(*RUN)
    for df in (acked_counts, unexpected, duplicate, inconsistent, nonmonotonic, skips):
        out = out.join(df, RUN, "left")
    out = out.fillna(0, subset=[*COUNT_COLUMNS, "uncovered", "acked_sends"])
    any_anomaly = sum((F.col(c) for c in COUNT_COLUMNS), F.lit(0)) > 0
    verdict = (F.when(any_anomaly, F.lit("false"))
               .when((F.col("uncovered") > 0) | (F.col("acked_sends") == 0), F.lit("unknown"))
               .otherwise(F.lit("true")))
    return out.withColumn("verdict", verdict).select(*RUN, "verdict", *COUNT_COLUMNS, "uncovered", "acked_sends")


def _proven_skips(jumps, seen, acked):
    """The jumps (run, era, key, prev, offset) over an offset proven to exist in that era: one a read
    returned a record at, or an acknowledged send got. For each jump, the first proven offset above
    its start, found by a running minimum over the partition's proven offsets and jumps in descending
    offset order (a proven offset equal to a jump's start sorts after it: only those above it count).
    The frame grows from the partition's start, which Spark computes in one pass; the same minimum over
    a frame running to the partition's end (rowsBetween(1, unboundedFollowing)) is recomputed row by
    row, quadratic in a partition's rows: it made a 1M-op history's check 3x slower."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    proven = (seen.select(*RUN, "era", "key", "offset")
              .unionByName(acked.where(F.col("offset").isNotNull()).select(*RUN, "era", "key", "offset"))
              .distinct()
              .select(*RUN, "era", "key", F.col("offset").alias("at"), F.lit(None).cast("long").alias("to")))
    marks = jumps.select(*RUN, "era", "key", F.col("prev").alias("at"), F.col("offset").alias("to")).unionByName(proven)
    above = (Window.partitionBy(*RUN, "era", "key").orderBy(F.col("at").desc(), F.col("to").isNotNull().desc())
             .rowsBetween(Window.unboundedPreceding, -1))
    next_proven = F.min(F.when(F.col("to").isNull(), F.col("at"))).over(above)
    return (marks.select("*", next_proven.alias("next_proven"))
            .where(F.col("to").isNotNull() & (F.col("next_proven") < F.col("to"))))


def check(spark, warehouse: str, campaigns: list[str] | None = None,
          runs: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the queue checks; per-run rows (with the in-process verdict and counts recorded at ingest beside)."""

    runs_df, ops, reads = load_tables(spark, warehouse, campaigns, runs)
    counts = queue_anomaly_counts(judged_runs(runs_df), ops, reads)
    inproc = runs_df.select(*RUN, "run_dir", "nemesis", "broker_variant", "acks", "flush_policy", "queue_verdict",
                            *[f"inproc_{c}" for c in COUNT_COLUMNS])
    rows = counts.join(inproc, RUN, "left").orderBy(*RUN).collect()
    return [r.asDict() for r in rows]


def disagreements(rows: list[dict[str, Any]]) -> list[str]:
    """Runs where the Spark verdict or a count differs from the in-process checker's results.json."""
    out = []
    for r in rows:
        if r.get("queue_verdict") is None:
            continue  # no results.json: nothing to compare with
        diffs = []
        if r["verdict"] != r["queue_verdict"]:
            diffs.append(f"verdict {r['verdict']} vs {r['queue_verdict']}")
        for c in COUNT_COLUMNS:
            mine, theirs = r[c], r.get(f"inproc_{c}")
            if theirs is not None and mine != theirs:
                diffs.append(f"{c} {mine} vs {theirs}")
        if diffs:
            out.append(f"{r['campaign']}/{r['run']}: " + ", ".join(diffs))
    return out
