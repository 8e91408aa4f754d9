"""`kafkaesque check FILE`: check any history file, ours or another tool's, with a chosen model.

Formats: jsonl (our histories), edn (Jepsen's), porcupine-etcd and porcupine-kv
(Porcupine's test data). Models: register, cas-register, etcd, kv, log (the general
linearizability search), list-append (the Elle-style cycle checker), queue (the
queue checker plus the log fast path, as `kafkaesque run` uses), and txn (Jepsen's Kafka
transaction analyses, checkers/txn.py; with --format edn a history of Jepsen's Kafka workload;
`--option KEY=VALUE` sets the test's workload options it reads: sub_via, subscribe_p, ww_deps,
rw_deps, allowed). Exit 0 valid,
1 invalid, 2 unknown (each reason printed under the verdict); bad input (a file that
cannot be read in its format, a model that reads none of its operations) is one sentence
naming the cause and the fix (exit 3).
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kafkaesque_harness.harness.console import EXIT_HARNESS
from kafkaesque_harness.history import HistoryFile, Op

FORMATS = ("jsonl", "edn", "porcupine-etcd", "porcupine-kv")
MODELS = ("queue", "register", "cas-register", "etcd", "kv", "log", "list-append", "txn")
# The operations (op "f") each model's checkers read; they pass over every other op in silence, so a
# history none of whose ops is among them would check valid having checked nothing.
MODEL_OPS = {
    "queue": ("send", "poll", "final-poll"),
    "log": ("send", "poll", "final-poll"),
    "list-append": ("txn",),
    "txn": ("txn", "send", "poll"),
    "register": ("read", "write"),
    "cas-register": ("read", "write", "cas"),
    "etcd": ("read", "write", "cas"),
    "kv": ("get", "put", "append"),
}
EXIT_BAD_INPUT = EXIT_HARNESS  # bad input is the same exit status as a harness failure (harness/console.py)


class CheckInputError(ValueError):
    """Input `check` cannot judge; the message is one sentence naming the cause and the fix."""


def check_command(file: str, format: str, model: str | None, time_limit: float, as_json: bool = False,
                  options: list[str] | None = None) -> int:
    from kafkaesque_harness.checkers.core import run_checkers

    out = Console(stderr=True, soft_wrap=True)
    try:
        model = _model(format, model, time_limit)
        test = {"workload_options": _options(options or [])}
        if format == "jsonl" and model == "queue":
            # Read as a stream, never held whole: a history of tens of millions of ops checks in memory
            # bounded by its partitions (checkers/stream.py).
            history = HistoryFile(file)
        else:
            history = read_any_history(file, format, kafka=model == "txn")
            _check_model_reads({op.f for op in history if op.is_client}, model, file)
        if model == "txn":
            from kafkaesque_harness.checkers.txn import TxnOptionError, check_options

            try:
                check_options(test, history)
            except TxnOptionError as e:
                raise CheckInputError(f"{e}.") from None
        try:
            with _read_errors(file, format):
                results = run_checkers(_checkers(model, time_limit), test, history)
                if isinstance(history, HistoryFile):
                    if not len(history):
                        _refuse_jsonl_without_a_line(Path(file))
                    _check_model_reads(history.client_fs, model, file)
        except CheckInputError:
            raise
        except ValueError as e:
            out.print(f"[red]error:[/] {escape(str(e))}")
            return EXIT_BAD_INPUT
    except CheckInputError as e:
        out.print(f"[red]error:[/] {escape(str(e))}")
        return EXIT_BAD_INPUT
    valid = results["valid"]
    colour = {True: "green", False: "red"}.get(valid, "yellow")
    out.print(f"[bold {colour}]valid: {valid}[/] ({len(history)} ops, model {model})")
    print_unknown_reasons(out, results)
    print_attribution(out, results)
    for name, r in results["checkers"].items():
        if r.get("error"):
            out.print(f"  {name}: could not finish: {escape(r['error'])}")
        for a in r.get("anomalies", []):
            out.print(f"  [red]{name}: {a['name']} x{a['count']}[/]{escape(whose_counts(a))} "
                      f"{escape(a.get('explanation', ''))}")
            for ex in a.get("examples", [])[:3]:
                if ex.get("summary"):
                    out.print(f"    - {escape(example_line(ex))}")
        if "counterexample" in r.get("details", {}):
            ce = r["details"]["counterexample"]
            for c in ce.get("concurrent", [])[:10]:
                out.print(f"      concurrent: op #{c['op_index']} {escape(str(c['op']))}")
    print(json.dumps(results, indent=2, default=str) if as_json else json.dumps({"valid": valid}))
    return 0 if valid is True else 1 if valid is False else 2


def print_attribution(out: Console, results: dict[str, Any]) -> None:
    """Whose the anomalies are, in one sentence under the verdict (checkers/clients.py)."""
    owners = results.get("attribution")
    if isinstance(owners, dict) and owners.get("text"):
        out.print(f"  whose: {escape(str(owners['text']))}")


def whose_counts(anomaly: dict[str, Any]) -> str:
    """" (9 client, 1 unattributed)" after an anomaly's name, when its checker attributed any of it; else ""."""
    whose = anomaly.get("whose")
    if not isinstance(whose, dict) or not whose:
        return ""
    parts = [f"{n} {owner}" for owner, n in whose.items() if n]
    rest = int(anomaly.get("count") or 0) - sum(n for n in whose.values() if isinstance(n, int))
    if rest > 0:
        parts.append(f"{rest} unattributed")
    return f" ({', '.join(parts)})"


