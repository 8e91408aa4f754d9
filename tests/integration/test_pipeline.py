"""The Spark pipeline against the in-process queue checker, run by run, on real Spark.

24 stored runs are written in the store layout with the project's own HistoryWriter (no
cluster needed): clean ones, and ones with each anomaly injected (lost, duplicate,
unexpected, inconsistent offsets, nonmonotonic poll, poll skip, and a key without a final
read: unknown), two with transaction markers (offsets no read returns: consumers jump over them,
a gap and no poll-skip), two of them in a campaign directory. Each gets results.json from
harness.runner.analyze_history, exactly as `kafkaesque run` writes it. One real 5 s run on
the local cluster joins them. Then `kafkaesque pipeline ingest` + `check` (Spark local[2],
and a standalone master with two workers on loopback) must give every run the in-process
checker's verdict and anomaly counts. `summarize` is checked for its shape and for sums
that agree with the checks.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kafkaesque_harness.checkers.queue import ANOMALY_TYPES, SUBSCRIBE_ANOMALY_TYPES
from kafkaesque_harness.harness.runner import analyze_history
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.history import HistoryWriter, Op, read_history
from kafkaesque_harness.results.store import write_json

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The anomalies the pipeline judges: every queue anomaly but the subscribe-mode ones (these runs assign).
JUDGED = tuple(n for n in ANOMALY_TYPES if n not in SUBSCRIBE_ANOMALY_TYPES)
COUNTS = [n.replace("-", "_") for n in JUDGED]
INJECTIONS = ("lost-write", "duplicate", "unexpected", "inconsistent-offsets", "nonmonotonic-poll", "poll-skip",
              "no-final-read")


def kafkaesque(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def write_history(path: Path, seed: int, inject: str | None, nemesis: list[str]) -> None:
    """A queue history shaped like a real one: concurrent sends (ok/fail/info), polls, nemesis windows, final reads.
    A log entry None is a transaction marker: it takes an offset, and no read returns it."""
    rng = random.Random(seed)
    keys, n_pairs = 3, 300
    logs: list[list[int]] = [[] for _ in range(keys)]
    processes = list(range(4))
    next_process = len(processes)
    positions: dict[int, list[int]] = {p: [0] * keys for p in processes}
    failed: dict[int, list[int]] = {k: [] for k in range(keys)}
    value, t = 0, 0
    injected_at = rng.randrange(n_pairs // 3, 2 * n_pairs // 3)
    done = False
    with HistoryWriter(path) as w:
        def op(type_, f, process, v, **kw):
            nonlocal t
            t += rng.randrange(200_000, 3_000_000)
            return w.append(Op(type_, f, process, v, time=t, **kw))

        fault_on = False
        for i in range(n_pairs):
            if nemesis and i % 60 == 30:  # a fault window every 60 pairs, 25 pairs long
                fault_on = True
                op("invoke", f"start-{nemesis[0]}", "nemesis", None)
                op("info", f"start-{nemesis[0]}", "nemesis", {nemesis[0]: ["broker-2"]})
            if fault_on and i % 60 == 55:
                fault_on = False
                op("invoke", f"stop-{nemesis[0]}", "nemesis", None)
                op("info", f"stop-{nemesis[0]}", "nemesis", {"healed": ["broker-2"]})
            slot = rng.randrange(len(processes))
            p = processes[slot]
            here = inject is not None and not done and i >= injected_at  # the first op that can carry it
            if rng.random() < 0.6:
                k = rng.randrange(keys)
                value += 1
                op("invoke", "send", p, [k, value])
                r = rng.random()
                if here and inject == "lost-write":  # acknowledged at an offset, never in the log
                    done = True
                    op("ok", "send", p, [k, [len(logs[k]), value]])
                elif here and inject == "beyond-budget":
                    # Lost, then every ISR member power-cut (beyond the contract: excused), then
                    # lost again after it (not excused): both checkers must count exactly one.
                    done = True
                    op("ok", "send", p, [k, [len(logs[k]), value]])
                    # read before the cut at an offset the cut takes back and later sends reuse: the
                    # reads after it see another value there, which is no anomaly across the cut
                    op("invoke", "poll", p, None)
                    op("ok", "poll", p, {str(k): [[len(logs[k]), value]]})
                    op("invoke", "scenario-lossy-crash", "nemesis", {"node": "broker-1"})
                    op("info", "scenario-lossy-crash", "nemesis", {"lossy-crash": "broker-1",
                                                                   "beyond_fault_budget": True})
                    value += 1
                    op("invoke", "send", p, [k, value])
                    op("ok", "send", p, [k, [len(logs[k]) + 7, value]])
                elif here and inject in ("duplicate", "resent"):  # a retried send stored twice
                    done = True
                    logs[k] += [value, value]
                    # "resent": the client says it sent it in two produce requests (librdkafka's re-send of a
                    # batch answered NOT_LEADER_OR_FOLLOWER): both copies are its own, no duplicate
                    extra = {"extra": {"resent": {"requests": 2, "errors": ["Broker: Not leader"]}}} \
                        if inject == "resent" else {}
                    op("ok", "send", p, [k, [len(logs[k]) - 2, value]], **extra)
                elif here and inject == "unexpected":  # a record nobody sent
                    done = True
                    logs[k] += [value, -value]
                    op("ok", "send", p, [k, [len(logs[k]) - 2, value]])
                elif r < 0.9:
                    logs[k].append(value)
                    op("ok", "send", p, [k, [len(logs[k]) - 1, value]])
                    if inject == "poll-gap" and value % 7 == 0:
                        logs[k].append(None)  # the commit marker of a transaction
                elif r < 0.95:
                    failed[k].append(value)
                    op("fail", "send", p, [k, value], error="NotLeaderForPartitionError")
                else:  # indeterminate: maybe stored; the process is done (Jepsen's rule)
                    if rng.random() < 0.5:
                        logs[k].append(value)
                    op("info", "send", p, [k, value], error="KafkaTimeoutError")
                    processes[slot] = next_process
                    positions[next_process] = [0] * keys
                    next_process += 1
            else:
                op("invoke", "poll", p, None)
                if here and inject == "nonmonotonic-poll" and max(positions[p]) >= 2:
                    done = True
                    positions[p] = [max(0, x - 2) for x in positions[p]]
                if here and inject == "poll-skip" and any(0 < x and x + 2 < len(logs[j])
                                                          for j, x in enumerate(positions[p])):
                    done = True
                    positions[p] = [x + 2 if 0 < x and x + 2 < len(logs[j]) else x
                                    for j, x in enumerate(positions[p])]
                out = {}
                for k in range(keys):
                    start = positions[p][k]
                    recs = [[o, logs[k][o]] for o in range(start, min(start + 5, len(logs[k])))
                            if logs[k][o] is not None]
                    if here and inject == "inconsistent-offsets" and recs and failed[k]:
                        done = True
                        recs[0] = [recs[0][0], failed[k][0]]  # a divergent replica served a failed send's value
                    if recs:
                        out[str(k)] = recs
                        positions[p][k] = recs[-1][0] + 1
                op("ok", "poll", p, out)
        if fault_on:
            op("invoke", "heal", "nemesis", None)
            op("info", "heal", "nemesis", {"errors": []})
        for k in range(keys):
            if inject == "no-final-read" and k == 0:
                continue
            p = next_process + k
            op("invoke", "final-poll", p, [k])
            op("ok", "final-poll", p, [k, len(logs[k]), [[o, v] for o, v in enumerate(logs[k]) if v is not None]])


def write_run(store: Path, name: str, stamp: str, seed: int, inject: str | None, nemesis: list[str],
              variant: str, acks: str, workload_options: dict | None = None) -> Path:
    run = store / name / stamp
    run.mkdir(parents=True)
    spec = TestSpec.make(name=name, nemesis=nemesis, broker_variant=variant, acks=acks, partitions=3, seed=seed,
                    store=str(store), cluster="local", workload_options=workload_options or {})
    test = spec.to_dict()
    write_json(run / "test.json", test)
    write_history(run / "history.jsonl", seed, inject, nemesis)
    results = analyze_history({**test, "run_dir": str(run)}, read_history(run / "history.jsonl"))
    write_json(run / "results.json", results)
    return run


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """24 synthetic runs (two in a campaign dir) and one real local-cluster run."""
    store = tmp_path_factory.mktemp("pipeline") / "store"
    nemeses, variants = (["kill"], ["pause"], ["partition"], []), ("default", "truncate-to-hw")
    kinds = [None, None, None, *INJECTIONS, *INJECTIONS, "poll-gap", "poll-gap", None]  # 3 + 7 + 7 + 3 = 20
    kinds += ["beyond-budget", "lost-write", "duplicate", None, "resent"]  # 25
    runs = []
    for i, inject in enumerate(kinds):
        runs.append(write_run(store, f"synthetic-{i % 3}", f"20260101T0000{i:02d}", seed=100 + i, inject=inject,
                              nemesis=nemeses[i % 4], variant=variants[i % 2], acks="all" if i % 3 else "1"))
    # a consumer group's run (subscribe mode): judged in-process only, so the pipeline leaves it out
    write_run(store, "synthetic-group", "20260101T000099", seed=99, inject="nonmonotonic-poll", nemesis=[],
              variant="default", acks="all", workload_options={"queue_mode": "subscribe"})
    campaign = store / "campaigns" / "diff" / "20260101T000000"
    campaign.mkdir(parents=True)
    write_json(campaign / "campaign.json", {"name": "diff", "runs": [{"run_dir": str(r)} for r in runs[-2:]]})
    r = kafkaesque("run", "--cluster", "local", "--time-limit", "5", "--nemesis", "kill", "--nemesis-interval", "2",
                   "--recovery-wait", "2", "--store", str(store), "--name", "real", "--no-panel")
    assert r.returncode in (0, 1, 2), r.stderr[-3000:]
    return store


@pytest.fixture(scope="module")
def warehouse(store) -> Path:
    wh = store.parent / "warehouse"
    r = kafkaesque("pipeline", "ingest", str(store), "--warehouse", str(wh))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["ingested"] == 27
    return wh


def expected(store: Path) -> dict[str, dict]:
    """run dir -> the in-process queue checker's verdict and counts, from results.json."""
    out = {}
    for res in store.glob("*/*/results.json"):
        if res.parent.parent.name == "synthetic-group":
            continue  # subscribe mode: judged in-process only
        q = json.loads(res.read_text())["checkers"]["queue"]
        v = {True: "true", False: "false"}.get(q["valid"], q["valid"])
        out[str(res.parent.resolve())] = {"verdict": v, **{c: q["stats"][f"{n}-count"]
                                                           for c, n in zip(COUNTS, JUDGED, strict=True)}}
    return out


