"""How much of a run the system under test was up, as its clients saw it: not a verdict, a fact beside it.

A run whose faults kept the system down most of the time tests little, whatever its verdict; a newcomer's
tansu run of 60 s had no successful op after its 10th second. From the history alone: the share of the main
phase's seconds in which some client op succeeded (ok), the longest stretch without one (from the start of
the main phase, between two successes, or up to its end), and, from the harness's own notes, the client
warnings (a client that could not even bootstrap) counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from kafkaesque_harness.history import NEMESIS, OK, Op

FINAL_FS = frozenset({"final-poll", "final-read"})  # the final reads come after the main phase


def availability(history: Sequence[Op], time_limit_s: float, warnings: Iterable[str] = ()) -> dict[str, Any]:
    """{"ok_seconds_share", "longest_gap_s", "longest_gap" [from, to], "client_warnings", "bootstrap_failures"}
    over the main phase: from 0 to the time limit, or to the final heal if it began sooner (a run cut short);
    times are seconds into the run."""
    heal = next((op.time / 1e9 for op in history if op.process == NEMESIS and op.f == "heal"), None)
    end = min(float(time_limit_s), heal) if heal is not None else float(time_limit_s)
    oks = sorted(op.time / 1e9 for op in history if op.type == OK and op.process != NEMESIS
                 and op.f not in FINAL_FS and not (op.extra or {}).get("final") and op.time / 1e9 <= end)
    seconds = max(1, math.ceil(end))
    covered = {min(int(t), seconds - 1) for t in oks}
    edges = [0.0, *oks, end]
    gap, frm, to = max(((b - a, a, b) for a, b in zip(edges, edges[1:], strict=False)),
                       default=(end, 0.0, end))
    warnings = list(warnings)
    return {"ok_seconds_share": round(len(covered) / seconds, 3), "longest_gap_s": round(gap, 1),
            "longest_gap": [round(frm, 1), round(to, 1)], "client_warnings": len(warnings),
            "bootstrap_failures": sum("Unable to bootstrap" in w for w in warnings)}


def availability_sentence(a: dict[str, Any]) -> str:
    """The terminal's and the report's one line."""
    said = (f"client ops succeeded in {a['ok_seconds_share']:.0%} of the main phase's seconds; the longest "
            f"stretch without one {a['longest_gap_s']:g} s ({a['longest_gap'][0]:g}-{a['longest_gap'][1]:g} s)")
    if a.get("client_warnings"):
        boot = f", {a['bootstrap_failures']} of them bootstrap failures" if a.get("bootstrap_failures") else ""
        said += f"; {a['client_warnings']} client warning(s){boot} (results.json harness_warnings)"
    return said
