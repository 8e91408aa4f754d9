"""Workloads by name: `kafkaesque run --workload NAME`."""

from __future__ import annotations

from typing import Any

WORKLOAD_NAMES = ("queue",)


def make_workload(name: str, options: dict[str, Any]):
    if name == "queue":
        from workloads.queue import QueueWorkload

        return QueueWorkload(options)
    raise ValueError(f"unknown workload {name!r}; valid: {', '.join(WORKLOAD_NAMES)}")