def spark_rows(check_json: Path) -> dict[str, dict]:
    rows = json.loads(check_json.read_text())["runs"]
    return {r["run_dir"]: {"verdict": r["verdict"], **{c: r[c] for c in COUNTS}} for r in rows}


def test_the_synthetic_runs_cover_every_anomaly_and_clean_runs(store):
    exp = expected(store)
    assert len(exp) == 26
    verdicts = [e["verdict"] for e in exp.values()]
    assert verdicts.count("true") >= 8 and verdicts.count("false") >= 12 and "unknown" in verdicts
    for c in COUNTS:  # each anomaly kind is found in-process in at least two runs: the test compares something
        assert sum(1 for e in exp.values() if e[c] > 0) >= 2, c
    (beyond,) = [json.loads(r.read_text())["checkers"]["queue"] for r in store.glob("*/*/results.json")
                 if "lost-beyond-fault-budget" in json.loads(r.read_text())["checkers"]["queue"]["stats"]]
    assert beyond["stats"]["lost-beyond-fault-budget"] == 1 and beyond["stats"]["lost-write-count"] == 1
    assert beyond["stats"]["inconsistent-offsets-count"] == 0 and beyond["stats"]["nonmonotonic-poll-count"] == 0
    gapped = [q["stats"] for r in store.glob("*/*/results.json")
              if (q := json.loads(r.read_text())["checkers"]["queue"])["stats"].get("poll-gap-count")]
    assert len(gapped) == 2 and all(g["poll-skip-count"] == 0 and g["poll-gap-count"] > 2 for g in gapped)


