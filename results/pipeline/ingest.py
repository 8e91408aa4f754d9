"""`pipeline ingest`: stored runs -> Parquet, once, so later Spark jobs never parse JSON again.

Input: a store dir, a campaign dir (<store>/campaigns/<name>/<stamp>/ with campaign.json) or
run dirs (test.json + history.jsonl [+ results.json], results/store.py). Each run's history
is read with the project's one reader (history.iter_history) and written with
pyarrow, in row groups of a million rows so memory stays flat on 50M-op histories. Spark is
not needed here (no JVM start-up); the checks and aggregates that read these tables are Spark.

Tables under the warehouse (default store/pipeline), Hive-partitioned by campaign and run:

  ops/campaign=C/run=R/part-0.parquet     one row per op, its value flattened as the run's workload
      reads it (workloads/base.py ValueReader; the queue's: send [key, value] / ok [key, [offset,
      value]], final-poll [key] / ok [key, hwm, ...]): seq (line order, what pairing follows), index,
      time, process (null: nemesis), type, f, key, value, offset (a write's), hwm (a final read's),
      node, error, value_json (nemesis ops' and other ops' values the workload does not read),
      resent; on a completion, its invocation's seq, time, f, key and value (inv_*): ingest pairs
      the ops as the lines pass (history.pair_stream's rule), so no Spark job sorts them again
  reads/campaign=C/run=R/part-0.parquet   one row per record a read returned (a poll, a final-poll):
      seq (of the completion), pos (order inside it), kind (the op's f), key, offset, value; and,
      when the read is an ok completion of an invocation of the same f (the reads the checks
      judge), inv_seq, process and time (the completion's), and the consumer's position before the
      record (prev_offset, prev_time: where the same process last read the key), which ingest follows as
      the lines pass, so no Spark job sorts every record by process
  runs/campaign=C/run=R/part-0.parquet    one row per run: the spec fields, results.json's
      verdicts and in-process queue anomaly counts, fault windows from the nemesis ops, and
      the history's size and mtime (a run already ingested from the same file is skipped)

With reads as (key, offset, value) rows the set-based checks are joins and group-bys
(results/pipeline/queue_checks.py). Campaign is the campaign's "<name>-<stamp>" or "none".
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaesque_harness.checkers.queue import ANOMALY_TYPES as QUEUE_ANOMALIES
from kafkaesque_harness.checkers.queue import resent_requests
from kafkaesque_harness.results.pipeline import PipelineError
from kafkaesque_harness.workloads.base import ValueReader
from kafkaesque_harness.workloads.registry import value_reader

NO_CAMPAIGN = "none"
ROW_GROUP = 1_000_000


def _column(name: str) -> str:
    return name.replace("-", "_")


def ops_schema():
    import pyarrow as pa

    return pa.schema([("seq", pa.int64()), ("index", pa.int64()), ("time", pa.int64()), ("process", pa.int64()),
                      ("type", pa.string()), ("f", pa.string()), ("key", pa.int64()), ("value", pa.int64()),
                      ("offset", pa.int64()), ("hwm", pa.int64()), ("node", pa.string()), ("error", pa.string()),
                      ("value_json", pa.string()),
                      # the produce requests the client sent a send in, when it re-sent it (checkers/queue.py
                      # resent_requests: up to that many copies of its value are no duplicate)
                      ("resent", pa.int64()),
                      # a completion's invocation (history.pair_stream's rule, applied here as the lines
                      # pass): its seq, time, f, key and value; null on invocations, nemesis ops and a
                      # completion without an invocation (ignored, as pairing ignores it)
                      ("inv_seq", pa.int64()), ("inv_time", pa.int64()), ("inv_f", pa.string()),
                      ("inv_key", pa.int64()), ("inv_value", pa.int64())])


def reads_schema():
    import pyarrow as pa

    return pa.schema([("seq", pa.int64()), ("pos", pa.int32()), ("kind", pa.string()), ("key", pa.int64()),
                      ("offset", pa.int64()), ("value", pa.int64()),
                      # the read as the checks judge it: an ok completion of an invocation of the same f (its
                      # seq, its process, the completion's time); null for any other, which no check reads
                      ("inv_seq", pa.int64()), ("process", pa.int64()), ("time", pa.int64()),
                      # the consumer's position before this record, for the judged reads (checkers/queue.py
                      # QueueCheck._read): the offset of the previous record of the same key in the same read,
                      # else of the last record of the key in an earlier judged poll of the process (final-polls
                      # do not move a position); and the completion time of the read it came from, which says
                      # its era. Null: no earlier record. A sort of every record in Spark otherwise.
                      ("prev_offset", pa.int64()), ("prev_time", pa.int64())])


def runs_schema():
    import pyarrow as pa

    window = pa.struct([("fault", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64())])
    return pa.schema([
        ("run_dir", pa.string()), ("test_name", pa.string()), ("started", pa.string()), ("workload", pa.string()),
        ("nemesis", pa.string()), ("nemesis_target", pa.string()), ("nemesis_interval", pa.float64()),
        ("broker_variant", pa.string()), ("acks", pa.string()), ("flush_policy", pa.string()),
        ("partitions", pa.int64()), ("concurrency", pa.int64()), ("time_limit", pa.float64()),
        ("cluster", pa.string()), ("seed", pa.int64()),
        # the queue workload's mode: a consumer group's (subscribe) runs are judged in-process only
        ("queue_mode", pa.string()),
        ("verdict", pa.string()), ("queue_verdict", pa.string()),
        *[(f"inproc_{_column(n)}", pa.int64()) for n in QUEUE_ANOMALIES],
        ("ops", pa.int64()), ("reads", pa.int64()), ("first_ns", pa.int64()), ("last_ns", pa.int64()),
        ("fault_windows", pa.list_(window)), ("history_bytes", pa.int64()), ("history_mtime_ns", pa.int64()),
        # the last fault beyond the durability contract (checkers/queue.py: losses acked before it are apart)
        ("beyond_budget_ns", pa.int64()),
    ])


@dataclass(frozen=True)
class RunSource:
    run_dir: Path
    campaign: str
    run: str


def _safe(name: str) -> str:
    """A partition value: no '/', '=' or spaces (Hive-style directory names)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "_"


