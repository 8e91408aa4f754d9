"""The Client and Workload shapes (DESIGN.md).

A Client is one per logical process and uses a real Kafka client library. A Workload
bundles: how to make clients, which ops the generator issues, the final reads, and the
checkers that judge the history.
"""

from __future__ import annotations

from typing import Any, Protocol

from checkers.core import Checker
from history import Op


class Client(Protocol):
    def open(self, bootstrap: str) -> None: ...

    def invoke(self, op: Op) -> Op:
        """Perform the invocation; return its completion with type ok / fail / info.

        ok only when the system acknowledged; fail only when the request was definitely
        not applied; info for timeouts, disconnects and anything uncertain.
        """

    def close(self) -> None: ...


class Workload(Protocol):
    name: str

    def topics(self, test: dict[str, Any]) -> list[tuple[str, int]]:
        """(topic, partitions) to create before the main phase."""

    def new_client(self, test: dict[str, Any]) -> Client: ...

    def op_mix(self, test: dict[str, Any]):
        """A callable (rng, process) -> (f, value) generating the next invocation."""

    def final_ops(self, test: dict[str, Any]) -> list[tuple[str, Any]]:
        """(f, value) invocations for the final-read phase (drain every partition to its HWM)."""

    def checkers(self, test: dict[str, Any]) -> list[Checker]: ...
