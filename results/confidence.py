"""What a count of runs says about a rate: every rate the project states carries its run count and a 95%
interval, and "clean" means "0 of N runs: rate below x% (95%)" (DESIGN.md, Conventions).

Clopper-Pearson (exact) intervals: the binomial tail itself, no normal approximation, so they hold for the
small counts of real runs (1 to 60) as for a simulator's thousands. Two-sided 95% for a rate; for none of N,
the one-sided bound: the rate below which N clean runs would happen at least 5% of the time.
"""

from __future__ import annotations

import math

LEVEL = 0.95


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), in logs (n up to millions without overflow)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0 if k < n else 1.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
    return min(total, 1.0)


def _solve(f, target: float) -> float:
    """The p in [0, 1] with f(p) = target, f decreasing in p (bisection to 1e-9)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The two-sided Clopper-Pearson interval of a rate seen k times in n runs."""
    if n <= 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    low = 0.0 if k == 0 else _solve(lambda p: _binom_cdf(k - 1, n, p), 1 - tail)  # P(X >= k) = tail
    high = 1.0 if k == n else _solve(lambda p: _binom_cdf(k, n, p), tail)      # P(X <= k) = tail
    return low, high


def upper_bound_of_none(n: int, level: float = LEVEL) -> float:
    """The one-sided bound for 0 of n: the rate below which n clean runs happen with probability 1 - level."""
    return 1.0 if n <= 0 else 1 - (1 - level) ** (1 / n)


def _pct(x: float) -> str:
    """A percentage to two significant digits (16%, 4.9%, 0.0030%), whole from 10% up."""
    pct = 100 * x
    if pct >= 10 or pct == 0:
        return f"{pct:.0f}%"
    return f"{pct:.{max(1, 1 - math.floor(math.log10(pct)))}f}%"


def rate_text(k: int, n: int, unit: str = "runs") -> str:
    """"k of n runs (r%, 95% CI a-b%)", or for none "0 of n runs: rate below x% (95%)"; `unit` names what was
    counted (a simulator counts seeds)."""
    if n <= 0:
        return f"no {unit}"
    if k == 0:
        return f"0 of {n} {unit}: rate below {_pct(upper_bound_of_none(n))} (95%)"
    low, high = interval(k, n)
    return f"{k} of {n} {unit} ({_pct(k / n)}, 95% CI {_pct(low)}-{_pct(high)})"


def cell_text(k: int, n: int) -> str:
    """The short form for a table cell: "k/n (a-b%)", or "0/n (<x%)"."""
    if n <= 0:
        return "-"
    if k == 0:
        return f"0/{n} (<{_pct(upper_bound_of_none(n))})"
    low, high = interval(k, n)
    return f"{k}/{n} ({_pct(low)}-{_pct(high)})"