def _is_run_dir(p: Path) -> bool:
    return (p / "test.json").is_file() and (p / "history.jsonl").is_file()


def _campaign_runs(campaign_dir: Path) -> tuple[str, list[Path]]:
    """The campaign's partition name and its runs' directories, as campaign.json recorded them."""
    try:
        data = json.loads((campaign_dir / "campaign.json").read_text())
    except (OSError, ValueError) as e:
        raise PipelineError(f"{campaign_dir / 'campaign.json'} is unreadable ({e}); re-run the campaign "
                            "or pass its run directories instead.") from None
    store_root = campaign_dir.parent.parent.parent  # <store>/campaigns/<name>/<stamp>
    runs = []
    for rec in data.get("runs", []):
        rd = rec.get("run_dir")
        if not rd:
            continue  # skipped or never reached
        p = Path(rd)
        if not p.is_absolute() and not _is_run_dir(p):  # recorded relative to the campaign's cwd
            p = store_root / Path(rd).parts[-2] / Path(rd).parts[-1]
        if _is_run_dir(p):
            runs.append(p.resolve())
    return _safe(f"{data.get('name', campaign_dir.parent.name)}-{campaign_dir.name}"), runs


def discover_runs(paths: Iterable[Path]) -> list[RunSource]:
    """Run dirs under the given store, campaign or run directories, each with its campaign."""
    found: dict[Path, str] = {}
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise PipelineError(f"{path} does not exist; pass a store, campaign or run directory.")
        if _is_run_dir(path):
            found.setdefault(path.resolve(), NO_CAMPAIGN)
        elif (path / "campaign.json").is_file():
            name, runs = _campaign_runs(path)
            for r in runs:
                found[r] = name
        elif path.is_dir():  # a store: <store>/<test>/<stamp>/ and <store>/campaigns/<name>/<stamp>/
            campaign_of: dict[Path, str] = {}
            for cj in sorted(path.glob("campaigns/*/*/campaign.json")):
                if not cj.parent.is_symlink():
                    name, runs = _campaign_runs(cj.parent)
                    campaign_of.update({r: name for r in runs})
            for test_dir in sorted(p for p in path.iterdir() if p.is_dir() and p.name != "campaigns"):
                for run in sorted(test_dir.iterdir()):
                    if not run.is_symlink() and _is_run_dir(run):
                        r = run.resolve()
                        found[r] = campaign_of.get(r, found.get(r, NO_CAMPAIGN))
        else:
            raise PipelineError(f"{path} is not a directory; pass a store, campaign or run directory.")
    sources, used = [], set()
    for run_dir, campaign in sorted(found.items(), key=lambda kv: (kv[1], str(kv[0]))):
        run = _safe(f"{run_dir.parent.name}-{run_dir.name}")
        n = 2
        while (campaign, run) in used:  # the same test name and second in two stores
            run = _safe(f"{run_dir.parent.name}-{run_dir.name}-{n}")
            n += 1
        used.add((campaign, run))
        sources.append(RunSource(run_dir, campaign, run))
    if not sources:
        raise PipelineError(f"no stored runs under {', '.join(map(str, paths))} (a run directory has test.json and "
                            "history.jsonl); pass a store, campaign or run directory.")
    return sources


