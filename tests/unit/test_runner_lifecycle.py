"""The run lifecycle around a fake cluster (the real one is in the integration tests): heal and
teardown always happen, the history is kept, and the verdict says why it is not "valid"."""

import json

import pytest

from kafkaesque_harness.checkers.core import Result
from kafkaesque_harness.clusters.base import ClusterError, PartitionView
from kafkaesque_harness.harness import runner
from kafkaesque_harness.harness.spec import TestSpec
from kafkaesque_harness.history import INFO, OK, Op, read_history


class FakeCluster:
    name = "fake"
    capabilities = None

    def state_dumps_unavailable(self):
        return "a cluster we did not build: the replica invariants do not apply"

    def __init__(self, fail_up=False):
        self.fail_up = fail_up
        self.calls = []
        self.down_nodes = set()

    def up(self):
        self.calls.append("up")
        if self.fail_up:
            raise ClusterError("Port 1 is already in use; pick another --base-port.")
        return "127.0.0.1:1"

    def create_topic(self, *a):
        self.calls.append("create_topic")

    def broker_nodes(self):
        return ["broker-1"]

    def nodes(self):
        return []  # nothing for the capability probe to reach: an empty table

    def controller_nodes(self):
        return []

    def node_name(self, i):
        return f"broker-{i}"

    def partitions(self, topic):
        return [PartitionView(topic, 0, 1, [1], [1])]

    def bootstrap(self):
        return "127.0.0.1:1"

    def wait_ready(self, *a, **k):
        pass

    def is_running(self, node):
        return node not in self.down_nodes

    def process_state(self, node):
        return "down" if node in self.down_nodes else "running"

    def node_id(self, node):
        return int(node.rsplit("-", 1)[1])

    def kill(self, node):
        self.calls.append(f"kill {node}")
        self.down_nodes.add(node)

    def start(self, node):
        self.calls.append(f"start {node}")
        self.down_nodes.discard(node)

    def collect(self, dest):
        self.calls.append("collect")

    def down(self):
        self.calls.append("down")


class EchoClient:
    def __init__(self, explode=False):
        self.explode = explode

    def open(self, bootstrap):
        pass

    def invoke(self, op):
        if self.explode and op.f == "send":
            raise RuntimeError("client bug")
        if op.f == "final-poll":
            return Op(OK, op.f, op.process, [0, 0, []])
        return Op(OK, op.f, op.process, {} if op.f == "poll" else [0, [0, op.value[1]]])

    def close(self):
        pass


class FakeWorkload:
    name = "queue"

    def __init__(self, explode=False, verdict=True):
        self.explode, self.verdict = explode, verdict

    def topics(self, test):
        return [("queue", 1)]

    def new_client(self, test, process=None):
        return EchoClient(self.explode)

    def op_mix(self, test):
        return lambda rng, p: ("send", [0, rng.random()])

    def final_ops(self, test):
        return [("final-poll", [0])]

    def checkers(self, test):
        verdict = self.verdict

        class C:
            name = "fake"

            def check(self, test, history):
                return Result("fake", verdict)
        return [C()]


@pytest.fixture
def patched(monkeypatch):
    state = {"cluster": FakeCluster(), "workload": FakeWorkload()}
    monkeypatch.setattr(runner, "make_cluster", lambda spec, run_dir: state["cluster"])
    monkeypatch.setattr("kafkaesque_harness.workloads.registry.make_workload", lambda name, opts: state["workload"])
    return state


def spec(tmp_path, **kw):
    return TestSpec.make(**{"store": str(tmp_path), "cluster": "local", "time_limit": 0.5, "rate": 50, "concurrency": 2,
                       "recovery_wait": 0, "nemesis": ["kill"], "nemesis_interval": 0.1, **kw})


def test_clean_run_heals_collects_tears_down_and_is_valid(tmp_path, patched):
    code, run_dir = runner.run_test(spec(tmp_path))
    c = patched["cluster"].calls
    assert code == 0
    assert c[0] == "up" and c[-2:] == ["collect", "down"]
    assert any(x.startswith("kill") for x in c) and any(x.startswith("start") for x in c)
    ops = read_history(run_dir / "history.jsonl")
    assert any(o.f == "heal" for o in ops) and any(o.f == "final-poll" for o in ops)
    assert json.loads((run_dir / "results.json").read_text())["valid"] is True


def test_client_exceptions_become_info_ops_not_lost(tmp_path, patched):
    patched["workload"] = FakeWorkload(explode=True)
    code, run_dir = runner.run_test(spec(tmp_path))
    sends = [o for o in read_history(run_dir / "history.jsonl") if o.f == "send" and o.type != "invoke"]
    assert sends and all(o.type == "info" and "client bug" in o.error for o in sends)
    # every info retired its process: no process id is reused after an info
    assert len({o.process for o in sends}) == len(sends)


