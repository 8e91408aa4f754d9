"""Earned verdicts (issue 19): every way a run used to say "valid" without proving it tested what it claims,
driven through the real runner, ledger, evidence rules and checkers around a fake cluster and an in-memory
queue; each must end "unknown" with its reason (or be refused before the run, exit 3). The input side
(EDN, corrupt files, option validation, the CLI guard) is tests/unit/test_earned_verdicts_inputs.py; the
checkers' own inputs (state dumps, poll gaps) are tests/unit/test_earned_verdicts_checkers.py. A clean run
of the same fakes is valid, so each test shows the rule can fail and pass."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from kafkaesque_harness.clusters.base import PartitionView
from kafkaesque_harness.clusters.remote import RemoteResult
from kafkaesque_harness.harness import runner
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.history import INFO, NEMESIS, OK, Op, read_history
from tests.unit.fakes import FakeNetwork, ProcessStates

NODES = ["controller-0", "broker-1", "broker-2", "broker-3"]


class Log:
    """The in-memory queue the fake brokers serve: one list per partition, shared by every client."""

    def __init__(self, partitions: int = 2):
        self.records = {k: [] for k in range(partitions)}
        self.lock = threading.Lock()
        self.refuse: set[int] = set()  # partitions whose sends fail (no progress there)


class QueueClient:
    def __init__(self, log: Log):
        self.log, self.seen = log, {}

    def open(self, bootstrap):
        pass

    def invoke(self, op):
        with self.log.lock:
            if op.f == "send":
                key, value = op.value
                if key in self.log.refuse:
                    return Op("fail", op.f, op.process, None, error="NOT_ENOUGH_REPLICAS")
                recs = self.log.records[key]
                recs.append([len(recs), value])
                return Op(OK, op.f, op.process, [key, recs[-1]])
            if op.f == "poll":
                out = {}
                for key, recs in self.log.records.items():
                    start = self.seen.get(key, 0)
                    if recs[start:]:
                        out[str(key)] = [list(r) for r in recs[start:]]
                        self.seen[key] = len(recs)
                return Op(OK, op.f, op.process, out)
            key = op.value[0]
            recs = self.log.records[key]
            return Op(OK, op.f, op.process, [key, len(recs), [list(r) for r in recs]])

    def close(self):
        pass


class QueueWorkload:
    """The queue workload's op schema and its real checkers (progress, queue), over the in-memory log."""

    name = "queue"

    def __init__(self, log: Log):
        self.log = log

    def topics(self, test):
        return [("queue", len(self.log.records))]

    def new_client(self, test, process=None):
        return QueueClient(self.log)

    def op_mix(self, test):
        values = iter(range(1, 10**9))
        return lambda rng, p: ("send", [rng.randrange(len(self.log.records)), next(values)]) \
            if rng.random() < 0.6 else ("poll", None)

    def final_ops(self, test):
        return [("final-poll", [k]) for k in self.log.records]

    def checkers(self, test):
        from kafkaesque_harness.checkers.evidence import ProgressChecker
        from kafkaesque_harness.checkers.queue import QueueChecker

        return [ProgressChecker(len(self.log.records)), QueueChecker()]


class FakeRemote:
    def __init__(self, cluster, node):
        self.cluster, self.node = cluster, node

    def run(self, argv, timeout=30.0, check=False):
        answer = self.cluster.net.run(self.node, argv)
        return answer or RemoteResult(0, "", "")


class FakeCluster(ProcessStates):
    """Four nodes with their own addresses; processes that can be killed, paused and started (unless told
    to ignore one of those), and iptables obeyed by a fake network."""

    name = "fake"
    capabilities = None  # the probe is skipped below (report_capabilities is replaced)

    def isolation_unavailable(self):
        return None  # IsolatedNodes: own addresses, iptables obeyed

    def state_dumps_unavailable(self):
        return "a cluster we did not build: the replica invariants are not applicable"

    def __init__(self, nodes=NODES):
        super().__init__()
        self._nodes = list(nodes)
        self.net = FakeNetwork(self)

    def up(self):
        return "127.0.0.1:1"

    def create_topic(self, *a):
        pass

    def nodes(self):
        return self._nodes

    def broker_nodes(self):
        return [n for n in self._nodes if n.startswith("broker")]

    def controller_nodes(self):
        return [n for n in self._nodes if n.startswith("controller")]

    def node_id(self, n):
        return int(n.rsplit("-", 1)[1])

    def node_name(self, i):
        return f"broker-{i}"

    def address(self, n):
        return (f"10.9.0.{self._nodes.index(n) + 1}", 9092)

    def remote(self, n):
        return FakeRemote(self, n)

    def partitions(self, topic):
        return [PartitionView(topic, 0, 1, [1, 2, 3], [1, 2, 3])]

    def active_controller(self):
        return "controller-0"

    def bootstrap(self):
        return "127.0.0.1:1"

    def wait_ready(self, *a, **k):
        pass

    def is_running(self, n):
        return self.process_state(n) != "down"

    def resume(self, n):
        if self.process.get(n) == "paused":
            self._act("resume", n, "running")

    def start(self, n):
        if self.process.get(n) == "down":
            self._act("start", n, "running")

    def collect(self, dest):
        pass

    def down(self):
        self.calls.append("down")


