"""The distribution's shape (issue 37): one import namespace, kafkaesque_harness, mapped over the
repository's top-level rooms, and a pytest plugin that loads nothing of the project until a fixture
runs. tests/integration/test_wheel.py builds the wheel and installs it beside a user's own modules."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("history", "checkers", "clusters", "workloads", "nemesis", "results", "studies", "harness")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_of_the_rooms_is_in_the_wheel_under_the_namespace():
    folders = {".".join(("kafkaesque_harness", *init.parent.relative_to(ROOT).parts))
               for room in ROOMS for init in (ROOT / room).rglob("__init__.py")}
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert listed == folders | {"kafkaesque_harness"}, (folders - listed, listed - folders)
    mapping = _pyproject()["tool"]["setuptools"]["package-dir"]
    assert mapping == {"kafkaesque_harness": "kafkaesque_harness",
                       **{f"kafkaesque_harness.{room}": room for room in ROOMS}}


def test_every_entry_point_names_a_module_of_the_namespace():
    project = _pyproject()["project"]
    targets = [*project["scripts"].values(), *project["entry-points"]["pytest11"].values()]
    assert targets and all(t.startswith("kafkaesque_harness.") for t in targets), targets


def test_the_pytest_plugin_imports_nothing_of_the_project_until_a_fixture_runs():
    # a fresh interpreter: what importing the plugin (as pytest does at start-up) brings in of ours
    code = ("import sys, json, kafkaesque_harness.harness.pytest_plugin; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kafkaesque_harness'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout
    assert json.loads(out) == ["kafkaesque_harness", "kafkaesque_harness.harness",
                               "kafkaesque_harness.harness.pytest_plugin"]



def test_every_fault_kind_builds_its_nemesis_from_outside_the_checkout():
    # From the checkout's root a bare `nemesis.faults` would still be found; from / only the namespace is.
    code = ("import json, importlib\nfrom kafkaesque_harness.nemesis.kinds import all_kinds\n"
            "paths = [k.make.__qualname__[len('lazy('):-1] for k in all_kinds().values() if k.make.__qualname__.startswith('lazy(')]\n"
            "[getattr(importlib.import_module(p.split(':')[0]), p.split(':')[1]) for p in paths]\n"
            "print(json.dumps(paths))\n")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) >= 14


def test_a_lazy_fault_class_named_outside_the_namespace_is_refused():
    import pytest

    from kafkaesque_harness.nemesis.fault import lazy

    with pytest.raises(ValueError, match="kafkaesque_harness.<room>.<module>:<Class>"):
        lazy("nemesis.faults:KillNemesis")


def test_every_name_of_the_brokers_face_resolves_and_none_is_also_a_module_of_the_broker():
    # A submodule imported anywhere becomes an attribute of its package: a face name shared with a module
    # would then be that module, not the face's function.
    import kafkaesque_harness.clusters.broker as broker

    modules = {p.stem for p in (ROOT / "clusters" / "broker").rglob("*.py")} | {
        p.name for p in (ROOT / "clusters" / "broker").iterdir() if p.is_dir()}
    assert broker.__all__ and not set(broker.__all__) & modules, set(broker.__all__) & modules
    for name in broker.__all__:
        assert getattr(broker, name) is not None, name
