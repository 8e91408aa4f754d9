"""The replicas' own state at the end of a run, normalised into one file: the run dir's replicas.json.

When a run collects its nodes' logs (`Cluster.collect`), each node of our broker leaves its raw state
dump (nodes/<node>/state.json: a broker's partitions with their physical logs, a controller's view)
and its metadata log (nodes/<node>/metadata.log, in the broker's JSON-lines format). This module reads
those, in the broker's own formats, and writes what the replica checker (checkers/replicas.py) judges
into replicas.json, beside nodes/. The checker reads nothing else, and knows no broker file format.

replicas.json, format "kafkaesque-replicas/1" (one JSON object):

  format        "kafkaesque-replicas/1"
  state_dumps   true when the cluster gives state dumps at all (our broker); false for a system we did not
                build (an external cluster file): its replicas are not checked, the checker says so
  nodes         node name -> what was read of that node (every node the cluster has):
    dump          where its raw dump is, relative to the run dir ("nodes/broker-1/state.json")
    state         the dump, normalised (below); null when it could not be used
    why           when state is null: why, in words ("the file is empty", "it is not valid JSON, truncated
                  or corrupt (...)", "the node did not answer the dump request when the run ended", ...)
    metadata_log  absent when the node kept none; else
                    where            "nodes/<node>/metadata.log"
                    base, records    the records it holds, from offset `base` (> 0 after a snapshot)
                    unreadable_past  (only when) a bad line in its middle stopped the reading at this offset,
                    why              ... and why ("line 42 is not the next log entry and more lines follow");
                                     `why` without `records`: the file could not be read at all

A broker's state:
  {"role": "broker", "node_id": 1, "partitions": [
     {"topic", "partition", "role" ("leader" | "follower" | ...), "leader", "leader_epoch", "isr",
      "log_start", "leo" (the log's end offset), "hwm", "epoch_cache": [[leader epoch, start offset], ...],
      "log": [[offset, leader epoch, value digest], ...] (the physical log, every record of a batch whose CRC
      matches), "corrupt_batches": [[base offset, last offset], ...] (those whose CRC does not; optional)}, ...]}
A controller's state (every key but role as the controller dumps it):
  {"role": "controller", "node_id", "active", "raft" ({"role", "term", ...}: a quorum member),
   "topics": [{"topic", "configs": {"min.insync.replicas", ...}}], "brokers": [{"broker_id", "fenced"}],
   "partitions": [{"topic", "partition", "replicas", "isr", "elr", "leader", "leader_epoch", ...}],
   "unclean_recoveries": [{"topic", "partition", "leader", "candidates": {broker: [last epoch, end offset]}}],
   "metadata_log": [record, ...] with "metadata_snapshot_offset" (a quorum member: its log from that offset)}
Keys a dump did not have are absent. A dump is unusable (state null) when it is missing, empty, not a JSON
object, marked unreachable, names no role, or holds a broker partition without its physical log (Log
Matching is checked on the physical logs: such a partition would silently be left out).

A run stored before replicas.json existed, or whose file is damaged, is normalised again from its nodes/
directory (`load_replicas`), the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.broker import parse_log_lines

FORMAT = "kafkaesque-replicas/1"
REPLICAS_FILE = "replicas.json"
DUMP_FILE = "state.json"
METADATA_LOG_FILE = "metadata.log"
PARTITION_KEYS = ("topic", "partition", "role", "leader", "leader_epoch", "isr", "log_start", "leo", "hwm",
                  "epoch_cache", "log", "corrupt_batches")
CONTROLLER_KEYS = ("node_id", "active", "raft", "topics", "brokers", "partitions", "unclean_recoveries",
                   "metadata_log", "metadata_snapshot_offset")


def no_dumps() -> dict[str, Any]:
    """replicas.json of a cluster that gives no state dumps (a system we did not build)."""
    return {"format": FORMAT, "state_dumps": False, "nodes": {}}


def replicas_from_nodes(nodes_dir: Path, expected: Iterable[str] | None = None,
                        state_dumps: bool | None = None) -> dict[str, Any]:
    """replicas.json's document from a run's nodes/ directory. The nodes: every directory there and every
    name in `expected` (the cluster's nodes; one without a directory is missing its dump). `state_dumps`
    None: the cluster gives dumps when any node left one (a run stored before it was said)."""
    names = {d.name for d in nodes_dir.iterdir() if d.is_dir()} if nodes_dir.is_dir() else set()
    names |= {str(n) for n in expected or []}
    if state_dumps is None:
        state_dumps = any((nodes_dir / n / DUMP_FILE).is_file() for n in names)
    nodes: dict[str, Any] = {}
    for node in sorted(names):
        state, why = read_dump(nodes_dir / node / DUMP_FILE)
        entry: dict[str, Any] = {"dump": f"{nodes_dir.name}/{node}/{DUMP_FILE}", "state": state}
        if state is None:
            entry["why"] = why
        log = read_metadata_log(nodes_dir / node / METADATA_LOG_FILE)
        if log is not None:
            entry["metadata_log"] = {"where": f"{nodes_dir.name}/{node}/{METADATA_LOG_FILE}", **log}
        nodes[node] = entry
    return {"format": FORMAT, "state_dumps": bool(state_dumps), "nodes": nodes}


def write_replicas(run_dir: Path, doc: dict[str, Any]) -> Path:
    """<run_dir>/replicas.json, written whole or not at all (a temporary file renamed)."""
    path = Path(run_dir) / REPLICAS_FILE
    tmp = path.with_name(f".{REPLICAS_FILE}.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, path)
    return path


def collect_replicas(nodes_dir: Path, nodes: Iterable[str]) -> Path:
    """What a cluster of our broker writes when its logs are collected into `nodes_dir` (the run's nodes/):
    replicas.json beside it, from the dumps and metadata logs just copied there."""
    return write_replicas(nodes_dir.parent, replicas_from_nodes(nodes_dir, nodes, state_dumps=True))


def load_replicas(run_dir: Path, expected: Iterable[str] | None = None) -> dict[str, Any]:
    """A stored run's replicas.json; normalised again from its nodes/ directory when the file is missing
    or damaged (a run from before it, a collect cut short). Nodes of `expected` (test.json's) that it does
    not list are added, missing their dump."""
    doc = _read_replicas(Path(run_dir) / REPLICAS_FILE)
    nodes_dir = Path(run_dir) / "nodes"
    if doc is None:
        return replicas_from_nodes(nodes_dir, expected)
    for node in sorted({str(n) for n in expected or []} - set(doc["nodes"])):
        doc["nodes"][node] = {"dump": f"{nodes_dir.name}/{node}/{DUMP_FILE}", "state": None,
                              "why": "the file is missing"}
    return doc


def _read_replicas(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("nodes"), dict) \
            or not all(isinstance(e, dict) for e in doc["nodes"].values()):
        return None
    return doc


def read_dump(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A node's raw dump file, normalised (the module's docstring), or None and why it cannot be used."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "the file is missing"
    except OSError as e:
        return None, f"the file cannot be opened ({e.strerror or e})"
    if not data.strip():
        return None, "the file is empty"
    try:
        state = json.loads(data)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both
        return None, f"it is not valid JSON, truncated or corrupt ({e})"
    return normalise_dump(state)


def normalise_dump(state: Any) -> tuple[dict[str, Any] | None, str]:
    """A parsed dump in replicas.json's shape, or None and why it cannot be used."""
    if not isinstance(state, dict):
        return None, f"it holds a JSON {type(state).__name__}, not an object"
    if state.get("unreachable"):
        return None, "the node did not answer the dump request when the run ended"
    role = state.get("role")
    if role not in ("broker", "controller"):
        return None, f"it names no role a dump has (broker or controller), but {role!r}"
    if role == "controller":
        return {"role": role, **{k: state[k] for k in CONTROLLER_KEYS if k in state}}, ""
    partitions = state.get("partitions", [])
    if not isinstance(partitions, list):
        return None, f"its partitions are a JSON {type(partitions).__name__}, not a list"
    bare = [f"{p.get('topic')}-{p.get('partition')}" if isinstance(p, dict) else repr(p) for p in partitions
            if not isinstance(p, dict) or not isinstance(p.get("log"), list)]
    if bare:
        return None, f"it holds no physical log of partition(s) {', '.join(map(str, bare[:4]))}"
    out: dict[str, Any] = {"role": role, "partitions": [{k: p[k] for k in PARTITION_KEYS if k in p}
                                                        for p in partitions]}
    if "node_id" in state:
        out["node_id"] = state["node_id"]
    return out, ""


def read_metadata_log(path: Path) -> dict[str, Any] | None:
    """A node's metadata log file (JSON lines of {"offset", "record"}): {base, records}, with
    unreadable_past and why when it cannot be read past a bad line in its middle; {why} when the file
    cannot be read; None when there is none (the file is optional: a node may not have kept one).

    A torn last line (a node killed mid-append) ends the log, as it does when the node replays it; any
    other bad line ends the readable part: the node truncates a bad tail when it opens the file, so what
    follows a bad line in the middle is corruption, and the records there would silently be left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return {"why": str(e.strerror or e)}
    base, records, good = parse_log_lines(data)
    out: dict[str, Any] = {"base": base, "records": records}
    if b"\n" in data[good:].rstrip(b"\n"):
        line = data[:good].count(b"\n") + 1
        out.update(unreadable_past=base + len(records), why=f"line {line} is not the next log entry and more "
                                                            "lines follow")
    return out
