"""`kafkaesque check FILE`: check any history file, ours or another tool's, with a chosen model.

Formats: jsonl (our histories), edn (Jepsen's), porcupine-etcd and porcupine-kv
(Porcupine's test data). Models: register, cas-register, etcd, kv, log (the general
linearizability search), list-append (the Elle-style cycle checker), and queue (the
queue checker plus the log fast path, as `kafkaesque run` uses). Exit 0 valid,
1 invalid, 2 unknown; bad input is one sentence naming the cause and the fix (exit 3).
"""

from __future__ import annotations

import json

from rich.console import Console

FORMATS = ("jsonl", "edn", "porcupine-etcd", "porcupine-kv")
MODELS = ("queue", "register", "cas-register", "etcd", "kv", "log", "list-append")


def check_command(file: str, format: str, model: str | None, time_limit: float) -> int:
    from checkers.core import run_checkers
    from harness.history import HistoryFormatError, read_history

    out = Console(stderr=True, soft_wrap=True)
    if format not in FORMATS:
        out.print(f"[red]error:[/] unknown format {format!r}; valid: {', '.join(FORMATS)}.")
        return 3
    model = model or {"porcupine-etcd": "etcd", "porcupine-kv": "kv", "edn": "list-append"}.get(format, "queue")
    if model not in MODELS:
        out.print(f"[red]error:[/] unknown model {model!r}; valid: {', '.join(MODELS)}.")
        return 3
    try:
        if format == "jsonl":
            history = read_history(file)
        elif format == "edn":
            from checkers.formats.edn import parse_edn_history

            history = parse_edn_history(file)
        else:
            from checkers.formats.porcupine import parse_etcd_log, parse_kv_log

            history = (parse_etcd_log if format == "porcupine-etcd" else parse_kv_log)(file)
    except FileNotFoundError:
        out.print(f"[red]error:[/] {file} does not exist; pass the path of a history file.")
        return 3
    except HistoryFormatError as e:
        out.print(f"[red]error:[/] {e}")
        return 3
    if model == "list-append":
        from checkers.elle import ElleListAppendChecker

        checkers = [ElleListAppendChecker(cycle_budget_s=time_limit)]
    elif model == "queue":
        from checkers.log_order import LogOrderChecker
        from checkers.queue import QueueChecker

        checkers = [QueueChecker(), LogOrderChecker()]
    else:
        from checkers.linearizable import LinearizableChecker

        checkers = [LinearizableChecker(model, time_limit)]
    try:
        results = run_checkers(checkers, {}, history)
    except ValueError as e:
        out.print(f"[red]error:[/] {e}")
        return 3
    valid = results["valid"]
    colour = {True: "green", False: "red"}.get(valid, "yellow")
    out.print(f"[bold {colour}]valid: {valid}[/] ({len(history)} ops, model {model})")
    for name, r in results["checkers"].items():
        if r.get("error"):
            out.print(f"  {name}: could not finish: {r['error']}")
        for a in r.get("anomalies", []):
            out.print(f"  [red]{name}: {a['name']} x{a['count']}[/] {a.get('explanation', '')}")
            for ex in a.get("examples", [])[:3]:
                if ex.get("summary"):
                    out.print(f"    - {ex['summary']}")
        if "counterexample" in r.get("details", {}):
            ce = r["details"]["counterexample"]
            for c in ce.get("concurrent", [])[:10]:
                out.print(f"      concurrent: op #{c['op_index']} {c['op']}")
    print(json.dumps({"valid": valid}))
    return 0 if valid is True else 1 if valid is False else 2
