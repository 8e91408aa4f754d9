"""Issue 19, the input side: no input the harness cannot read faithfully ends "valid", and no bad input
ends with the exit code of a verdict.

Exit codes: 0 valid, 1 invalid, 2 unknown (with the reason), 3 the harness failed or the input is bad
(one sentence naming the cause and the fix, never a traceback).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.cli import app

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
