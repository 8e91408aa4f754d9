"""Issue 19, the input side: no input the harness cannot read faithfully ends "valid", and no bad input
ends with the exit code of a verdict.

Exit codes: 0 valid, 1 invalid, 2 unknown (with the reason), 3 the harness failed or the input is bad
(one sentence naming the cause and the fix, never a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.harness.cli import app

runner = CliRunner()
EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_BAD_INPUT = 0, 1, 2, 3


def one_sentence_error(output: str) -> str:
    """The one error line of a bad-input exit, checked to be one line and no traceback."""
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    return errors[0]


# --- EDN strings are read as written -------------------------------------------------------------
@pytest.mark.parametrize("written,read", [
    ('"a,b"', '"a b"'),               # the comma is part of the string, not whitespace
    ('"é"', '"\\u00c3\\u00a9"'),      # "é" is not "Ã©", the UTF-8 bytes of é read as Latin-1
], ids=["comma", "non-ascii"])
def test_an_invalid_list_append_history_with_commas_or_unicode_in_its_values_checks_invalid(tmp_path, written, read):
    history = tmp_path / "h.edn"
    # The transaction appends `written` to x, then reads x and sees another value: an internal anomaly.
    history.write_text(
        f"{{:process 0, :type :invoke, :f :txn, :value [[:append :x {written}] [:r :x nil]]}}\n"
        f"{{:process 0, :type :ok, :f :txn, :value [[:append :x {written}] [:r :x [{read}]]]}}\n", encoding="utf-8")
    r = runner.invoke(app, ["check", str(history), "--format", "edn"])
    assert r.exit_code == EXIT_INVALID, r.output
    assert "internal" in r.output


# --- `check` on files it cannot read: exit 3, one sentence naming the file ---------------------
FORMATS = ("jsonl", "edn", "porcupine-etcd", "porcupine-kv")


def unreadable_files(tmp_path: Path) -> dict[str, Path]:
    binary = tmp_path / "binary"
    binary.write_bytes(bytes(range(256)) * 4)  # NUL bytes, and bytes that are not UTF-8
    no_newline = tmp_path / "binary-one-line"
    no_newline.write_bytes(b"\x7fELF\x02\x01\x01" + b"\xff" * 50)  # one torn "line": no op was ever written
    latin1 = tmp_path / "latin1"
    latin1.write_bytes('{"value": "caf\xe9"}\nINFO  jepsen.util - 1 :invoke :read nil\n'.encode("latin-1"))
    directory = tmp_path / "a-directory"
    directory.mkdir()
    return {"binary": binary, "binary-one-line": no_newline, "not-utf-8": latin1, "directory": directory,
            "missing": tmp_path / "missing"}


@pytest.mark.parametrize("kind", ["binary", "binary-one-line", "not-utf-8", "directory", "missing"])
@pytest.mark.parametrize("format", FORMATS)
def test_a_file_check_cannot_read_exits_3_with_one_sentence_naming_it(tmp_path, format, kind):
    path = unreadable_files(tmp_path)[kind]
    r = runner.invoke(app, ["check", str(path), "--format", format])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert str(path) in one_sentence_error(r.output)


@pytest.mark.parametrize("format", FORMATS)
def test_an_empty_history_is_unknown_and_says_why(tmp_path, format):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = runner.invoke(app, ["check", str(empty), "--format", format])
    assert r.exit_code == EXIT_UNKNOWN, r.output
    assert "unknown: " in r.output and "holds no client operation" in r.output


@pytest.mark.parametrize("format, text, problem", [
    ("porcupine-etcd", "INFO  jepsen.util - 1 :invoke :read nil\nINFO  jepsen.util - 1 :ok :cas [x y]\n",
     "line 2: a cas value must be [old new], two integers"),
    ("porcupine-kv", '{:process 0, :type :maybe, :f :get, :key "k", :value nil}\n',
     "line 1: type :maybe is not one of invoke, ok, fail, info"),
], ids=["etcd-garbage-cas", "kv-unknown-type"])
def test_a_bad_porcupine_line_is_named_with_its_line_and_problem(tmp_path, format, text, problem):
    log = tmp_path / "history.log"
    log.write_text(text)
    r = runner.invoke(app, ["check", str(log), "--format", format])
    assert r.exit_code == EXIT_BAD_INPUT
    assert f"{log} {problem}" in one_sentence_error(r.output)


PORCUPINE_KV = Path(__file__).resolve().parents[2].parent / "shared" / "anchors" / "porcupine" / "kv" / "c01-bad.txt"


@pytest.mark.parametrize("model", ["queue", "log", "list-append"])
def test_a_model_that_reads_none_of_the_histories_ops_is_refused_not_valid(model):
    # A kv history judged by a model that passes over get/put/append checked nothing, and said valid.
    r = runner.invoke(app, ["check", str(PORCUPINE_KV), "--format", "porcupine-kv", "--model", model])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert f"the {model} model reads" in one_sentence_error(r.output)


@pytest.mark.parametrize("budget", ["0", "-1", "nan"])
def test_a_checker_budget_of_no_time_is_refused(budget):
    r = runner.invoke(app, ["check", str(PORCUPINE_KV), "--format", "porcupine-kv", "--time-limit", budget])
    assert r.exit_code == EXIT_BAD_INPUT
    assert "--time-limit" in one_sentence_error(r.output)


# --- the guard: a harness bug is exit 3 and one sentence, usage errors are exit 3 ----------------
def test_an_exception_escaping_a_command_is_exit_3_with_one_sentence_and_the_traceback_in_a_file(
        tmp_path, monkeypatch):
    from kafkaesque_harness.harness import check_cli
    def explode(*args, **kwargs):
        raise RuntimeError("boom\nacross lines")

    monkeypatch.setattr(check_cli, "check_command", explode)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = runner.invoke(app, ["check", "whatever.jsonl"])
    assert r.exit_code == EXIT_BAD_INPUT
    line = one_sentence_error(r.output)
    assert line.startswith("error: kafkaesque failed: RuntimeError: boom across lines; the traceback is in ")
    [crash] = (tmp_path / "cache" / "kafkaesque").iterdir()
    assert str(crash) in line and "explode" in crash.read_text() and "Traceback" in crash.read_text()


@pytest.mark.parametrize("argv", [["run", "--no-such-option"], ["analyze"], ["run", "--time-limit", "soon"],
                                  ["no-such-command"]], ids=["bad-option", "missing-argument", "bad-value",
                                                             "bad-command"])
def test_a_usage_error_exits_3_not_2_which_means_unknown(argv):
    r = runner.invoke(app, argv)
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert "--help" in one_sentence_error(r.output)


def test_help_says_what_every_exit_status_means():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    assert "0 valid, 1 invalid, 2 unknown, 3 the harness failed or the input is bad" in " ".join(r.output.split())
    assert "a bad option or a missing argument too" in " ".join(r.output.split())


def test_the_console_script_is_the_guarded_main(monkeypatch):
    import tomllib

    from kafkaesque_harness.harness.entry import main

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["kafkaesque"] == "kafkaesque_harness.harness.entry:main"
    monkeypatch.setattr("sys.argv", ["kafkaesque", "run", "--no-such-option"])
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == EXIT_BAD_INPUT


def test_pretty_tracebacks_never_show_locals():
    assert app.pretty_exceptions_show_locals is False  # a local may hold a key or a cluster file's secrets


# --- `run` refuses bad settings before anything starts ---------------------------------------------
@pytest.mark.parametrize("argv,named", [
    (["--time-limit", "-5"], "--time-limit -5"),
    (["--time-limit", "0"], "--time-limit 0"),
    (["--time-limit", "inf"], "--time-limit inf"),
    (["--nemesis-interval", "0"], "--nemesis-interval 0"),
    (["--rate", "-1"], "--rate -1"),
    (["--concurrency", "0"], "--concurrency 0"),
    (["--brokers", "0", "--replication-factor", "1", "--min-isr", "1"], "--brokers 0"),
    (["--partitions", "0"], "--partitions 0"),
    (["--recovery-wait", "-1"], "--recovery-wait -1"),
    (["--flush-policy", "sometimes"], "--flush-policy"),
    (["--name", "../elsewhere"], "--name '../elsewhere'"),
])
def test_run_refuses_a_bad_setting_with_exit_3_before_anything_starts(tmp_path, monkeypatch, argv, named):
    from kafkaesque_harness.harness import runner as runner_module
    started = []
    monkeypatch.setattr(runner_module, "run_test", lambda *a, **k: started.append(a))
    r = runner.invoke(app, ["run", "--store", str(tmp_path / "store"), *argv])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert named in one_sentence_error(r.output)
    assert started == [] and not (tmp_path / "store").exists()


# --- analyze and report: a corrupt stored file is exit 3 naming it -------------------------------
CORRUPT = {"not-json": b"hello", "truncated": b'{"workload": "que', "not-an-object": b"[1, 2]",
           "binary": b"\x89PNG\x00\xff\xfe"}


def stored_run(tmp_path: Path) -> Path:
    run = tmp_path / "queue" / "20260101T000000"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"workload": "queue", "nemesis": []}))
    (run / "history.jsonl").write_text("")
    return run


@pytest.mark.parametrize("content", CORRUPT.values(), ids=CORRUPT.keys())
@pytest.mark.parametrize("command", ["analyze", "report"])
@pytest.mark.parametrize("file", ["test.json", "results.json"])
def test_a_corrupt_stored_json_file_is_exit_3_naming_it(tmp_path, command, file, content):
    run = stored_run(tmp_path)
    (run / file).write_bytes(content)
    r = runner.invoke(app, [command, str(run)])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert str(run / file) in one_sentence_error(r.output)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_an_unreadable_stored_history_is_exit_3_naming_it(tmp_path, command):
    run = stored_run(tmp_path)
    (run / "history.jsonl").unlink()
    (run / "history.jsonl").mkdir()
    r = runner.invoke(app, [command, str(run)])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert str(run / "history.jsonl") in one_sentence_error(r.output)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_a_stored_history_with_a_bad_line_is_exit_3_naming_the_line(tmp_path, command):
    run = stored_run(tmp_path)
    (run / "history.jsonl").write_text('garbage\n{"type": "ok", "f": "send", "process": 0}\n')
    r = runner.invoke(app, [command, str(run)])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    assert f"{run / 'history.jsonl'} line 1" in one_sentence_error(r.output)


@pytest.mark.parametrize("spec,named", [({"workload": "bank"}, "unknown workload 'bank'"),
                                        ({"workload": "queue", "partitions": "4"}, "key 'partitions' must be"),
                                        ({"workload": "queue", "partitions": 0}, "key 'partitions' is 0")])
def test_analyze_refuses_a_test_json_whose_workload_settings_cannot_build_the_checkers(tmp_path, spec, named):
    run = stored_run(tmp_path)
    (run / "test.json").write_text(json.dumps(spec))
    r = runner.invoke(app, ["analyze", str(run)])
    assert r.exit_code == EXIT_BAD_INPUT, r.output
    line = one_sentence_error(r.output)
    assert str(run / "test.json") in line and named in line
