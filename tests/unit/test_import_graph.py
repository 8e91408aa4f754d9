"""scripts/import_graph.py: the check `make test` runs must pass on the tree and must fail on a
planted circle or an arrow running back up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)
    return module


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for room in ("history", "checkers", "clusters", "clusters/broker", "workloads", "nemesis", "results", "studies",
                 "harness"):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_project_has_no_circle_no_breach_of_the_table_and_no_reach_into_the_broker():
    found = _script().measure(ROOT)
    assert found["file_circles"] == []
    assert found["room_circles"] == []
    assert found["breaches"] == {}
    assert found["reach_ins"] == [] and found["bare"] == []


def test_a_planted_circle_of_files_fails_the_check(tmp_path, capsys):
    root = _tree(tmp_path, {
        "checkers/a.py": "from kafkaesque_harness.checkers.b import x\n",
        "checkers/b.py": "def f():\n    from kafkaesque_harness.checkers import a\nx = 1\n",  # hidden in a function: still a circle
    })
    graph = _script()
    assert graph.measure(root)["file_circles"] == [["checkers.a", "checkers.b"]]
    assert graph.main(["--root", str(root), "--check"]) == 1
    assert "import circle" in capsys.readouterr().err


def test_an_arrow_back_up_fails_the_check(tmp_path, capsys):
    root = _tree(tmp_path, {
        "history/ops.py": "import json\n",
        "history/bad.py": "from kafkaesque_harness.harness import runner\n",
        "harness/runner.py": "from kafkaesque_harness.history.ops import json\n",
    })
    graph = _script()
    found = graph.measure(root)
    assert list(found["breaches"]) == [("history", "harness")]
    assert found["room_circles"] == [["harness", "history"]]  # the rooms now import each other
    assert graph.main(["--root", str(root), "--check"]) == 1
    assert "not allowed: history -> harness" in capsys.readouterr().out


def test_a_planted_breach_of_the_table_fails_the_check(tmp_path, capsys):
    # a checker that reaches for a cluster: checkers may import history only
    root = _tree(tmp_path, {"checkers/sneaky.py": "from kafkaesque_harness.clusters.base import ClusterSpec\n",
                            "clusters/base.py": "ClusterSpec = object\n"})
    graph = _script()
    assert list(graph.measure(root)["breaches"]) == [("checkers", "clusters")]
    assert graph.main(["--root", str(root), "--check"]) == 1
    assert "checkers may import history" in capsys.readouterr().out


def test_the_broker_is_reached_through_its_face_and_its_adapter_only(tmp_path):
    files = {"clusters/broker/replica.py": "X = 1\n",
             "clusters/reference.py": "from kafkaesque_harness.clusters.broker.replica import X\n",  # the adapter
             "nemesis/targets.py": "from kafkaesque_harness.clusters.broker import coordinator_partition\n"}  # the face
    graph = _script()
    assert graph.main(["--root", str(_tree(tmp_path / "ok", files)), "--check"]) == 0
    files["nemesis/membership.py"] = "from kafkaesque_harness.clusters.broker.replica import X\n"  # past the face
    found = graph.measure(_tree(tmp_path / "bad", files))
    assert found["reach_ins"] == ["nemesis.membership -> clusters.broker.replica"]
    assert graph.main(["--root", str(tmp_path / "bad"), "--check"]) == 1


def test_the_broker_imports_nothing_of_ours(tmp_path):
    root = _tree(tmp_path, {"clusters/broker/server.py": "from kafkaesque_harness.history import Op\n"})
    assert list(_script().measure(root)["breaches"]) == [("broker", "history")]


def test_type_checking_imports_are_arrows_too(tmp_path):
    root = _tree(tmp_path, {
        "clusters/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kafkaesque_harness.clusters.b import B\n",
        "clusters/b.py": "from kafkaesque_harness.clusters import a\nclass B: ...\n",
    })
    assert _script().measure(root)["file_circles"] == [["clusters.a", "clusters.b"]]