def test_cluster_failure_is_exit_3_with_history_and_teardown(tmp_path, patched):
    patched["cluster"] = FakeCluster(fail_up=True)
    code, run_dir = runner.run_test(spec(tmp_path))
    res = json.loads((run_dir / "results.json").read_text())
    assert code == 3 and res["valid"] == "unknown" and "already in use" in res["error"]
    assert patched["cluster"].calls[-1] == "down"


def test_ctrl_c_heals_tears_down_and_writes_unknown(tmp_path, patched, monkeypatch):
    def interrupted(self, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner.Run, "_main_phase", interrupted)
    code, run_dir = runner.run_test(spec(tmp_path))
    res = json.loads((run_dir / "results.json").read_text())
    assert code == 130 and res["valid"] == "unknown" and "Ctrl-C" in res["interrupted"]
    assert patched["cluster"].calls[-2:] == ["collect", "down"]


def test_invalid_verdict_is_exit_1(tmp_path, patched):
    patched["workload"] = FakeWorkload(verdict=False)
    code, _ = runner.run_test(spec(tmp_path))
    assert code == 1


class UnreachableClient(EchoClient):
    """The final reads' client cannot reach the healed cluster (kafka-python raises on bootstrap)."""

    def open(self, bootstrap):
        if getattr(self, "final", False):
            raise TimeoutError("Unable to bootstrap from ['127.0.0.1:1']")


def test_a_cluster_that_never_answers_the_final_reads_gives_unknown_not_a_crash(tmp_path, patched, monkeypatch):
    class NoFinalReads(FakeWorkload):
        def new_client(self, test, process=None):
            c = UnreachableClient()
            c.final = self.main_phase_over
            return c

    w = NoFinalReads()
    w.main_phase_over = False
    patched["workload"] = w
    original = runner.Run._recover_and_read

    def recover(self, *a, **k):
        w.main_phase_over = True
        return original(self, *a, **k)
    monkeypatch.setattr(runner.Run, "_recover_and_read", recover)
    monkeypatch.setattr(runner, "FINAL_READ_CONNECT_S", 0.5)
    code, run_dir = runner.run_test(spec(tmp_path))
    res = json.loads((run_dir / "results.json").read_text())
    assert code == 2 and res["valid"] == "unknown"
    assert "did not answer a client" in res["final_reads"] and "Unable to bootstrap" in res["final_reads"]
    assert patched["cluster"].calls[-2:] == ["collect", "down"]
    assert any(o.f == "send" for o in read_history(run_dir / "history.jsonl"))


class SlowStepsNemesis:
    """A driver (like a scenario) whose every step takes 0.3 s: it must stop at the time limit, and the
    heal must wait for the step it is in."""

    name = "slow"
    not_run = ()

    def __init__(self):
        self.events = []

    def schedule(self):
        return []

    def fs(self):
        return {"scenario-slow"}

    def setup(self, cluster, faults):
        pass

    def plans(self, cluster, events):
        return [self._steps()]

    def _steps(self):
        import time

        from kafkaesque_harness.nemesis.plan import PlanStep

        while True:  # the scheduler begins none at or after the time limit
            yield PlanStep("scenario-slow", {}, lambda: (self.events.append(("step", time.monotonic())),
                                                         time.sleep(0.3), self.events.append(("done", time.monotonic()))))

    def teardown(self, cluster):
        import time

        self.events.append(("heal", time.monotonic()))
        return []


def test_a_driving_nemesis_stops_at_the_time_limit_and_the_heal_waits_for_its_step(tmp_path, patched, monkeypatch):
    nem = SlowStepsNemesis()
    monkeypatch.setattr("kafkaesque_harness.nemesis.registry.make_nemesis", lambda names, options: nem)
    code, run_dir = runner.run_test(spec(tmp_path, time_limit=1.0))
    kinds = [k for k, _ in nem.events]
    assert kinds[-1] == "heal" and kinds[-2] == "done"      # the last step ended before the heal began
    steps = [o for o in read_history(run_dir / "history.jsonl") if o.f == "scenario-slow" and o.type == "invoke"]
    assert steps and max(o.time for o in steps) < 1.0e9      # no step started after the time limit
    assert len(steps) <= 4


class TimingOutFinalReads(FakeWorkload):
    """Its first `timeouts` final reads time out (a partition still electing after the heal); the
    count is the workload's, since every try gets a new client."""

    def __init__(self, timeouts):
        super().__init__()
        self.timeouts = timeouts

    def new_client(self, test, process=None):
        workload = self

        class Client(EchoClient):
            def invoke(self, op):
                if op.f == "final-poll" and workload.timeouts > 0:
                    workload.timeouts -= 1
                    return Op(INFO, op.f, op.process, None, error="KafkaTimeoutError: Failed to get offsets")
                return super().invoke(op)
        return Client()


def test_a_final_read_that_times_out_is_tried_again_on_a_fresh_process(tmp_path, patched):
    patched["workload"] = TimingOutFinalReads(timeouts=2)
    _, run_dir = runner.run_test(spec(tmp_path))
    finals = [o for o in read_history(run_dir / "history.jsonl") if o.f == "final-poll"]
    assert [o.type for o in finals] == ["invoke", "info", "invoke", "info", "invoke", "ok"]
    assert len({o.process for o in finals}) == 3  # each try on its own process: an info op ends one