def test_spark_check_equals_the_in_process_checker_on_every_run(store, warehouse, tmp_path):
    out = tmp_path / "check.json"
    r = kafkaesque("pipeline", "check", "--warehouse", str(warehouse), "--spark-master", "local[2]",
                   "--output", str(out), "--compare")
    assert r.returncode == 1, r.stderr[-3000:]  # some runs are invalid; 4 would mean a disagreement
    assert spark_rows(out) == expected(store)
    assert json.loads(out.read_text())["disagreements"] == []
    assert "Traceback" not in r.stderr and "INFO" not in r.stderr  # Spark's logs went to the log file


def test_campaign_runs_are_partitioned_under_their_campaign(warehouse):
    runs = sorted(p.name for p in (warehouse / "runs" / "campaign=diff-20260101T000000").iterdir())
    assert runs == ["run=synthetic-0-20260101T000024", "run=synthetic-2-20260101T000023"]
    assert (warehouse / "reads" / "campaign=diff-20260101T000000" / runs[0] / "part-0.parquet").is_file()


def test_ingest_again_skips_runs_already_ingested(store, warehouse):
    r = kafkaesque("pipeline", "ingest", str(store), "--warehouse", str(warehouse))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["ingested"] == 0 and summary["skipped"] == 27


# nightly: a second Spark session (about a minute), kept out of `make test` (30-minute budget); the
# differential check above holds the queue checks equal on every run
@pytest.mark.nightly
def test_summarize_aggregates_by_cell_latency_and_recovery(store, warehouse, tmp_path):
    out = tmp_path / "summary.json"
    r = kafkaesque("pipeline", "summarize", "--warehouse", str(warehouse), "--spark-master", "local[2]",
                   "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(out.read_text())
    exp = expected(store)
    assert s["runs"] == 27 and sum(c["runs"] for c in s["cells"]) == 27  # the group run: no Spark verdict
    for c in COUNTS:
        assert sum(cell[c] or 0 for cell in s["cells"]) == sum(e[c] for e in exp.values()), c  # None: no run judged
    phases = {(row["nemesis"], row["f"], row["phase"]) for row in s["latency"]}
    assert ("kill", "send", "fault") in phases and ("kill", "send", "no-fault") in phases
    assert ("none", "send", "fault") not in phases  # no windows without a nemesis
    assert all(row["p50_ms"] <= row["p99_ms"] <= row["max_ms"] for row in s["latency"])
    heals = s["recovery"]["heals"]
    assert heals and all(h["recovery_s"] is None or h["recovery_s"] >= 0 for h in heals)
    assert {c["fault"] for c in s["recovery"]["cells"]} >= {"kill", "pause", "partition"}


@pytest.fixture
def standalone_master(tmp_path):
    """A Spark standalone master and two 1-core workers from pyspark's own distribution, on loopback, started
    and stopped by the documented command (kafkaesque pipeline standalone up|down)."""
    where = tmp_path / "standalone"
    r = kafkaesque("pipeline", "standalone", "up", "--dir", str(where), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    url = r.stdout.strip().splitlines()[-1]
    state = json.loads((where / "standalone.json").read_text())
    assert url.startswith("spark://127.0.0.1:") and set(state["processes"]) == {"master", "worker-1", "worker-2"}
    try:
        yield url
    finally:
        r = kafkaesque("pipeline", "standalone", "down", "--dir", str(where), timeout=120)
        assert r.returncode == 0 and "stopped: master, worker-1, worker-2" in r.stderr, r.stderr[-3000:]
        for p in state["processes"].values():
            assert not Path(f"/proc/{p['pid']}").exists() or \
                b"org.apache.spark" not in Path(f"/proc/{p['pid']}/cmdline").read_bytes()
        assert not (where / "standalone.json").exists()


# nightly: a long end-to-end run, kept out of `make test` (30-minute budget); `make nightly` runs it
@pytest.mark.nightly
def test_spark_check_on_a_standalone_master_gives_the_same_verdicts(store, warehouse, standalone_master, tmp_path):
    out = tmp_path / "check.json"
    r = kafkaesque("pipeline", "check", "--warehouse", str(warehouse), "--spark-master", standalone_master,
                   "--output", str(out), "--compare")
    assert r.returncode == 1, r.stderr[-3000:]
    assert json.loads(out.read_text())["master"] == standalone_master
    assert spark_rows(out) == expected(store)


def test_check_without_java_is_one_sentence_exit_3(warehouse, tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    r = kafkaesque("pipeline", "check", "--warehouse", str(warehouse), env=env)
    assert r.returncode == 3
    assert "Java 17" in r.stderr and "JAVA_HOME" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, words", [
    (["ingest", "/nonexistent/store"], "does not exist"),
    (["check", "--warehouse", "/nonexistent/warehouse"], "no ingested runs"),
])
def test_user_errors_are_one_sentence_exit_3(args, words):
    r = kafkaesque("pipeline", *args)
    assert r.returncode == 3
    assert words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_ingest_of_a_directory_without_runs_names_the_fix(tmp_path):
    r = kafkaesque("pipeline", "ingest", str(tmp_path), "--warehouse", str(tmp_path / "wh"))
    assert r.returncode == 3
    assert "no stored runs" in r.stderr and "test.json" in r.stderr and "Traceback" not in r.stderr
