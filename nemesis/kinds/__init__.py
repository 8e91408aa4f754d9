"""Every fault kind, one module each: a module of this package that defines `KIND` (a FaultKind,
nemesis/fault.py) is a fault `--nemesis` accepts, with no list to edit anywhere else.

`all_kinds()` finds them (pkgutil over this package), once per process, sorted by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from kafkaesque_harness.nemesis.fault import FaultKind


@cache
def all_kinds() -> dict[str, FaultKind]:
    """name -> kind, for every module here that defines KIND; two modules claiming one name is a bug."""
    found: dict[str, FaultKind] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if not isinstance(kind, FaultKind):
            continue
        if kind.name in found:
            raise RuntimeError(f"two fault kinds are named {kind.name!r} (nemesis/kinds/{info.name}.py and another)")
        found[kind.name] = kind
    return dict(sorted(found.items()))


def kind(name: str) -> FaultKind | None:
    return all_kinds().get(name)
