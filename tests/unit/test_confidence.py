"""Rates with their confidence (results/confidence.py): the exact Clopper-Pearson interval, checked against
R's binom.test, and the one-sided bound a clean claim states."""

import pytest

from kafkaesque_harness.results.confidence import cell_text, interval, rate_text, upper_bound_of_none


@pytest.mark.parametrize("k, n, low, high", [
    (5, 6, 0.3587654, 0.9957893),     # binom.test(5, 6)$conf.int
    (1, 10, 0.002528579, 0.4450161),  # binom.test(1, 10)
    (3, 17, 0.03799, 0.4343),         # binom.test(3, 17)
    (60, 60, 0.9403669, 1.0),         # binom.test(60, 60)
    (0, 17, 0.0, 0.1950643),          # binom.test(0, 17)
])
def test_the_interval_is_r_binom_tests(k, n, low, high):
    got = interval(k, n)
    assert got[0] == pytest.approx(low, abs=2e-5) and got[1] == pytest.approx(high, abs=2e-5)


def test_a_clean_claim_is_a_bound_that_grows_tighter_with_runs():
    assert upper_bound_of_none(17) == pytest.approx(0.1616, abs=1e-4)  # the "below about 16%"
    assert upper_bound_of_none(60) == pytest.approx(0.0487, abs=1e-4)
    assert upper_bound_of_none(100_000) == pytest.approx(3.0e-5, rel=0.01)
    assert rate_text(0, 17) == "0 of 17 runs: rate below 16% (95%)"
    assert rate_text(5, 6) == "5 of 6 runs (83%, 95% CI 36%-100%)"
    assert cell_text(0, 60) == "0/60 (<4.9%)" and cell_text(3, 10) == "3/10 (6.7%-65%)" and cell_text(0, 0) == "-"


def test_a_rate_names_what_it_counted():
    assert rate_text(0, 60, unit="seeds") == "0 of 60 seeds: rate below 4.9% (95%)"
    assert rate_text(5, 6, unit="seeds") == "5 of 6 seeds (83%, 95% CI 36%-100%)"
    assert rate_text(0, 0, unit="seeds") == "no seeds"


def test_the_committed_documents_state_no_rate_without_its_interval():
    """A rate written k/n (r%) with no interval beside it (the form the tables used before) is gone from the
    documents that state the project's rates."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bare = re.compile(r"\b\d+/\d+ \(\d+%\)")
    for doc in ("README.md", "docs/DETECTION.md", "docs/MUTATION.md", "docs/FINDINGS.md", "docs/SIMULATION.md"):
        found = bare.findall((root / doc).read_text())
        assert not found, (doc, found[:5])
