"""`kafkaesque pipeline ingest|check|summarize`: the typer commands, progress and tables (rich) and exit codes.

Exit codes: ingest 0; check 0 every run valid, 1 any invalid, 2 any unknown and none invalid
(as `kafkaesque run` and campaigns), 4 with --compare when Spark and the in-process checker
disagree on a run; summarize 0. A user error (no Java, bad path, no runs) is one sentence, exit 3.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from kafkaesque_harness.history.extras import need
from kafkaesque_harness.results.pipeline import PipelineError

pipeline_app = typer.Typer(add_completion=False, no_args_is_help=True,
                           help="The Spark pipeline over stored histories: ingest to Parquet, check, summarize.")
err = Console(stderr=True, soft_wrap=True)
EXIT_DISAGREE = 4

Warehouse = Annotated[Path, typer.Option(help="where the Parquet tables are (written by ingest)")]
Master = Annotated[str, typer.Option("--spark-master", help="local[*], local[2], or spark://host:7077")]
SparkLogs = Annotated[bool, typer.Option("--spark-logs", help="show Spark's own logs (default: a file under "
                                                              "<warehouse>/spark-logs/)")]
Campaigns = Annotated[list[str] | None, typer.Option("--campaign", help="only this campaign (repeatable)")]
SparkConf = Annotated[list[str] | None, typer.Option("--spark-conf", help="extra Spark setting KEY=VALUE (repeatable)")]
DEFAULT_WAREHOUSE = Path("store/pipeline")


def _fail(message: str) -> None:
    err.print(f"[red]error:[/] {message}")
    raise typer.Exit(3)


def _spinner(text: str) -> Progress:
    return Progress(SpinnerColumn(), TextColumn(text), TimeElapsedColumn(), console=err, transient=True)


def _session(master: str, warehouse: Path, command: str, spark_logs: bool, conf: list[str] | None):
    from kafkaesque_harness.results.pipeline.session import start_session

    extra = {}
    for kv in conf or []:
        if "=" not in kv:
            _fail(f"--spark-conf {kv!r} is not KEY=VALUE; write e.g. --spark-conf spark.driver.memory=2g.")
        k, v = kv.split("=", 1)
        extra[k] = v
    with _spinner(f"starting Spark ({master})"):
        spark, log_file = start_session(master, warehouse, command, spark_logs, extra)
    if log_file:
        err.print(f"[dim]Spark's log: {log_file}[/]")
    return spark


def _need_tables(warehouse: Path) -> None:
    from kafkaesque_harness.results.pipeline.ingest import stale_tables

    if not (warehouse / "runs").is_dir() or not any((warehouse / "runs").glob("campaign=*/run=*/part-0.parquet")):
        raise PipelineError(f"no ingested runs in {warehouse}; run `kafkaesque pipeline ingest STORE "
                            f"--warehouse {warehouse}` first.")
    stale = stale_tables(warehouse)
    if stale:
        raise PipelineError(f"{len(stale)} table(s) in {warehouse} were ingested before columns the checks read "
                            f"(e.g. {stale[0]}); run `kafkaesque pipeline ingest` on their runs again (it "
                            "re-ingests them).")


@contextmanager
def _spark_job(warehouse: Path, master: str, command: str, spark_logs: bool, conf: list[str] | None,
               doing: str) -> Iterator[Any]:
    """A Spark session over the ingested tables for one command (one sentence and exit 3 when there are none,
    or they are stale), with a spinner saying what it is `doing`; the session is stopped afterwards."""
    try:
        _need_tables(warehouse)
        spark = _session(master, warehouse, command, spark_logs, conf)
    except PipelineError as e:
        _fail(str(e))
    try:
        with _spinner(doing):
            yield spark
    finally:
        spark.stop()


@pipeline_app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="store, campaign or run directories")],
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    force: Annotated[bool, typer.Option(help="ingest again runs already ingested from the same history")] = False,
    jobs: Annotated[int, typer.Option(help="runs ingested in parallel (processes)")] = 2,
) -> None:
    """Stored runs -> Parquet tables ops, reads and runs under the warehouse, partitioned by campaign and run."""
    need("pyarrow", "spark", "kafkaesque pipeline ingest")
    from kafkaesque_harness.results.pipeline.ingest import ingest as run_ingest

    t0 = time.perf_counter()
    try:
        with Progress(SpinnerColumn(), TextColumn("ingesting {task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(), console=err,
                      transient=True) as progress:
            task = progress.add_task("runs", total=None)

            def step(done, total, src, _what):
                progress.update(task, total=total, completed=done, description=f"{src.campaign}/{src.run}")

            summary = run_ingest(paths, warehouse, force=force, jobs=max(1, jobs), progress=step)
    except PipelineError as e:
        _fail(str(e))
    err.print(f"ingested {summary['ingested']} run(s) ({summary['ops']:,} ops, {summary['reads']:,} records read), "
              f"{summary['skipped']} already up to date, in {time.perf_counter() - t0:.1f} s -> {warehouse}")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))


@pipeline_app.command()
def check(
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    spark_master: Master = "local[*]",
    spark_logs: SparkLogs = False,
    campaign: Campaigns = None,
    output: Annotated[Path | None, typer.Option(help="JSON output (default <warehouse>/check.json)")] = None,
    compare: Annotated[bool, typer.Option(help="exit 4 if a verdict or count differs from the run's results.json")]
    = False,
    spark_conf: SparkConf = None,
) -> None:
    """The queue checks (lost, unexpected, duplicate, inconsistent offsets, nonmonotonic, skips) as Spark jobs."""
    from kafkaesque_harness.results.pipeline.queue_checks import COUNT_COLUMNS, disagreements
    from kafkaesque_harness.results.pipeline.queue_checks import check as run_check

    with _spark_job(warehouse, spark_master, "check", spark_logs, spark_conf, "checking runs on Spark") as spark:
        t0 = time.perf_counter()
        rows = run_check(spark, str(warehouse.resolve()), campaign)
    elapsed = time.perf_counter() - t0
    diffs = disagreements(rows)
    table = Table(title=f"queue checks on Spark ({len(rows)} runs, {elapsed:.1f} s)")
    short = {"lost_write": "lost", "unexpected": "unexp", "duplicate": "dup", "inconsistent_offsets": "incons",
             "nonmonotonic_poll": "nonmono", "poll_skip": "skip"}
    for c in ("campaign", "run", "verdict", *COUNT_COLUMNS, "uncovered"):
        table.add_column(short.get(c, c), overflow="fold")
    colour = {"true": "green", "false": "red"}
    for r in rows:
        table.add_row(r["campaign"], r["run"], f"[{colour.get(r['verdict'], 'yellow')}]{r['verdict']}[/]",
                      *[str(r[c]) for c in COUNT_COLUMNS], str(r["uncovered"]))
    err.print(table)
    out = output or warehouse / "check.json"
    out.write_text(json.dumps({"master": spark_master, "seconds": round(elapsed, 3), "runs": rows,
                               "disagreements": diffs}, indent=2, default=str) + "\n")
    err.print(f"written: {out}")
    for d in diffs:
        err.print(f"[red]differs from the in-process checker:[/] {d}")
    verdicts = [r["verdict"] for r in rows]
    print(json.dumps({"runs": len(rows), "false": verdicts.count("false"), "unknown": verdicts.count("unknown"),
                      "disagreements": len(diffs)}))
    if compare and diffs:
        raise typer.Exit(EXIT_DISAGREE)
    raise typer.Exit(1 if "false" in verdicts else 2 if "unknown" in verdicts else 0)


@pipeline_app.command()
def summarize(
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    spark_master: Master = "local[*]",
    spark_logs: SparkLogs = False,
    campaign: Campaigns = None,
    output: Annotated[Path | None, typer.Option(help="JSON output (default <warehouse>/summary.json)")] = None,
    spark_conf: SparkConf = None,
) -> None:
    """Campaign aggregates: anomalies by nemesis x variant x acks x flush, latency in/out of faults, recovery."""
    from kafkaesque_harness.results.pipeline.summarize import print_summary
    from kafkaesque_harness.results.pipeline.summarize import summarize as run_summarize

    with _spark_job(warehouse, spark_master, "summarize", spark_logs, spark_conf, "aggregating on Spark") as spark:
        summary = run_summarize(spark, str(warehouse.resolve()), campaign)
    out = output or warehouse / "summary.json"
    out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print_summary(summary, err)
    err.print(f"written: {out}")


standalone_app = typer.Typer(add_completion=False, no_args_is_help=True,
                             help="A Spark standalone cluster on this machine (a master and workers, on loopback): "
                                  "the scale-out path of check and summarize (--spark-master spark://...).")
pipeline_app.add_typer(standalone_app, name="standalone")
StandaloneDir = Annotated[Path, typer.Option("--dir", help="where its state file, logs and scratch space go")]
DEFAULT_STANDALONE = Path("store/spark-standalone")


@standalone_app.command("up")
def standalone_up(
    directory: StandaloneDir = DEFAULT_STANDALONE,
    workers: Annotated[int, typer.Option(help="how many workers")] = 2,
    cores: Annotated[int, typer.Option(help="cores per worker")] = 1,
    memory: Annotated[str, typer.Option(help="memory per worker, e.g. 1g")] = "1g",
) -> None:
    """Start a master and workers; print the spark:// URL once every worker has registered (stop: down)."""
    from kafkaesque_harness.results.pipeline.standalone import start

    try:
        with _spinner(f"starting a Spark master and {workers} worker(s)"):
            cluster = start(directory, workers=workers, cores=cores, memory=memory)
    except PipelineError as e:
        _fail(str(e))
    err.print(f"Spark standalone up: {len(cluster.processes) - 1} worker(s), logs in {cluster.dir}; "
              f"stop it with `kafkaesque pipeline standalone down --dir {directory}`")
    print(cluster.url)


@standalone_app.command("down")
def standalone_down(directory: StandaloneDir = DEFAULT_STANDALONE) -> None:
    """Stop the master and workers `up` started in --dir (only those: a reused pid is left alone)."""
    from kafkaesque_harness.results.pipeline.standalone import stop

    try:
        stopped = stop(directory)
    except PipelineError as e:
        _fail(str(e))
    err.print(f"stopped: {', '.join(stopped)}" if stopped else f"nothing started in {directory} is running")