@pytest.fixture
def world(monkeypatch):
    state = {"cluster": FakeCluster(), "log": Log()}
    monkeypatch.setattr(runner, "make_cluster", lambda spec, run_dir: state["cluster"])
    monkeypatch.setattr("kafkaesque_harness.workloads.registry.make_workload", lambda name, opts: QueueWorkload(state["log"]))
    # The capability probe is a shell script for real nodes (tests/unit/test_capabilities.py); these can do all.
    monkeypatch.setattr("kafkaesque_harness.clusters.capabilities.report_capabilities", lambda cluster, log: {})
    return state


def run(tmp_path, **kw) -> tuple[int, dict]:
    spec = TestSpec.make(**{"store": str(tmp_path), "cluster": "local", "time_limit": 2.0, "rate": 200, "concurrency": 3,
                       "recovery_wait": 0, "nemesis": [], "nemesis_interval": 0.4, "partitions": 2, **kw})
    code, run_dir = runner.run_test(spec, log=lambda m: None)
    return code, json.loads((run_dir / "results.json").read_text()) | {"_dir": str(run_dir)}


def reasons(results: dict) -> str:
    return " | ".join(results.get("unknown_reasons") or [])


# --- the baseline: the same fakes, everything proven -----------------------------------------------------

def test_a_run_that_proves_everything_is_valid(tmp_path, world):
    code, res = run(tmp_path, nemesis=["kill", "partition"])
    assert (code, res["valid"]) == (0, True), reasons(res)
    stats = res["checkers"]["faults"]["stats"]
    assert stats["kill"]["observed"] >= 1 and stats["partition"]["observed"] >= 1
    assert all(row["healed"] == row["applied"] for row in stats.values())


# --- faults that did nothing -----------------------------------------------------------------------------

def test_a_partition_on_a_one_node_cluster_is_refused_by_name_before_the_run(tmp_path, world):
    world["cluster"] = FakeCluster(nodes=["tansu-1"])
    code, res = run(tmp_path, nemesis=["partition"])
    assert code == 3 and "the partition fault needs at least two nodes to cut apart" in res["error"]
    assert not [o for o in read_history(os.path.join(res["_dir"], "history.jsonl")) if o.is_client]


def test_a_kill_that_never_takes_effect_is_unknown(tmp_path, world):
    world["cluster"].ignore = {"kill"}  # the signal is sent; the process lives on
    code, res = run(tmp_path, nemesis=["kill"])
    assert (code, res["valid"]) == (2, "unknown")
    assert "the kill fault was applied" in reasons(res) and "but never seen to take effect" in reasons(res)
    assert "'s process is running, not down" in reasons(res)


def test_a_partition_whose_rules_do_nothing_is_unknown(tmp_path, world):
    world["cluster"].net.broken = set(NODES)  # iptables "succeeds" and drops nothing
    code, res = run(tmp_path, nemesis=["partition"])
    assert res["valid"] == "unknown" and "traffic still flows across the cut" in reasons(res)


def test_a_heal_that_does_not_undo_the_fault_is_unknown(tmp_path, world):
    world["cluster"].ignore = {"resume"}  # SIGCONT "sent", the broker stays stopped
    code, res = run(tmp_path, nemesis=["pause"])
    assert res["valid"] == "unknown"
    assert "the heal of fault #1 (pause broker-" in reasons(res) and "is paused after the heal" in reasons(res)


