"""The nodes' protocol traces of a stored run, read for the trace checker (checkers/trace.py).

`Cluster.collect` brings each node's trace (clusters/broker/trace.py has its format) into the run dir as
nodes/<node>/trace.jsonl. A run whose harness died before collecting keeps the local clusters' traces where
the nodes wrote them, data/<node>/trace.jsonl: read from there when nodes/ has none (`kafkaesque analyze`). `load_traces` reads them into the document the checker judges, through
CheckContext.data["trace"] (the runner's `run_data`), so the checker reads no file:

  nodes   node name -> what was read of it (every node test.json names, and any other found):
    where   "nodes/<node>/trace.jsonl" (or "data/<node>/trace.jsonl", uncollected)
    lines   the events, in file order, each with "line" (its 1-based line number in the file) added;
            absent when the file could not be read
    torn    how many lines were not JSON objects (a line cut by a SIGKILL mid-write; skipped)
    why     when lines is absent: why, in words ("the file is missing", "the file is empty", ...)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.broker import TRACE_FILE


def read_trace(path: Path) -> dict[str, Any]:
    """One node's trace file: {"lines", "torn"} or {"why"}."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {"why": "the file is missing"}
    except OSError as e:
        return {"why": f"the file cannot be opened ({e.strerror or e})"}
    lines: list[dict[str, Any]] = []
    torn = 0
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            torn += 1
            continue
        if not isinstance(event, dict):
            torn += 1
            continue
        event["line"] = n
        lines.append(event)
    if not lines:
        return {"why": "the file is empty" if not torn else f"none of its {torn} line(s) is a JSON object"}
    return {"lines": lines, "torn": torn}


NODE_FOLDERS = ("nodes", "data")  # collected at teardown; else where a local cluster's node wrote it


def node_files(run_dir: Path, name: str) -> dict[str, Path]:
    """node -> its file `name` in the run dir: the collected copy (nodes/<node>/), else the node's own
    (data/<node>/, a local cluster's run whose harness died before collecting)."""
    found: dict[str, Path] = {}
    for folder in NODE_FOLDERS:
        base = Path(run_dir) / folder
        if base.is_dir():
            for d in sorted(base.iterdir()):
                if (d / name).is_file():
                    found.setdefault(d.name, d / name)
    return found


def load_traces(run_dir: Path, expected: Iterable[str] | None = None) -> dict[str, Any]:
    """Every node's trace in the run dir (node_files), and a "missing" entry for each expected node without one."""
    files = node_files(Path(run_dir), TRACE_FILE)
    out: dict[str, Any] = {}
    for node in sorted({str(n) for n in expected or []} | set(files)):
        path = files.get(node, Path(run_dir) / "nodes" / node / TRACE_FILE)
        out[node] = {"where": path.relative_to(run_dir).as_posix(), **read_trace(path)}
    return {"nodes": out}
