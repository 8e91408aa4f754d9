#!/usr/bin/env python3
"""The project's import graph, measured from the code: circles, arrows a room may not draw, reaches into
the broker past its face, imports outside the namespace, and imports hidden inside functions.
`make test` (and so CI) runs it with --check, so any of these but the last fails the build.

A room is a top-level folder (docs/ARCHITECTURE.md), and the reference broker, clusters/broker/, is a
room of its own inside clusters/: it runs alone on the nodes. MAY_IMPORT says which rooms each room
may import; it follows a run's lifecycle, the harness (CLI, runner, campaigns) on top, history/ the
ground under all. An arrow the table does not allow is a breach, and so is a circle, of files or of
rooms. The broker is imported through its face, the names of clusters/broker/__init__.py, or by its
adapter clusters/reference.py: no other module names a module inside it.

Usage: python scripts/import_graph.py [--root DIR] [--check] [--verbose]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

# The rooms each room may import, besides itself.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "history": (),                                              # the ground: op schema, history files
    "broker": (),                                               # runs alone on the nodes
    "checkers": ("history",),                                   # pure: history (and data) -> verdict
    "clusters": ("history", "broker"),                          # what runs under test, and where
    "workloads": ("history", "checkers"),                       # clients and the checkers they declare
    "nemesis": ("history", "clusters", "broker"),               # faults, through the cluster's interfaces
    "results": ("history", "checkers", "clusters", "workloads"),  # store, reports, the Spark pipeline
    "studies": ("history", "checkers", "clusters", "broker", "nemesis", "results"),  # mutation, detection
    "harness": ("history", "checkers", "clusters", "broker", "workloads", "nemesis", "results", "studies"),
}
FOLDERS = ("history", "checkers", "clusters", "workloads", "nemesis", "results", "studies", "harness")
BROKER = "clusters.broker"          # its package: the face
BROKER_ADAPTER = "clusters.reference"


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the rooms' folders."""
    modules: dict[str, Path] = {}
    for room in FOLDERS:
        for path in sorted((root / room).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


NAMESPACE = "kafkaesque_harness"  # the one import namespace: kafkaesque_harness.<room>.<module>


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module a dotted name lives in (the longest prefix that is a module), named by its
    path under the namespace (`checkers.queue` for kafkaesque_harness.checkers.queue)."""
    if not name.startswith(NAMESPACE + "."):
        return None
    parts = name[len(NAMESPACE) + 1:].split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported project module, inside a function?) for each import statement of one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            # An import under `if TYPE_CHECKING:` is an arrow too: the file still needs the other
            # to be read, and a circle kept only for annotations is still a circle.
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = [NAMESPACE, *package.split(".")]
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` names a module; `from mod import name` names the module.
                names = [f"{base}.{alias.name}" for alias in child.names] + [base]
            for name in names:
                target = _resolve(name, modules)
                if target and target != module:
                    found.append((target, in_function))
                    if isinstance(child, ast.ImportFrom):
                        break  # one arrow per statement: the first (most precise) resolution
            visit(child, nested)

    visit(tree, False)
    return found


def bare_imports(path: Path) -> list[str]:
    """`file:line` of each absolute import that names a room without the namespace (`from history.ops
    import Op`). From the checkout's root such an import still finds the folder and loads a second copy
    of the module; installed from the wheel it fails. Every import goes through kafkaesque_harness."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        if any(name.split(".")[0] in FOLDERS for name in names):
            found.append(f"{path}:{node.lineno}")
    return found


def outside_rooms(root: Path) -> list[Path]:
    """The Python files of the checkout that are not in a room: tests, benchmarks, scripts."""
    return [p for folder in ("tests", "benchmarks", "scripts") for p in sorted((root / folder).rglob("*.py"))]


def room(module: str) -> str:
    if module == BROKER or module.startswith(BROKER + "."):
        return "broker"
    return module.split(".")[0]


def reaches_into_broker(source: str, target: str) -> bool:
    """An import of a module inside the broker by a module outside it (its face and adapter aside)."""
    return room(target) == "broker" and room(source) != "broker" and target != BROKER and source != BROKER_ADAPTER


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles: groups of two or more nodes that each reach all the others. The graphs here
    have about a hundred nodes, so plain reachability from every node is fast and obviously right."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        reach[start] = seen
    circles: list[list[str]] = []
    placed: set[str] = set()
    for node in sorted(graph):
        if node in placed:
            continue
        circle = sorted(other for other in reach[node] if node in reach.get(other, ()))
        if len(circle) > 1:
            circles.append(circle)
            placed.update(circle)
    return circles


def measure(root: Path) -> dict:
    modules = project_modules(root)
    file_graph: dict[str, set[str]] = defaultdict(set)
    room_arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    hidden: list[str] = []
    for module, path in modules.items():
        file_graph[module]
        for target, in_function in imports_of(module, path, modules):
            file_graph[module].add(target)
            if in_function:
                hidden.append(f"{module} -> {target}")
            if room(module) != room(target):
                room_arrows[(room(module), room(target))].append(f"{module} -> {target}")
    room_graph: dict[str, set[str]] = defaultdict(set)
    for source, target in room_arrows:
        room_graph[source].add(target)
    breaches = {pair: imports for pair, imports in room_arrows.items() if pair[1] not in MAY_IMPORT[pair[0]]}
    reach_ins = sorted({f"{s} -> {tg}" for s, targets in file_graph.items() for tg in targets
                        if reaches_into_broker(s, tg)})
    return {
        "files": len(modules),
        "file_circles": strongly_connected(file_graph),
        "room_arrows": room_arrows,
        "room_circles": strongly_connected(room_graph),
        "breaches": breaches,
        "reach_ins": reach_ins,
        "hidden": sorted(set(hidden)),
        # tests and benchmarks too: from the checkout's root a bare import there loads a second copy
        "bare": [line for path in [*modules.values(), *outside_rooms(root)] for line in bare_imports(path)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 on any circle, breach of the table, reach into the broker or bare import")
    parser.add_argument("--verbose", action="store_true", help="list every arrow between rooms")
    args = parser.parse_args(argv)
    found = measure(args.root)
    print(f"{found['files']} files in {len(MAY_IMPORT)} rooms; "
          f"{len(found['room_arrows'])} arrows between rooms, {len(found['breaches'])} the table does not allow, "
          f"{len(found['reach_ins'])} reaching into the broker; {len(found['file_circles'])} circles of files, "
          f"{len(found['room_circles'])} circles of rooms; {len(found['hidden'])} imports inside functions")
    for component in found["file_circles"]:
        print("  circle of files: " + " <-> ".join(component))
    for component in found["room_circles"]:
        print("  circle of rooms: " + " <-> ".join(component))
    for line in found["bare"]:
        print(f"  outside the namespace: {line}")
    for (source, target), imports in sorted(found["breaches"].items()):
        print(f"  not allowed: {source} -> {target} ({source} may import {', '.join(MAY_IMPORT[source]) or 'nothing'}): "
              + ", ".join(sorted(set(imports))[:4]) + (" ..." if len(set(imports)) > 4 else ""))
    for line in found["reach_ins"]:
        print(f"  past the broker's face: {line}")
    if args.verbose:
        for (source, target), imports in sorted(found["room_arrows"].items()):
            print(f"  {source} -> {target}: {len(imports)}")
        for line in found["hidden"]:
            print(f"  inside a function: {line}")
    if not args.check:
        return 0
    problems = []
    if found["file_circles"] or found["room_circles"]:
        problems.append("an import circle")
    if found["bare"]:
        problems.append(f"{len(found['bare'])} imports outside the kafkaesque_harness namespace")
    if found["breaches"]:
        problems.append(f"{len(found['breaches'])} arrows between rooms the table does not allow")
    if found["reach_ins"]:
        problems.append(f"{len(found['reach_ins'])} imports past the broker's face")
    if problems:
        print("import graph check failed: " + " and ".join(problems)
              + "; import what a room needs from a room it may import (MAY_IMPORT, docs/ARCHITECTURE.md), the "
              "broker through clusters/broker/__init__.py's names, and move shared code down instead of importing up.",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
