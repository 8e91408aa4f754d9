"""Optional dependencies (history/extras.py): a missing extra is one sentence naming the extra and the pip
command; a module that is there but broken is not mistaken for a missing extra; every extra the code asks
for is declared in pyproject.toml, and the core needs none of them."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from kafkaesque_harness.history.extras import DIST, EXTRAS, MissingExtra, install_hint, installed, need

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_module_names_the_extra_and_the_install_command():
    with pytest.raises(MissingExtra) as e:
        need("no_such_module_kq", "spark", "the Spark pipeline")
    assert str(e.value) == ("the Spark pipeline needs the spark extra (no_such_module_kq is not installed): "
                            f"pip install '{DIST}[spark]'")
    assert isinstance(e.value, ImportError)  # code that catches ImportError keeps working
    assert not installed("no_such_module_kq") and installed("json")
    assert need("json", "edn", "x") is sys.modules["json"]


def test_a_broken_import_inside_an_installed_module_is_not_called_a_missing_extra(tmp_path, monkeypatch):
    (tmp_path / "kq_broken.py").write_text("import no_such_dependency_kq\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as e:
        need("kq_broken", "ssh", "x")
    assert not isinstance(e.value, MissingExtra) and e.value.name == "no_such_dependency_kq"


def test_an_unknown_extra_is_a_bug_in_the_caller():
    with pytest.raises(ValueError, match="unknown extra 'sparkle'"):
        need("json", "sparkle", "x")


def _needs_in_code() -> set[tuple[str, str]]:
    """(module, extra) of every need(...) call in the project's code, read from the source."""
    found = set()
    for path in ROOT.glob("*/**/*.py"):
        if any(part in (".venv", "tests", "benchmarks") for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "need" and len(node.args) >= 2 \
                    and all(isinstance(a, ast.Constant) for a in node.args[:2]):
                found.add((node.args[0].value, node.args[1].value))
    found.add(("confluent_kafka", "confluent"))  # workloads/queue.py passes its CONFLUENT tuple
    return found


def test_every_extra_the_code_asks_for_is_declared_and_not_in_the_core():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST
    declared = project["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    core = " ".join(project["dependencies"]).lower()
    dist_of = {"confluent_kafka": "confluent-kafka", "pyspark": "pyspark", "pyspark.sql": "pyspark",
               "pyarrow": "pyarrow", "edn_format": "edn_format", "paramiko": "paramiko"}
    needs = _needs_in_code()
    assert {"pyspark.sql", "pyarrow", "edn_format", "paramiko", "confluent_kafka"} <= {m for m, _ in needs}
    for module, extra in needs:
        dist = dist_of[module]
        assert any(r.lower().startswith(dist) for r in declared[extra]), (module, extra)
        assert dist not in core, f"{dist} is in the core dependencies, though the code asks for it as an extra"
    for heavy in ("pyspark", "pyarrow", "pyfuse3", "confluent-kafka"):
        assert heavy not in core
    assert install_hint("all") == f"pip install '{DIST}[all]'"


def test_a_missing_extra_is_said_once_for_every_feature_that_needs_it(monkeypatch):
    """extra_missing: need()'s sentence without importing, for the first absent module of the extra; the
    local-netns cluster's lossy file system and the confluent-client check say exactly that."""
    import kafkaesque_harness.history.extras as extras
    from kafkaesque_harness.clusters.base import ClusterSpec
    from kafkaesque_harness.clusters.netns import NetnsCluster
    from kafkaesque_harness.harness.spec import TestSpec

    assert extras.extra_missing("lossy", "x") is None  # the dev venv has every extra
    monkeypatch.setattr(extras, "installed", lambda module: module != "trio")
    said = extras.extra_missing("lossy", "the lossy file system")
    assert said == f"the lossy file system needs the lossy extra (trio is not installed): pip install '{DIST}[lossy]'"
    assert NetnsCluster(ClusterSpec(), "run-x").lossy_unavailable() == said
    monkeypatch.setattr(extras, "installed", lambda module: module != "confluent_kafka")
    assert any(p.startswith("--client confluent-kafka needs the confluent extra (confluent_kafka is not installed)")
               for p in TestSpec.make(client="confluent-kafka").problems())
    assert not any("confluent extra" in p for p in TestSpec.make(client="kafka-python").problems())
