"""docs/VERDICTS.md is generated from the code's own list of reasons and states: it must say what the code says."""

from kafkaesque_harness.checkers.coverage import STATES
from kafkaesque_harness.checkers.reasons import REASONS
from kafkaesque_harness.results.verdicts_doc import DOC, RULE_TITLES, render


def test_docs_verdicts_is_what_the_code_generates():
    assert DOC.read_text() == render(), "docs/VERDICTS.md is stale: run `python -m kafkaesque_harness.results.verdicts_doc`"


def test_every_reason_and_state_is_in_the_document_under_a_rule_it_names():
    text = render()
    assert all(r.rule in RULE_TITLES for r in REASONS.values())
    assert all(f"| `{code}` |" in text for code in REASONS) and all(f"| `{s}` |" in text for s in STATES)
