"""STUB on branch wt-txnwl only: the txn checker (issue 25 deliverable 2) is written on another branch;
the merge replaces this file. It exists so that the txn workload's checkers() import resolves here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from history import Op


class TxnChecker:
    name = "txn"

    def check(self, test: dict[str, Any], history: Sequence[Op]):
        raise NotImplementedError("checkers/txn.py is a stub on this branch; the txn checker lands from its own branch")
