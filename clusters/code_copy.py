"""A temporary copy of the node code with edits applied: what a mutant's run gives its nodes (issue 22).

`CodeCopy(edits, label)` copies this tree's `clusters/` package into a fresh directory under the
system's temporary directory (`kafkaesque-code-<label>-*`), laid out as a node's code dir holds it
(`kafkaesque_harness/__init__.py` and `kafkaesque_harness/clusters/`), applies each edit (a file
under `kafkaesque_harness/`, an exact snippet that must occur exactly once, and its replacement),
and is what a run's `node_code` names: the local backends start their nodes with that directory
first on the Python path, the docker backend mounts its `clusters/` over the image's
(clusters/local.py, clusters/docker.py).
The shipped code is never edited.

The copy is registered as a run (clusters/ownership.py) for as long as it exists, and carries a
marker naming that run: `close()` (or leaving the `with` block) removes both, and if the harness
dies first, `kafkaesque cleanup` finds the directory (`find_code_copies`) and removes it once that
run is provably dead, like any other leftover.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.broker import NAMESPACE, node_code_digest, node_code_members
from kafkaesque_harness.clusters.ownership import Leftover, RunRecord, register_run, unregister_run

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "kafkaesque-code-"
MARKER = ".kafkaesque-code-copy"


class SnippetError(ClusterError):
    """An edit's snippet does not occur exactly once in its file (the code moved under the edit)."""


@dataclass(frozen=True)
class Edit:
    file: str   # relative to the directory holding clusters/, e.g. "clusters/broker/replica.py"
    old: str    # must occur exactly once
    new: str


def snippet_problem(text: str, edit: Edit, who: str) -> str | None:
    """Why `edit` cannot apply to `text` (one sentence), or None when its snippet occurs exactly once."""
    n = text.count(edit.old)
    if n == 1:
        return None
    first = edit.old.strip().splitlines()[0] if edit.old.strip() else repr(edit.old)
    where = "does not occur" if n == 0 else f"occurs {n} times"
    return (f"{who}: the snippet `{first.strip()}` {where} in {edit.file} (it must occur exactly once); "
            f"the code moved under it: update the snippet in the catalogue")


def edited_texts(root: Path, edits: list[Edit] | tuple[Edit, ...], who: str) -> tuple[dict[str, str], list[str]]:
    """The texts of the files under `root` with `edits` applied in order (file -> text), and one sentence per
    edit that cannot apply (its file is missing, or its snippet does not occur exactly once); nothing is
    written. An edit that cannot apply leaves its file's text as it was for the edits after it."""
    texts: dict[str, str] = {}
    problems: list[str] = []
    for e in edits:
        path = root / e.file
        if not path.is_file():
            problems.append(f"{who}: {e.file} does not exist; update the catalogue.")
            continue
        text = texts.setdefault(e.file, path.read_text())
        problem = snippet_problem(text, e, who)
        if problem:
            problems.append(problem + ".")
        else:
            texts[e.file] = text.replace(e.old, e.new)
    return texts, problems


def apply_edits(root: Path, edits: list[Edit] | tuple[Edit, ...], who: str) -> None:
    """Apply every edit to the files under `root`; SnippetError before any write if one cannot apply."""
    texts, problems = edited_texts(root, edits, who)
    if problems:
        raise SnippetError(problems[0])
    for f, text in texts.items():
        (root / f).write_text(text)


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40] or "copy"


class CodeCopy:
    """A registered temporary copy of `clusters/` with `edits` applied. Use as a context manager.

    `root` is the node code dir (what `node_code` names, first on the nodes' path); `package`, the
    copy's `kafkaesque_harness/`, holds clusters/ and is what the edits' paths are relative to."""

    def __init__(self, edits: list[Edit] | tuple[Edit, ...] = (), label: str = "copy", source: Path = REPO_ROOT):
        self.label = label
        self.owner = f"code-{_safe(label)}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._record: RunRecord | None = register_run(self.owner, "code-copy")
        try:
            self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{_safe(label)}-"))
            (self.root / MARKER).write_text(self.owner + "\n")
            self.package = self.root / NAMESPACE
            shutil.copytree(source / "clusters", self.package / "clusters",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o"))
            namespace_init = dict(node_code_members(source))[f"{NAMESPACE}/__init__.py"]
            shutil.copyfile(namespace_init, self.package / "__init__.py")
            apply_edits(self.package, edits, label)
            self.digest = node_code_digest(self.package)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        root = getattr(self, "root", None)
        if root is not None and root.exists():
            shutil.rmtree(root, ignore_errors=True)
        if self._record is not None:
            unregister_run(self._record)
            self._record = None

    def __enter__(self) -> CodeCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def find_code_copies(tmp: str | None = None) -> list[Leftover]:
    """Every code copy under the temporary directory, as a leftover of the run its marker names."""
    found = []
    base = Path(tmp or tempfile.gettempdir())
    for d in sorted(base.glob(f"{PREFIX}*")):
        try:
            owner = (d / MARKER).read_text().strip()
        except OSError:
            continue  # not one of ours (or half made: no marker, nothing names its run)
        found.append(Leftover(owner, f"code copy {d}", lambda d=d: shutil.rmtree(d), rank=7))
    return found
