"""The simulator's clients (workloads/sim/) read no host clock, OS random source, uuid or thread: a simulated run
is replayable only if every time comes from the loop and every choice from the seeded RNG (issue 41 item 3)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[2] / "workloads" / "sim"
FORBIDDEN_MODULES = {"time", "uuid", "secrets", "threading", "os", "datetime"}
ALLOWED_RANDOM = {"Random"}  # random.Random(seed): a seeded generator handed in or drawn from one


def nondeterministic_uses(source: str) -> list[str]:
    """The imports of forbidden modules and the uses of the random module's shared generator in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module == "random":
            found += [f"from random import {a.name}" for a in node.names if a.name not in ALLOWED_RANDOM]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random"
              and node.attr not in ALLOWED_RANDOM):
            found.append(f"random.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(SIM.glob("*.py")), ids=lambda p: p.name)
def test_simulated_client_module_reads_no_host_clock_or_random_source(path):
    assert nondeterministic_uses(path.read_text()) == []


def test_the_rule_finds_a_wall_clock_and_the_shared_generator():
    source = "import time\nimport random\nfrom uuid import uuid4\nx = random.random()\ny = random.Random(3)\n"
    assert nondeterministic_uses(source) == ["import time", "from uuid import ...", "random.random"]