def _int(x: Any, what: str, path: Path, line: int) -> int:
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, str) and re.fullmatch(r"-?\d+", x):  # poll keys are JSON object keys: strings
        return int(x)
    raise PipelineError(f"{path} line {line}: {what} {x!r} is not an integer; the pipeline's tables hold "
                        "integer keys, offsets and values (check other runs with `kafkaesque analyze`).")


def _verdict(v: Any) -> str | None:
    if v is None:
        return None
    return {True: "true", False: "false"}.get(v, str(v)) if isinstance(v, bool) else str(v)


class _TableWriter:
    """Column lists flushed as row groups to `<dir>/part-0.parquet` (written as a dot-file, renamed at close)."""

    def __init__(self, out_dir: Path, schema) -> None:
        import pyarrow.parquet as pq

        out_dir.mkdir(parents=True, exist_ok=True)
        self.final = out_dir / "part-0.parquet"
        self.tmp = out_dir / ".part-0.parquet.tmp"  # Spark skips dot-files: a crashed ingest leaves nothing read
        self.schema = schema
        self.cols: dict[str, list] = {n: [] for n in schema.names}
        self.rows = 0
        self.writer = pq.ParquetWriter(self.tmp, schema, compression="snappy")

    def flush(self) -> None:
        import pyarrow as pa

        if self.cols[self.schema.names[0]]:
            try:
                table = pa.Table.from_pydict(self.cols, schema=self.schema)
            except (OverflowError, pa.ArrowInvalid) as e:
                raise PipelineError(f"a value does not fit the pipeline's 64-bit columns ({e}); "
                                    "the queue workload's values are 64-bit integers.") from None
            self.writer.write_table(table, row_group_size=ROW_GROUP)
            for v in self.cols.values():
                v.clear()

    def close(self) -> None:
        self.flush()
        self.writer.close()
        os.replace(self.tmp, self.final)