def test_a_planned_fault_that_never_found_its_target_is_unknown(tmp_path, world):
    # The ISR never shrinks to one member here, so "last-isr-member" has nobody to kill, all run long.
    code, res = run(tmp_path, nemesis=["kill"], nemesis_target="last-isr-member")
    assert res["valid"] == "unknown"
    assert "the kill fault was planned but never applied (no attempt was made" in reasons(res)


def test_a_schedule_that_never_starts_a_planned_fault_is_refused_before_the_run(tmp_path, world):
    code, res = run(tmp_path, nemesis=["kill", "pause", "partition"], time_limit=2.0, nemesis_interval=1.0)
    assert code == 3 and "would never run; raise --time-limit or lower --nemesis-interval" in res["error"]


def test_a_nemesis_thread_that_dies_is_unknown(tmp_path, world, monkeypatch):
    def dies(self, *a, **k):
        raise RuntimeError("the nemesis lost its cluster handle")
    monkeypatch.setattr(runner.Run, "_nemesis_loop", dies)
    code, res = run(tmp_path, nemesis=["kill"])
    assert res["valid"] == "unknown" and "the nemesis thread died (RuntimeError: the nemesis lost" in reasons(res)


def test_a_worker_thread_that_dies_is_unknown(tmp_path, world, monkeypatch):
    original = runner.Run._worker

    def worker(self, w, *a):
        if w == 1:
            raise KeyError("value")
        return original(self, w, *a)
    monkeypatch.setattr(runner.Run, "_worker", worker)
    code, res = run(tmp_path)
    assert res["valid"] == "unknown" and "the worker-1 thread died (KeyError: 'value')" in reasons(res)


def test_a_failed_final_heal_is_unknown(tmp_path, world, monkeypatch):
    from kafkaesque_harness.nemesis.actions import FaultActions

    def heal_everything(self):
        return ["start broker-2: RemoteError: broker-2: `start` exited 1"]
    monkeypatch.setattr(FaultActions, "heal_everything", heal_everything)
    code, res = run(tmp_path, nemesis=["kill"])
    assert res["valid"] == "unknown" and "the final heal failed: start broker-2" in reasons(res)


# --- no progress -----------------------------------------------------------------------------------------

def test_a_partition_that_acknowledged_nothing_is_unknown(tmp_path, world):
    world["log"].refuse = {1}
    code, res = run(tmp_path)
    assert res["valid"] == "unknown" and "partition 1 acknowledged no send in the whole run" in reasons(res)


def test_a_torn_last_history_line_is_unknown_on_analyze(tmp_path, world):
    code, res = run(tmp_path)
    assert res["valid"] is True
    run_dir = res["_dir"]
    with open(os.path.join(run_dir, "history.jsonl"), "ab") as f:
        f.write(b'{"index": 999999, "type": "ok", "f": "send", "proc')  # the writer died mid-line
    test = json.loads(open(os.path.join(run_dir, "test.json")).read())
    again = runner.analyze_run(runner.Path(run_dir), test, json.loads(open(os.path.join(run_dir, "results.json")).read()))
    assert again["valid"] == "unknown" and "the history's last line was cut off mid-write" in reasons(again)


def test_analyze_of_a_run_without_its_results_is_unknown(tmp_path, world):
    code, res = run(tmp_path)
    run_dir = runner.Path(res["_dir"])
    (run_dir / "results.json").unlink()  # the harness died before writing it
    again = runner.analyze_run(run_dir, json.loads((run_dir / "test.json").read_text()))
    assert again["valid"] == "unknown" and "the run left no record of how its harness threads ended" in reasons(again)


def test_analyze_gives_a_stored_run_the_verdict_the_run_gave(tmp_path, world):
    world["cluster"].ignore = {"kill"}
    _, res = run(tmp_path, nemesis=["kill"])
    run_dir = runner.Path(res["_dir"])
    again = runner.analyze_run(run_dir, json.loads((run_dir / "test.json").read_text()),
                               json.loads((run_dir / "results.json").read_text()))
    assert again["valid"] == res["valid"] == "unknown" and again["unknown_reasons"] == res["unknown_reasons"]


