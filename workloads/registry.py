"""Workloads by name: `kafkaesque run --workload NAME`, with their options (`--workload-option KEY=VALUE`)."""

from __future__ import annotations

import json
from typing import Any

from kafkaesque_harness.workloads.base import ValueReader

WORKLOAD_NAMES = ("queue", "txn")
# set by the spec from its own fields (harness/spec.py TestSpec.workload_opts), accepted by every workload
COMMON_OPTIONS = ("topic", "partitions", "client")


def workload_class(name: str):
    if name == "queue":
        from kafkaesque_harness.workloads.queue import QueueWorkload

        return QueueWorkload
    if name == "txn":
        from kafkaesque_harness.workloads.txn import TxnWorkload

        return TxnWorkload
    raise ValueError(f"unknown workload {name!r}; valid: {', '.join(WORKLOAD_NAMES)}")


def make_workload(name: str, options: dict[str, Any]):
    return workload_class(name)(options)


def value_reader(name: str) -> ValueReader:
    """How the named workload's op values read (workloads/base.py), without making the workload: what the
    report and the pipeline read a stored history of it with."""
    return workload_class(name).values


def parse_workload_options(pairs: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`KEY=VALUE` texts (--workload-option) as options: VALUE read as JSON (0.2, true, "x"), else as text;
    one sentence per text that is not KEY=VALUE."""
    out: dict[str, Any] = {}
    problems = []
    for text in pairs:
        key, eq, value = text.partition("=")
        if not eq or not key.strip():
            problems.append(f"--workload-option {text!r} is not KEY=VALUE; give e.g. --workload-option txn_abort_p=0.2.")
            continue
        try:
            out[key.strip()] = json.loads(value.strip())
        except ValueError:
            out[key.strip()] = value.strip()
    return out, problems


def workload_options_problems(name: str, client: str, options: dict[str, Any]) -> list[str]:
    """One sentence per option the named workload does not take or cannot use (unknown workloads are
    said elsewhere)."""
    if name not in WORKLOAD_NAMES:
        return []
    cls = workload_class(name)
    known = {*COMMON_OPTIONS, *cls.OPTIONS}
    out = [f"workload {name} has no option {k!r}; valid: {', '.join(sorted(known))}." for k in options if k not in known]
    check = getattr(cls, "options_problem", None)
    if check is not None and not out:
        problem = check({"client": client, **options})
        if problem:
            out.append(problem)
    return out