def _flatten_history(history: Path, ops_dir: Path, reads_dir: Path, values: ValueReader) -> dict[str, Any]:
    """Write the ops and reads tables of one history, its values read with `values` (the run's workload's);
    return counts, times and fault windows."""
    from kafkaesque_harness.history import BEYOND_BUDGET, NEMESIS, FaultWindows, iter_history

    ops_w, reads_w = _TableWriter(ops_dir, ops_schema()), _TableWriter(reads_dir, reads_schema())
    o, r = ops_w.cols, reads_w.cols
    o_seq, o_index, o_time, o_process, o_type, o_f = o["seq"], o["index"], o["time"], o["process"], o["type"], o["f"]
    o_key, o_value, o_offset, o_hwm = o["key"], o["value"], o["offset"], o["hwm"]
    o_node, o_error, o_json, o_resent = o["node"], o["error"], o["value_json"], o["resent"]
    o_inv = [o[c] for c in ("inv_seq", "inv_time", "inv_f", "inv_key", "inv_value")]
    r_seq, r_pos, r_kind, r_key, r_offset, r_value = r["seq"], r["pos"], r["kind"], r["key"], r["offset"], r["value"]
    r_inv_seq, r_process, r_time = r["inv_seq"], r["process"], r["time"]
    r_prev_offset, r_prev_time = r["prev_offset"], r["prev_time"]
    # Pairing as the lines pass (history.pair_stream's rule): a process's open invocation, as the fields its
    # completion's row carries; an invocation's next op of its process completes it unless it is an invocation.
    open_invocation: dict[Any, tuple] = {}
    # (process, key) -> (offset, completion time) of the last record of the key in the process's last judged
    # poll: the consumer's position, which its next read of the key is compared with. Without regard to eras
    # (the cutoff is known at the end): the check drops a position from the era before the record's, which is
    # exact while each process's completions are in time order (checked below).
    position: dict[tuple[int, int], tuple[int, int]] = {}
    last_completion: dict[Any, int] = {}  # process -> its last completion's time
    backwards_line = None  # the first line where a process's completion is earlier than its previous one
    unpaired = (None,) * len(o_inv)
    windows = FaultWindows()  # the report's rule too (history/faults.py)
    beyond_budget_ns = None
    n_ops = n_reads = 0
    first_ns = last_ns = None
    read_ops = frozenset(values.op_names)
    for op in iter_history(history):
        seq = n_ops  # pairing follows the file's order (history.pair_ops), whatever `index` says
        line = n_ops + 1
        v = op.value
        key = value = offset = hwm = vjson = None
        if op.process == NEMESIS:
            windows.see(op)
            if op.type != "invoke" and isinstance(v, dict) and v.get(BEYOND_BUDGET):
                beyond_budget_ns = op.time
        elif op.f in read_ops:
            try:
                key, written, drained = values.key(op), values.written(op), values.drained(op)
                records = list(values.records(op))
            except (ValueError, TypeError) as e:  # e.g. a poll keyed by something that is not a number
                raise PipelineError(f"{history} line {line}: the {op.f} value {json.dumps(v, default=str)[:80]} "
                                    f"cannot be read ({e}); the pipeline's tables hold integer keys, offsets "
                                    "and values (check other runs with `kafkaesque analyze`).") from None
            if written is not None:
                key, offset, value = written
                value = _int(value, "value", history, line)
                if offset is not None:
                    offset = _int(offset, "offset", history, line)
            if drained is not None:
                key, hwm = drained
                hwm = _int(hwm, "hwm", history, line)
            if key is not None:
                key = _int(key, "key", history, line)
        invocation = unpaired
        if op.process != NEMESIS:
            if op.type == "invoke":
                open_invocation[op.process] = (seq, op.time, op.f, key, value)
            else:
                invocation = open_invocation.pop(op.process, unpaired)
                if op.time is not None:
                    if op.time < last_completion.get(op.process, op.time) and backwards_line is None:
                        backwards_line = line
                    last_completion[op.process] = op.time
        if op.process != NEMESIS and op.f in read_ops:
            judged = op.type == "ok" and invocation[2] == op.f
            inv_seq, process, time = (invocation[0], int(op.process), op.time) if judged else (None, None, None)
            in_this_read: dict[int, tuple[int, int]] = {}  # key -> this read's last record of it, with its time
            for pos, (k, o, val) in enumerate(records):
                k, o = _int(k, "key", history, line), _int(o, "offset", history, line)
                prev_offset = prev_time = None
                if judged:
                    at = in_this_read.get(k) or position.get((process, k))
                    if at is not None:
                        prev_offset, prev_time = at
                    in_this_read[k] = (o, time)
                r_inv_seq.append(inv_seq)
                r_process.append(process)
                r_time.append(time)
                r_prev_offset.append(prev_offset)
                r_prev_time.append(prev_time)
                r_seq.append(seq)
                r_pos.append(pos)
                r_kind.append(op.f)
                r_key.append(k)
                r_offset.append(o)
                r_value.append(_int(val, "value", history, line))
            if judged and op.f == "poll":
                for k, at in in_this_read.items():
                    position[(process, k)] = at
            n_reads += len(records)
        if vjson is None and v is not None and (op.process == NEMESIS or op.f not in read_ops):
            vjson = json.dumps(v, separators=(",", ":"), default=str)
        o_seq.append(seq)
        o_index.append(op.index)
        o_time.append(op.time)
        o_process.append(None if op.process == NEMESIS else int(op.process))
        o_type.append(op.type)
        o_f.append(op.f)
        o_key.append(key)
        o_value.append(value)
        o_offset.append(offset)
        o_hwm.append(hwm)
        o_node.append(op.node)
        o_error.append(None if op.error is None else str(op.error))
        o_json.append(vjson)
        o_resent.append(resent_requests(op.extra) if op.extra and op.type != "invoke" else None)
        for column, v in zip(o_inv, invocation, strict=True):
            column.append(v)
        n_ops += 1
        if first_ns is None:
            first_ns = op.time
        last_ns = op.time
        if len(o_seq) >= ROW_GROUP:
            ops_w.flush()
        if len(r_seq) >= ROW_GROUP:
            reads_w.flush()
    if beyond_budget_ns is not None and backwards_line is not None:  # the tables stay dot-files: read by none
        raise PipelineError(f"{history} line {backwards_line}: a completion is earlier than its process's previous "
                            "one, and the run has a fault beyond the durability contract, so the pipeline cannot "
                            "place its reads in eras; check this run with `kafkaesque analyze`.")
    ops_w.close()
    reads_w.close()
    return {"ops": n_ops, "reads": n_reads, "first_ns": first_ns, "last_ns": last_ns,
            "fault_windows": [{"fault": w.name, "start_ns": w.start_ns,
                               "end_ns": w.end_ns if w.end_ns is not None else (last_ns or 0)}
                              for w in windows.finish()],
            "beyond_budget_ns": beyond_budget_ns}


