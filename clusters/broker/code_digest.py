"""The digest of the node code a process runs: which code, exactly, a broker or controller started from.

Every node logs it at start-up (listener.start_serving: event `node_code`), so a run can prove which
code its nodes ran: a mutant's run (studies/mutation.py) compares it with the digest of its mutated
copy. The files are the node code the image carries (node_code_members, below): the package
marker, the broker package and the lossy file system, relative to the root that holds `clusters/`.

On a node the code sits as it does installed: a code dir (the node's PYTHONPATH) holding the
namespace package, `kafkaesque_harness/__init__.py`, and under it `clusters/`; `node_code_members`
is that layout, which the image, the SSH upload and the mutants' copies all write.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding clusters/
NAMESPACE = __name__.split(".")[0]  # kafkaesque_harness: the one package the project installs


def node_code_files(root: str | Path = ROOT) -> list[Path]:
    root = Path(root)
    files = [root / "clusters" / "__init__.py", root / "clusters" / "lossyfs.py"]
    files += [p for p in (root / "clusters" / "broker").rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(p for p in files if p.is_file())


def node_code_members(root: str | Path = ROOT) -> list[tuple[str, Path]]:
    """(path inside a node's code dir, source file) for each file a node runs: the namespace's
    __init__.py, then the node code files under `<namespace>/`."""
    init = Path(importlib.import_module(NAMESPACE).__file__ or "")
    root = Path(root)
    return [(f"{NAMESPACE}/__init__.py", init)] + [
        (f"{NAMESPACE}/{f.relative_to(root).as_posix()}", f) for f in node_code_files(root)]


def node_code_digest(root: str | Path = ROOT) -> str:
    """sha256 (16 hex digits) over each node code file's path relative to `root` and its bytes."""
    root = Path(root)
    h = hashlib.sha256()
    for f in node_code_files(root):
        rel = f.relative_to(root).as_posix().encode()
        data = f.read_bytes()
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]
