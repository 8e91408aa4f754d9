"""The reference broker: implements ../shared/seeds/ (see DESIGN.md). Imports nothing from the harness.

This package's face: the rest of the project imports the broker only through the names below (or
through its adapter, clusters/reference.py), never a module inside it; scripts/import_graph.py holds
every room to that. Each name is loaded from its module on first use, so a node starting
`python -m kafkaesque_harness.clusters.broker` imports only what its role runs.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_FACE = {
    # settings a run may give the broker, checked before the run
    "UNCLEAN_RECOVERY_STRATEGIES": "controller",
    "parse_flush_policy": "log.flush",
    # the node code: which files a node runs, laid out as its code dir holds them, and their digest
    "NAMESPACE": "code_digest",
    "node_code_digest": "code_digest",
    "node_code_members": "code_digest",
    # what a node leaves behind: its protocol trace and its metadata log
    "TRACE_FILE": "trace",
    "parse_log_lines": "metadata",
    # the coordinators' placement rule, as clients find a coordinator
    "coordinator_partition": "group_coordinator",
    # membership and reassignment, through the controller's admin RPC
    "active_controller_call": "membership",
    "alter_cluster": "membership",
    "controller_state": "membership",
    "unregister": "membership",
    "wait_reassignments": "membership",
    # the deterministic simulator (clusters/sim/): the node programs, their flags, and the node's host seam
    "build_parser": "__main__",
    "Broker": "server",
    "ControllerServer": "controller_server",
    "QuorumControllerServer": "controller_quorum",
    "NODE_HOST": "hostenv",
    "RealHost": "hostenv",
    "BUGGIFY_POINTS": "hostenv",
    "CONTROLLER_ID": "local_cluster",
    "LOSSYFS_STATUS_ENV": "server",
}
__all__ = sorted(_FACE)

def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; the broker's face names "
                             f"{', '.join(__all__)}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value