def _run_row(src: RunSource, test: dict[str, Any], flat: dict[str, Any], history: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if (src.run_dir / "results.json").is_file():
        try:
            results = json.loads((src.run_dir / "results.json").read_text())
        except ValueError:
            results = {}
    queue = (results.get("checkers") or {}).get("queue") or {}
    qstats = queue.get("stats") or {}
    st = history.stat()
    row = {
        "run_dir": str(src.run_dir), "test_name": src.run_dir.parent.name, "started": src.run_dir.name,
        "workload": test.get("workload"), "nemesis": ",".join(test.get("nemesis") or []) or "none",
        "nemesis_target": test.get("nemesis_target"), "nemesis_interval": test.get("nemesis_interval"),
        "broker_variant": test.get("broker_variant", "default"), "acks": str(test.get("acks", "all")),
        "flush_policy": test.get("flush_policy"), "partitions": test.get("partitions"),
        "concurrency": test.get("concurrency"), "time_limit": test.get("time_limit"),
        "cluster": test.get("cluster"), "seed": test.get("seed"),
        "queue_mode": (test.get("workload_options") or {}).get("queue_mode", "assign")
        if test.get("workload") == "queue" else None,
        "verdict": _verdict(results.get("valid")) if results else "incomplete",
        "queue_verdict": _verdict(queue.get("valid")),
        **{f"inproc_{_column(n)}": qstats.get(f"{n}-count") for n in QUEUE_ANOMALIES},
        **flat, "history_bytes": st.st_size, "history_mtime_ns": st.st_mtime_ns,
    }
    return row


def _table_dirs(warehouse: Path, src: RunSource) -> dict[str, Path]:
    part = Path(f"campaign={src.campaign}") / f"run={src.run}"
    return {t: warehouse / t / part for t in ("ops", "reads", "runs")}


def _up_to_date(warehouse: Path, src: RunSource) -> bool:
    import pyarrow.parquet as pq

    dirs = _table_dirs(warehouse, src)
    f = dirs["runs"] / "part-0.parquet"
    if not f.is_file():
        return False
    try:
        row = pq.read_table(f, columns=["history_bytes", "history_mtime_ns"]).to_pylist()[0]
    except Exception:  # noqa: BLE001 - an unreadable marker means: ingest again
        return False
    st = (src.run_dir / "history.jsonl").stat()
    if row["history_bytes"] != st.st_size or row["history_mtime_ns"] != st.st_mtime_ns:
        return False
    # ingested before a column was added (the ops' resent, the pairing): its tables lack what the checks read now
    return not any(_lacks_columns(dirs[table] / "part-0.parquet", schema)
                   for table, schema in (("ops", ops_schema()), ("reads", reads_schema()), ("runs", runs_schema())))


def _lacks_columns(f: Path, schema) -> bool:
    """Whether the Parquet file `f` lacks a column of `schema` (ingested before it was added) or cannot be read:
    either way `ingest` writes it again."""
    import pyarrow.parquet as pq

    try:
        return not set(schema.names) <= set(pq.read_schema(f).names)
    except Exception:  # noqa: BLE001 - unreadable: as stale
        return True


def stale_tables(warehouse: Path) -> list[Path]:
    """The ops and reads tables under `warehouse` that lack a column of today's schema (ingested before it
    was added; `ingest` writes them again): Spark would read the column as null in those runs only."""
    return [f for table, schema in (("ops", ops_schema()), ("reads", reads_schema()))
            for f in sorted((warehouse / table).glob("campaign=*/run=*/part-0.parquet")) if _lacks_columns(f, schema)]


def ingest_run(src: RunSource, warehouse: Path) -> dict[str, Any]:
    """Write one run's three tables (runs last: it marks the run as ingested). Returns its runs row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafkaesque_harness.history import HistoryFormatError

    dirs = _table_dirs(warehouse, src)
    for d in dirs.values():
        if d.exists():
            shutil.rmtree(d)
    history = src.run_dir / "history.jsonl"
    try:
        test = json.loads((src.run_dir / "test.json").read_text())
    except ValueError as e:  # test.json that is not JSON
        raise PipelineError(f"{src.run_dir / 'test.json'} is not valid JSON ({e}); fix or remove that run.") from None
    try:
        values = value_reader(test.get("workload") or "queue")
    except ValueError as e:
        raise PipelineError(f"{src.run_dir / 'test.json'}: {e}; the pipeline reads the values of the workloads it "
                            "knows only.") from None
    try:
        flat = _flatten_history(history, dirs["ops"], dirs["reads"], values)
        row = _run_row(src, test, flat, history)
    except HistoryFormatError as e:
        raise PipelineError(f"{e} Fix or remove that run, then ingest again.") from None
    dirs["runs"].mkdir(parents=True, exist_ok=True)
    tmp = dirs["runs"] / ".part-0.parquet.tmp"
    pq.write_table(pa.Table.from_pylist([row], schema=runs_schema()), tmp)
    os.replace(tmp, dirs["runs"] / "part-0.parquet")
    return {"campaign": src.campaign, "run": src.run, **row}


def _ingest_one(args: tuple[RunSource, Path]) -> dict[str, Any]:
    src, warehouse = args
    return ingest_run(src, warehouse)


def ingest(paths: Iterable[Path], warehouse: Path, force: bool = False, jobs: int = 2,
           progress: Callable[[int, int, RunSource, str], None] | None = None) -> dict[str, Any]:
    """Ingest every run found under `paths` into `warehouse`; runs already ingested from the same file are skipped."""
    sources = discover_runs(paths)
    try:
        warehouse.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PipelineError(f"cannot create the warehouse {warehouse} ({e.strerror}); pass a writable --warehouse.") \
            from None
    todo = [s for s in sources if force or not _up_to_date(warehouse, s)]
    skipped = len(sources) - len(todo)
    rows: list[dict[str, Any]] = []
    done = 0
    if jobs > 1 and len(todo) > 1:  # runs are independent: one process per core
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            for src, row in zip(todo, pool.map(_ingest_one, [(s, warehouse) for s in todo]), strict=True):
                rows.append(row)
                done += 1
                if progress:
                    progress(done, len(todo), src, "ingested")
    else:
        for src in todo:
            rows.append(ingest_run(src, warehouse))
            done += 1
            if progress:
                progress(done, len(todo), src, "ingested")
    return {"warehouse": str(warehouse), "found": len(sources), "ingested": len(rows), "skipped": skipped,
            "ops": sum(r["ops"] for r in rows), "reads": sum(r["reads"] for r in rows),
            "runs": [{"campaign": r["campaign"], "run": r["run"], "run_dir": r["run_dir"], "ops": r["ops"]}
                     for r in rows]}
