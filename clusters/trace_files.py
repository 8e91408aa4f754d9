"""The nodes' protocol traces of a stored run, read for the trace checker (checkers/trace.py).

`Cluster.collect` brings each node's trace (clusters/broker/trace.py has its format) into the run dir as
nodes/<node>/trace.jsonl. `load_traces` reads them into the document the checker judges, through
CheckContext.data["trace"] (the runner's `run_data`), so the checker reads no file:

  nodes   node name -> what was read of it (every node test.json names, and any other found):
    where   "nodes/<node>/trace.jsonl"
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


def load_traces(run_dir: Path, expected: Iterable[str] | None = None) -> dict[str, Any]:
    """Every node's trace in run_dir/nodes/, and a "missing" entry for each expected node without one."""
    nodes_dir = Path(run_dir) / "nodes"
    names = {str(n) for n in expected or []}
    if nodes_dir.is_dir():
        names |= {d.name for d in nodes_dir.iterdir() if (d / TRACE_FILE).exists()}
    out: dict[str, Any] = {}
    for node in sorted(names):
        out[node] = {"where": f"{nodes_dir.name}/{node}/{TRACE_FILE}", **read_trace(nodes_dir / node / TRACE_FILE)}
    return {"nodes": out}