def example_line(ex: dict[str, Any]) -> str:
    """An example's one sentence, with its owner first when it has one: "[client] process 12 read ..."."""
    return (f"[{ex['whose']}] " if ex.get("whose") else "") + str(ex.get("summary") or "")


def print_unknown_reasons(out: Console, results: dict[str, Any]) -> None:
    """Every sentence of results["unknown_reasons"] (why a checker could not decide), under the verdict."""
    for reason in results.get("unknown_reasons") or []:
        out.print(f"  [yellow]unknown:[/] {escape(str(reason))}")


def _model(format: str, model: str | None, time_limit: float) -> str:
    if format not in FORMATS:
        raise CheckInputError(f"unknown format {format!r}; valid: {', '.join(FORMATS)}.")
    model = model or {"porcupine-etcd": "etcd", "porcupine-kv": "kv", "edn": "list-append"}.get(format, "queue")
    if model not in MODELS:
        raise CheckInputError(f"unknown model {model!r}; valid: {', '.join(MODELS)}.")
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise CheckInputError(f"--time-limit {time_limit:g} is not a number of seconds above 0; give the checker's "
                              f"budget, e.g. --time-limit 60.")
    return model


def _options(pairs: list[str]) -> dict[str, Any]:
    """--option KEY=VALUE pairs as the test's workload options (VALUE read as JSON, else as text)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        if not eq or not key.strip():
            raise CheckInputError(f"--option {pair!r} is not KEY=VALUE; write e.g. --option sub_via='[\"subscribe\"]'.")
        try:
            out[key.strip()] = json.loads(text)
        except ValueError:
            out[key.strip()] = text
    return out


def read_any_history(file: str, format: str, kafka: bool = False) -> list[Op]:
    """The ops of `file` in `format`; CheckInputError (one sentence) for anything that cannot be read.
    `kafka`: an EDN file is a history of Jepsen's Kafka workload (read into the txn schema)."""
    from kafkaesque_harness.history import read_history

    path = Path(file)
    with _read_errors(file, format):
        if format == "jsonl":
            history = read_history(path)
            if not history:
                _refuse_jsonl_without_a_line(path)
        elif format == "edn":
            from kafkaesque_harness.checkers.formats.edn import parse_edn_history, parse_kafka_edn_history

            history = (parse_kafka_edn_history if kafka else parse_edn_history)(path)
        else:
            from kafkaesque_harness.checkers.formats.porcupine import parse_etcd_log, parse_kv_log

            history = (parse_etcd_log if format == "porcupine-etcd" else parse_kv_log)(path)
    return history


@contextlib.contextmanager
def _read_errors(file: str, format: str):
    """What reading `file` in `format` can go wrong with, as CheckInputError: one sentence with the fix."""
    from kafkaesque_harness.history import HistoryFormatError

    try:
        yield
    except FileNotFoundError:
        raise CheckInputError(f"{file} does not exist; pass the path of a history file.") from None
    except IsADirectoryError:
        raise CheckInputError(f"{file} is a directory; pass the path of a history file (a run's is "
                              f"<run dir>/history.jsonl).") from None
    except OSError as e:
        raise CheckInputError(f"cannot read {file} ({e.strerror or e}); pass a readable history file.") from None
    except HistoryFormatError as e:
        if format != "jsonl":  # the other formats' readers name the fix themselves
            raise CheckInputError(str(e)) from None
        raise CheckInputError(f"{str(e).rstrip('.')}; pass a JSON Lines history, or the --format the file is "
                              f"written in.") from None


def _refuse_jsonl_without_a_line(path: Path) -> None:
    """read_history drops an unparseable last line without its newline (a writer killed mid-line); when
    that line is all there is, the file is no history at all (a binary file, another format)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head.strip():
        from kafkaesque_harness.history import HistoryFormatError

        raise HistoryFormatError(f"{path} line 1: not a JSON op, and no other line is.")


def _check_model_reads(names: set[str], model: str, file: str) -> None:
    """A model none of whose operations the history holds (`names`: its client ops' f) would judge nothing:
    refuse it by name."""
    if names and not names & set(MODEL_OPS[model]):
        raise CheckInputError(f"the {model} model reads {', '.join(MODEL_OPS[model])} operations and {file} holds "
                              f"none (its operations are {', '.join(sorted(names)[:8])}); pass the --model that "
                              f"fits the file.")


def _checkers(model: str, time_limit: float) -> list:
    if model == "txn":
        from kafkaesque_harness.checkers.txn import TxnChecker

        return [TxnChecker(cycle_budget_s=time_limit)]
    if model == "list-append":
        from kafkaesque_harness.checkers.elle import ElleListAppendChecker

        return [ElleListAppendChecker(cycle_budget_s=time_limit)]
    if model == "queue":
        from kafkaesque_harness.checkers.log_order import LogOrderChecker
        from kafkaesque_harness.checkers.queue import QueueChecker

        return [QueueChecker(), LogOrderChecker()]
    from kafkaesque_harness.checkers.linearizable import LinearizableChecker

    return [LinearizableChecker(model, time_limit)]