# --- signals ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_heal_keep_the_history_and_write_unknown(tmp_path, world, sig, foreground_signals):
    threading.Timer(1.0, lambda: os.kill(os.getpid(), sig)).start()
    code, res = run(tmp_path, nemesis=["kill", "pause"], time_limit=30.0, nemesis_interval=0.2)
    name = signal.Signals(sig).name
    assert (code, res["valid"]) == (130, "unknown") and res["interrupted"] == f"interrupted by {name}"
    assert f"the run was interrupted by {name}" in reasons(res)
    history = read_history(os.path.join(res["_dir"], "history.jsonl"))
    assert history[-1].time < 10e9 and any(o.f == "heal" and o.type == INFO for o in history)
    assert not world["cluster"].process  # every kill and pause undone
    assert world["cluster"].calls[-1] == "down" and signal.getsignal(sig) is foreground_signals[sig]


def test_a_sighup_ignored_when_the_run_began_stays_ignored(tmp_path, world, foreground_signals):
    """`nohup kafkaesque run ...`: closing the terminal must not end the run."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGHUP)).start()
    code, res = run(tmp_path, time_limit=2.0)
    assert (code, res["valid"]) == (0, True) and "interrupted" not in res, reasons(res)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


# --- scenarios -------------------------------------------------------------------------------------------

def test_a_scenario_that_stalls_is_unknown(tmp_path, world):
    # The fake's ISR never changes: "wait not-in-isr" can never hold.
    code, res = run(tmp_path, nemesis=["scenario:unclean-election"], nemesis_interval=0.1, time_limit=8.0)
    assert res["valid"] == "unknown"
    assert "scenario unclean-election stopped at step 5 (wait S not-in-isr" in reasons(res)
    assert "not-in-isr S not reached" in reasons(res)


def test_the_evidence_rules_read_a_finished_scenario_as_proven():
    from kafkaesque_harness.checkers.evidence import FaultEvidenceChecker
    from kafkaesque_harness.nemesis.ledger import FaultLedger

    ledger = FaultLedger()
    rec = ledger.request("kill", ["broker-1"], "scenario:t")
    ledger.applied(rec)
    ledger.observed(rec, True, {"process": "down"})
    kill = {"scenario": "t", "node": "L", "step": 1, "steps": 2}
    start = {"scenario": "t", "node": "L", "step": 2, "steps": 2}
    history = [Op("invoke", "scenario-kill", NEMESIS, kill), Op(INFO, "scenario-kill", NEMESIS,
                                                               {"faults": ledger.changes()})]
    ledger.healed(rec, True, {"process": "running"})
    history += [Op("invoke", "scenario-start", NEMESIS, start), Op(INFO, "scenario-start", NEMESIS,
                                                                 {"faults": ledger.changes()}),
                Op("invoke", "heal", NEMESIS, None), Op(INFO, "heal", NEMESIS, {"errors": []})]
    test = {"nemesis": ["scenario:t"]}
    assert FaultEvidenceChecker().check(test, history).valid is True
    unfinished = history[:2] + history[4:]  # the run ended before the scenario's last step
    r = FaultEvidenceChecker().check(test, unfinished)
    assert r.valid == "unknown" and any("ran 1 of its 2 steps" in x for x in r.unknown_reasons)
    r = FaultEvidenceChecker().check(test, history[:4])  # no final heal
    assert r.valid == "unknown" and any("the history has no final heal" in x for x in r.unknown_reasons)


def test_a_run_from_before_the_ledger_cannot_show_its_faults_took_effect():
    from kafkaesque_harness.checkers.evidence import FaultEvidenceChecker

    history = [Op("invoke", "start-kill", NEMESIS, None), Op(INFO, "start-kill", NEMESIS, {"kill": ["broker-1"]}),
               Op("invoke", "heal", NEMESIS, None), Op(INFO, "heal", NEMESIS, {"errors": []})]  # no "faults" key
    r = FaultEvidenceChecker().check({"nemesis": ["kill"]}, history)
    assert r.valid == "unknown" and "carries no fault records" in r.unknown_reasons[0]


def test_an_invalid_run_stays_invalid_with_its_missing_proofs_beside_it(tmp_path, world, monkeypatch):
    from kafkaesque_harness.checkers.evidence import decide

    out = decide({"valid": False, "unknown_reasons": ["queue: partitions [1] have acknowledged sends but no "
                                                      "complete final read"]}, {"thread_failures": {"worker-2": "X"}})
    assert out["valid"] is False and len(out["unknown_reasons"]) == 2


def test_every_reason_in_the_catalogue_is_one_sentence_with_an_example():
    from kafkaesque_harness.checkers.reasons import REASONS

    for code, r in REASONS.items():
        sentence = r.say(**r.example)
        assert sentence and not sentence.endswith(".") and "{" not in sentence, code
