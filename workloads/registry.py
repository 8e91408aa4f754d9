"""Workloads by name: `kafkaesque run --workload NAME`."""

from __future__ import annotations

from typing import Any

from workloads.base import ValueReader

WORKLOAD_NAMES = ("queue",)


def workload_class(name: str):
    if name == "queue":
        from workloads.queue import QueueWorkload

        return QueueWorkload
    raise ValueError(f"unknown workload {name!r}; valid: {', '.join(WORKLOAD_NAMES)}")


def make_workload(name: str, options: dict[str, Any]):
    return workload_class(name)(options)


def value_reader(name: str) -> ValueReader:
    """How the named workload's op values read (workloads/base.py), without making the workload: what the
    report and the pipeline read a stored history of it with."""
    return workload_class(name).values