def test_a_final_read_that_never_answers_is_given_up_after_its_deadline(tmp_path, patched, monkeypatch):
    patched["workload"] = TimingOutFinalReads(timeouts=10**9)
    monkeypatch.setattr(runner, "FINAL_READ_RETRY_S", 0.0)
    _, run_dir = runner.run_test(spec(tmp_path))
    finals = [o for o in read_history(run_dir / "history.jsonl") if o.f == "final-poll"]
    assert [o.type for o in finals] == ["invoke", "info"]  # one try, then the deadline had passed


class HangingWorkload(FakeWorkload):
    """Its main-phase clients' first send never returns (librdkafka's commit_transaction after its
    coordinator died: issues 5456, 5511); the final reads' clients answer."""

    def __init__(self):
        super().__init__()
        self.release = __import__("threading").Event()
        self.hung: list[int] = []

    def new_client(self, test, process=None):
        workload = self

        class Client(EchoClient):
            def invoke(self, op):
                if op.f == "send" and not workload.hung:
                    workload.hung.append(op.process)
                    workload.release.wait()  # until the test ends: the call never returns in the run
                    return Op(OK, op.f, op.process, [0, [7, op.value[1]]])
                return super().invoke(op)
        return Client()


def test_a_client_call_that_never_returns_ends_info_and_the_run_heals_reads_and_stores(tmp_path, patched,
                                                                                       monkeypatch):
    w = patched["workload"] = HangingWorkload()
    monkeypatch.setattr(runner, "MAIN_PHASE_GRACE_S", 0.5)
    try:
        code, run_dir = runner.run_test(spec(tmp_path))
    finally:
        w.release.set()  # the abandoned worker returns now; its completion must not reach the history
    ops = read_history(run_dir / "history.jsonl")
    (process,) = w.hung
    of_process = [o for o in ops if o.process == process]
    assert [o.type for o in of_process] == ["invoke", "info"]  # abandoned: never another op of that process
    assert of_process[1].error == runner.ABANDONED
    heal = next(i for i, o in enumerate(ops) if o.f == "heal")
    assert ops.index(of_process[1]) < heal  # recorded at the end of the main phase, before the heal
    assert any(o.f == "final-poll" and o.type == OK for o in ops)
    res = json.loads((run_dir / "results.json").read_text())
    assert code == 0 and res["valid"] is True and res["run"]["abandoned_ops"] == 1
    assert patched["cluster"].calls[-2:] == ["collect", "down"]
    import time

    time.sleep(0.3)  # the released worker had time to try writing its late completion
    assert [o for o in read_history(run_dir / "history.jsonl") if o.process == process] == of_process


def test_a_run_still_short_of_its_heal_after_every_bound_leaves_every_threads_stack(tmp_path, patched, monkeypatch):
    w = patched["workload"] = HangingWorkload()
    monkeypatch.setattr(runner, "MAIN_PHASE_GRACE_S", 1.0)
    monkeypatch.setattr(runner, "NEMESIS_STEP_GRACE_S", 0.0)
    monkeypatch.setattr(runner, "STACK_DUMP_MARGIN_S", -1.2)  # the dump falls inside the main phase
    try:
        _, run_dir = runner.run_test(spec(tmp_path))
    finally:
        w.release.set()
    stacks = (run_dir / "stacks.txt").read_text()
    assert "in wait" in stacks and "in invoke" in stacks and "in _worker" in stacks  # the hung client call


def test_a_run_that_reaches_its_heal_leaves_no_stack_file(tmp_path, patched):
    _, run_dir = runner.run_test(spec(tmp_path))
    assert not (run_dir / "stacks.txt").exists()


def test_a_final_read_whose_client_call_never_returns_ends_info_and_the_run_stores(tmp_path, patched, monkeypatch):
    import threading

    release = threading.Event()

    class HangingFinalReads(FakeWorkload):
        def new_client(self, test, process=None):
            class Client(EchoClient):
                def invoke(self, op):
                    if op.f == "final-poll":
                        release.wait()
                    return super().invoke(op)
            return Client()

    patched["workload"] = HangingFinalReads()
    monkeypatch.setattr(runner, "FINAL_READ_CALL_S", 0.3)
    monkeypatch.setattr(runner, "FINAL_READ_RETRY_S", 0.0)
    try:
        _, run_dir = runner.run_test(spec(tmp_path))
    finally:
        release.set()
    finals = [o for o in read_history(run_dir / "history.jsonl") if o.f == "final-poll"]
    assert [o.type for o in finals] == ["invoke", "info"] and "had not returned after 0.3 s" in finals[1].error
    assert (run_dir / "results.json").exists() and patched["cluster"].calls[-2:] == ["collect", "down"]
