"""The test spec: everything a run was asked to do, written to test.json (and read back by analyze)."""

from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass
class TestSpec:
    __test__ = False  # not a pytest test class, despite the name

    name: str = "queue"
    workload: str = "queue"
    nemesis: list[str] = field(default_factory=list)
    nemesis_interval: float = 10.0
    nemesis_schedule: str = "mix"  # mix (faults overlap) or sequential (one at a time): harness/generator.py
    nemesis_target: str = "mixed"
    time_limit: float = 60.0
    concurrency: int = 10
    rate: float = 100.0
    brokers: int = 3
    controllers: int = 1  # >1: a Raft quorum of controllers (clusters/broker/controller_quorum.py)
    replication_factor: int = 3
    min_isr: int = 2
    partitions: int = 4
    acks: str = "all"
    client: str = "kafka-python"
    cluster: str = "auto"
    flush_policy: str = "never"
    broker_variant: str = "default"
    unclean_recovery_strategy: str = "balanced"
    seed: int = 0
    store: str = "store"
    leave_running: bool = False
    recovery_wait: float = 10.0
    elle: bool = False
    workload_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["versions"] = versions()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TestSpec:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})

    def workload_opts(self) -> dict[str, Any]:
        return {"topic": "queue", "partitions": self.partitions, "client": self.client, **self.workload_options}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("kafkaesque", "kafka-python", "confluent-kafka"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        out["git"] = "unknown"
    return out
