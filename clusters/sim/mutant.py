"""A simulated cluster running a mutant of the broker (clusters/mutants.py), in this process.

A real mutant run starts its nodes with a copy of the node code first on their path (clusters/code_copy.py).
The simulator's nodes live in this process, so the copy is put under the broker's own name instead:
`run_broker_from(copy.package)` drops the broker's modules loaded so far and makes the import system find
`kafkaesque_harness.clusters.broker` (and so every module inside it) in the copy from then on. Call it
before clusters/sim/cluster.py is imported (it imports the broker's classes at import time), in a process
of its own: there is no way back. The nodes then log the copy's root and digest in their node_code line,
as a real mutant run's nodes do (studies/mutation.py checks it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.code_copy import CodeCopy
from kafkaesque_harness.clusters.mutants import by_name

BROKER = "kafkaesque_harness.clusters.broker"


class _BrokerFromCopy(importlib.abc.MetaPathFinder):
    """Finds the broker package in the copy; its submodules follow through the package's __path__."""

    def __init__(self, broker_dir: Path):
        self.broker_dir = broker_dir

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != BROKER:
            return None
        return importlib.util.spec_from_file_location(fullname, self.broker_dir / "__init__.py",
                                                      submodule_search_locations=[str(self.broker_dir)])


def run_broker_from(package: Path) -> None:
    """From now on the broker is the one under `package` (a code copy's kafkaesque_harness/)."""
    if "kafkaesque_harness.clusters.sim.cluster" in sys.modules:
        raise RuntimeError("the simulator is already loaded with this tree's broker; switch to a copy first, in a "
                           "fresh process")
    for name in [m for m in sys.modules if m == BROKER or m.startswith(BROKER + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _BrokerFromCopy(package / "clusters" / "broker"))


def mutant_code(name: str) -> CodeCopy:
    """The registered copy of the node code with the mutant's edits (remove it with close()), now the broker."""
    mutants = by_name()
    if name not in mutants:
        raise ValueError(f"no mutant {name!r} in clusters/mutants.py; clusters/mutants.py lists them")
    copy = CodeCopy(mutants[name].edits, label=name)
    run_broker_from(copy.package)
    return copy
