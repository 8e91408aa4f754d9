"""The store (DESIGN.md "Store"): <store>/<test-name>/<YYYYmmddTHHMMSS>/ with a `latest` link per test."""

from __future__ import annotations

import errno
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class StoreError(RuntimeError):
    """The store cannot be written or read; the message says which path and what to do."""


# The layout of a stored run (test.json, history.jsonl, results.json, nodes/): written into test.json
# and results.json, raised whenever a change would make an older reader misread a run. A reader meeting
# a newer format says so instead of guessing (format_problem).
STORE_FORMAT = 1


def format_problem(doc: dict[str, Any], path: Path) -> str | None:
    """Why this version cannot read a stored run's JSON file, or None (runs from before the field: format 1)."""
    found = doc.get("store_format", 1)
    if not isinstance(found, int) or found > STORE_FORMAT:
        return (f"{path} was written in store format {found!r}, newer than this kafkaesque reads ({STORE_FORMAT}); "
                "check it with the version that wrote it (test.json's versions), or upgrade")
    return None


def create_run_dir(store: str | os.PathLike, test_name: str) -> Path:
    """A new run dir <store>/<test_name>/<timestamp>/, confined to the store: the name is one plain folder
    name, and neither it nor a link in its place may lead out of the store."""
    root = Path(os.path.normpath(store))
    problem = name_problem(test_name)
    if problem:
        raise StoreError(f"The test name {test_name!r} {problem}; give a plain folder name such as queue-kill.")
    try:
        (root / test_name).mkdir(parents=True, exist_ok=True)
        if not _inside(root / test_name, root):
            raise StoreError(f"{root / test_name} leads out of the store {root} (a link); remove it, or give the "
                             "test another name.")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        run = root / test_name / stamp
        n = 1
        while run.exists() or run.is_symlink():  # two runs in one second
            run = root / test_name / f"{stamp}-{n}"
            n += 1
        run.mkdir()
        probe = run / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise StoreError(f"Cannot write to the store {root} ({e.strerror}); pass a writable --store directory.") from None
    latest = root / test_name / "latest"
    tmp = root / test_name / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(run.name)
        os.replace(tmp, latest)
    except OSError:
        pass  # a store on a file system without symlinks still works; `latest` is a convenience
    return run


STAMP = re.compile(r"^\d{8}T\d{6}(-\d+)?$")  # a run's or a campaign's folder: YYYYmmddTHHMMSS
STORE_PLACEHOLDER = "STORE"  # how a generated document names the store a command was given
STORE_NOTE = " (STORE: the store the runs were kept in)"


def store_relative(path: str | os.PathLike) -> str:
    """How a generated document names a stored run or campaign: by its place in its store
    (`queue/20261127T201413`, `campaigns/nightly/20261127T201413`), never by the absolute path of the
    machine that made it. A path in no store's layout keeps its name alone."""
    parts = Path(path).parts
    if "campaigns" in parts:
        i = len(parts) - 1 - parts[::-1].index("campaigns")
        return "/".join(parts[i:])
    if len(parts) >= 2 and STAMP.match(parts[-1]):
        return "/".join(parts[-2:])
    return Path(path).name


def command_as_shown(argv: list[str]) -> str:
    """A command line for a generated document: each absolute path argument named by its place in its
    store (STORE/campaigns/..., STORE/queue/...), or by its name; a store given itself is STORE."""
    shown = []
    for arg in argv:
        flag, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if os.path.isabs(value):
            rel = store_relative(value)
            if rel != Path(value).name or STAMP.match(rel):
                value = f"{STORE_PLACEHOLDER}/{rel}"
            elif Path(value, "campaigns").is_dir() or any(Path(value).glob("*/latest")):
                value = STORE_PLACEHOLDER  # a store itself
            else:
                value = rel
        shown.append(f"{flag}={value}" if eq else value or flag)
    return " ".join(shown)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a folder of the store (a clause, no full stop), or None."""
    if not isinstance(name, str) or not name.strip():
        return "is empty"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name or name != os.path.normpath(name):
        return "is a path, not a folder name"
    return None


def _inside(path: Path, root: Path) -> bool:
    """Whether `path`, links resolved, is within `root` (links resolved too)."""
    return path.resolve().is_relative_to(root.resolve())


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it, so a reader (a CI step, a browser, `analyze`)
    never sees half a file. No temporary file is left behind whatever fails; a full disk is a StoreError
    that names the folder and the fix, not an errno."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreError(f"No space is left on the device of {path.parent}, so {path.name} was not written "
                             f"(the run's history and everything written before it are kept); free space there, "
                             f"or give --store a folder on a device with room, then `kafkaesque analyze "
                             f"{path.parent}` writes it.") from None
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@dataclass
class RunSummary:
    path: Path
    test: str
    started: str
    valid: Any
    anomalies: list[str]
    workload: str
    nemesis: str


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in a file, or None when it is unreadable, not JSON, or JSON but not an object
    (a hand-edited or truncated file must not end `kafkaesque ls` in a traceback)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_runs(store: str | os.PathLike) -> list[RunSummary]:
    """Every run in the store, newest first."""
    root = Path(store)
    if not root.is_dir():
        return []
    runs = []
    for test_dir in root.iterdir():
        if not test_dir.is_dir():
            continue
        for run in test_dir.iterdir():
            if run.is_symlink() or not run.is_dir() or not (run / "test.json").exists():
                continue
            test = _json_object(run / "test.json")
            if test is None:
                continue  # not a run this listing can describe: skipped, as a directory without test.json is
            valid: Any = "incomplete"
            anomalies: list[str] = []
            if (run / "results.json").exists():
                res = _json_object(run / "results.json")
                if res is None:
                    valid = "unreadable"
                else:
                    valid = res.get("valid", "unknown")
                    checkers = res.get("checkers")
                    for c in (checkers.values() if isinstance(checkers, dict) else ()):
                        kinds = c.get("anomaly_types") if isinstance(c, dict) else None
                        anomalies += [str(k) for k in kinds] if isinstance(kinds, list) else []
            workload = str(test.get("workload", "?")) + (" (simulated)" if test.get("simulated") else "")
            runs.append(RunSummary(run, test_dir.name, run.name, valid, sorted(set(anomalies)),
                                   workload, ",".join(test.get("nemesis") or []) or "none"))
    return sorted(runs, key=lambda r: (r.started, r.test), reverse=True)
