"""The distribution as a user gets it (issue 27): the wheel and sdist build, the wheel installs into a fresh
venv with `pip install <wheel>` alone, without the source tree, pulls no heavy extra, and that install runs
`kafkaesque --version`, refuses what needs a missing extra by name, and runs a real 20 s test on the local
cluster from a directory outside the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.history.extras import DIST

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pyspark", "pyarrow", "pyfuse3", "confluent-kafka", "confluent_kafka", "paramiko", "edn-format",
         "edn_format")


def _run(cmd, cwd, timeout=600, check=True):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1 and wheels[0].name.startswith(DIST.replace("-", "_") + "-")
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=out)
    _run([str(venv / "bin" / "pip"), "install", "-q", str(wheels[0])], cwd=out)
    return venv


def test_the_core_install_pulls_no_extra_and_works_outside_the_source_tree(installed, tmp_path):
    frozen = _run([str(installed / "bin" / "pip"), "list", "--format", "json"], cwd=tmp_path).stdout
    names = {p["name"].lower() for p in json.loads(frozen)}
    assert DIST in names and not names & set(HEAVY), names & set(HEAVY)
    where = _run([str(installed / "bin" / "python"), "-c", "import kafkaesque_harness.harness, kafkaesque_harness.clusters.broker as b; "
                  "print(kafkaesque_harness.harness.__file__); print(b.__file__)"], cwd=tmp_path).stdout
    assert all(line.startswith(str(installed)) for line in where.split()), where  # not the repository's code
    size = sum(f.stat().st_size for f in (installed / "lib").rglob("*") if f.is_file())
    print(f"core install: {size / 2**20:.0f} MiB in {len(names)} distributions")  # the note quotes it
    doctor = _run([str(installed / "bin" / "kafkaesque"), "doctor", "--json"], cwd=tmp_path, check=False)
    found = json.loads(doctor.stdout)
    assert doctor.returncode == (0 if found["can_run"] else 3) and found["findings"]
    extras = {f["name"]: f["ok"] for f in found["findings"]}
    assert extras["spark extra"] is False and extras["lossy extra"] is False  # the core has neither
    version = _run([str(installed / "bin" / "kafkaesque"), "--version"], cwd=tmp_path).stdout
    assert version.strip() == f"kafkaesque {_run([str(installed / 'bin' / 'pip'), 'show', DIST], cwd=tmp_path).stdout.split('Version: ')[1].split()[0]}"


def test_a_command_that_needs_a_missing_extra_says_which_and_exits_3(installed, tmp_path):
    (tmp_path / "h.edn").write_text("{:type :invoke, :f :send, :process 0}\n")
    r = _run([str(installed / "bin" / "kafkaesque"), "check", str(tmp_path / "h.edn"), "--format", "edn"],
             cwd=tmp_path, check=False)
    assert r.returncode == 3 and f"needs the edn extra (edn_format is not installed): pip install '{DIST}[edn]'" \
        in " ".join(r.stderr.split()), r.stderr
    r = _run([str(installed / "bin" / "kafkaesque"), "run", "--client", "confluent-kafka", "--time-limit", "5"],
             cwd=tmp_path, check=False)
    assert r.returncode == 3 and f"pip install '{DIST}[confluent]'" in " ".join(r.stderr.split()), r.stderr


def test_the_wheel_puts_one_package_at_the_top_of_site_packages(installed):
    site = next((installed / "lib").glob("python3*/site-packages"))
    ours = [p.name for p in site.iterdir() if p.name.startswith(("kafkaesque", "history", "harness", "results",
                                                                   "nemesis", "checkers", "clusters", "workloads"))]
    assert sorted(n for n in ours if not n.endswith(".dist-info")) == ["kafkaesque_harness"], ours


# A user's project that keeps modules named like our rooms: its own harness/ package at its root and
# history.py and results.py beside its tests. pytest loads our plugin into every test process there.
USER_PROJECT = {
    "pyproject.toml": "[tool.pytest.ini_options]\npythonpath = ['.']\n",  # their harness/ importable under `pytest`
    "harness/__init__.py": "WHOSE = 'the user'\n",
    "tests/history.py": "def events():\n    return ['theirs']\n",
    "tests/results.py": "TOTAL = 3\n",
    "tests/test_own.py": (
        "import harness\nimport history\nimport results\n\n\n"
        "def test_their_own_modules_are_theirs():\n"
        "    assert harness.WHOSE == 'the user' and history.events() == ['theirs'] and results.TOTAL == 3\n\n\n"
        "def test_our_cluster_fixture_resolves_beside_them(kafkaesque_cluster):\n"
        "    assert kafkaesque_cluster.name == 'local'\n"),
    "tests/test_chaos.py": (
        "import pytest\n\n\n"
        "@pytest.mark.kafkaesque(cluster='local', nemesis='kill', time_limit=20)\n"
        "def test_acked_writes_survive_kills(kafkaesque_history):\n"
        "    assert kafkaesque_history.valid is True and kafkaesque_history.ops(f='start-kill')\n"
        "    assert (kafkaesque_history.run_dir / 'report.html').stat().st_size > 100_000\n"),
}


def test_a_user_project_with_its_own_harness_history_and_results_passes_under_both_pytest_commands(installed, tmp_path):
    project = tmp_path / "project"
    for name, text in USER_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    _run([str(installed / "bin" / "pip"), "install", "-q", "pytest>=9,<10"], cwd=tmp_path)  # the user's own
    store = tmp_path / "store"
    common = ["-q", "-p", "no:cacheprovider", f"--kafkaesque-store={store}", "--kafkaesque-cluster=local"]
    # `pytest`: the user's own tests and our fixture beside them, no cluster started
    quick = _run([str(installed / "bin" / "pytest"), *common, "tests/test_own.py"], cwd=project, check=False)
    assert quick.returncode == 0 and "2 passed" in quick.stdout, quick.stdout[-3000:] + quick.stderr[-3000:]
    # `python -m pytest` (the working directory first on the path): everything, a real 20 s local run included
    full = _run([str(installed / "bin" / "python"), "-m", "pytest", *common, "-s"], cwd=project, timeout=400,
                check=False)
    assert full.returncode == 0 and "3 passed" in full.stdout, full.stdout[-3000:] + full.stderr[-3000:]
    (run_dir,) = [p for p in (store / "test_acked_writes_survive_kills").iterdir() if not p.is_symlink()]
    assert json.loads((run_dir / "results.json").read_text())["valid"] is True
