"""The clock faults (clock-jump, clock-strobe) write the real preload's control file through a node's Remote;
processes under the preload see the jump or the strobe, and stop and teardown put the real clock back."""

import json
import subprocess
import sys
import time

import pytest

from kafkaesque_harness.clusters import clock_preload
from kafkaesque_harness.clusters.remote import LocalRemote
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.registry import make_nemesis
from tests.unit.fakes import fault_actions

NODES = ["controller-0", "broker-1", "broker-2", "broker-3"]


class ClockFileCluster:
    """Nodes whose only part here is a clock control file on this machine (what LocalCluster gives)."""

    name = "local"
    capabilities = None

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self._clock_lib = str(clock_preload.build_preload(tmp_path / "cache"))
        self._remote = LocalRemote()
        for n in NODES:
            (tmp_path / n).write_text(clock_preload.offset_file_text(0))

    def nodes(self):
        return NODES

    def broker_nodes(self):
        return NODES[1:]

    def controller_nodes(self):
        return NODES[:1]

    def remote(self, node):
        return self._remote

    def clock_file(self, node):
        return str(self.dir / node)

    def clock_unavailable(self):
        return None  # ClockControl: the preload was built above

    def wall_clock_of(self, node) -> float:
        env = {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(self._clock_lib, self.clock_file(node))}
        return int(subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, check=True).stdout)

    def dump_state(self, node, include_log=True):
        """What a node's state dump says of its clock: time_ms from a process running under its preload
        (the fault's observation reads exactly this)."""
        env = {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(self._clock_lib, self.clock_file(node))}
        out = subprocess.run([sys.executable, "-c", "import time; print(int(time.time() * 1000))"], env=env,
                             capture_output=True, text=True, check=True).stdout
        return {"time_ms": int(out)}


def _op(f):
    return Op(INVOKE, f, "nemesis", None)


def test_clock_jump_steps_one_node_an_hour_and_the_stop_steps_it_back(tmp_path):
    c = ClockFileCluster(tmp_path)
    nem = make_nemesis(["clock-jump"], {"seed": 4, "target": "random-node"})
    nem.setup(c, fault_actions(c))
    done = nem.invoke(c, _op("start-clock-jump"))
    ((node, jump),) = done.value["clock-jump-s"].items()
    assert abs(jump) == 3600 and node in c.broker_nodes()
    (rec,) = nem.faults.ledger.records()  # seen by the node's own clock, not assumed from the write
    assert rec.applied and rec.observed and abs(rec.evidence["clock_offset_s"][0] - jump) < 1
    assert abs(c.wall_clock_of(node) - time.time() - jump) < 5
    assert abs(c.wall_clock_of(NODES[0]) - time.time()) < 5  # only the target jumped
    stopped = nem.invoke(c, _op("stop-clock-jump"))
    assert stopped.value == {"reset": [node]}
    assert abs(c.wall_clock_of(node) - time.time()) < 5
    assert rec.healed and all(abs(x) < 1 for x in rec.heal_evidence["clock_offset_s"])


def test_clock_strobe_makes_the_target_alternate_until_teardown(tmp_path):
    c = ClockFileCluster(tmp_path)
    nem = make_nemesis(["clock-strobe"], {"seed": 1, "target": "all"})
    nem.setup(c, fault_actions(c))
    done = nem.invoke(c, _op("start-clock-strobe"))
    assert done.value["clock-strobe"]["nodes"] == c.broker_nodes()
    node = c.broker_nodes()[0]
    assert open(c.clock_file(node)).read().startswith("strobe 60000000000 50000000")
    env = {"PATH": "/usr/bin:/bin", **clock_preload.preload_env(c._clock_lib, c.clock_file(node))}
    probe = ("import json, time\nbase = time.time() - time.monotonic()\nseen = set()\n"
             "deadline = time.monotonic() + 15\n"
             "while len(seen) < 2 and time.monotonic() < deadline:\n"
             "    seen.add(round(time.time() - time.monotonic() - base)); time.sleep(0.005)\n"
             "print(json.dumps(sorted(seen)))\n")
    seen = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                               check=True, timeout=30).stdout)
    assert len(seen) == 2 and seen[1] - seen[0] == 60
    assert all(r.observed for r in nem.faults.ledger.records())  # each node's clock was seen 60 s off
    assert nem.teardown(c) == []
    for n in c.broker_nodes():
        assert open(c.clock_file(n)).read() == "0\n"


def test_teardown_resets_a_node_whose_clock_write_failed_half_way(tmp_path):
    c = ClockFileCluster(tmp_path)
    nem = make_nemesis(["clock-jump"], {"seed": 2, "target": "all"})
    nem.setup(c, fault_actions(c))
    real_put = c._remote.put
    calls = []

    def put_failing_on_the_second_node(path, data):
        calls.append(path)
        real_put(path, data)
        if len(calls) == 2:
            raise OSError("disk full")

    c._remote.put = put_failing_on_the_second_node
    with pytest.raises(OSError):
        nem.invoke(c, _op("start-clock-jump"))
    c._remote.put = real_put
    assert nem.teardown(c) == []
    for n in NODES:
        assert open(c.clock_file(n)).read() == "0\n"


def test_clock_faults_refuse_nodes_without_the_preload(tmp_path):
    class NoPreload:
        name = "external"
        capabilities = None

    for name in ("clock-jump", "clock-strobe"):
        with pytest.raises(NemesisRefused, match=f"the {name} fault needs nodes started with the clock preload"):
            make_nemesis([name], {}).setup(NoPreload(), fault_actions(NoPreload()))


def test_cleanup_of_a_leftover_node_puts_its_clock_file_back_to_the_real_time(tmp_path):
    from kafkaesque_harness.clusters.local import _reset_clock_file

    clock = tmp_path / "clock-offset"
    clock.write_text(clock_preload.strobe_file_text(10**9, 10**7))
    # what cleanup_leftovers reads from /proc/<pid>/environ of a node a crashed run left behind
    environ = f"PATH=/bin\0KAFKAESQUE_OWNER=run1\0{clock_preload.CLOCK_FILE_ENV}={clock}\0".encode()
    _reset_clock_file(environ)
    assert clock.read_text() == "0\n"
    _reset_clock_file(f"{clock_preload.CLOCK_FILE_ENV}={tmp_path}/gone/clock-offset\0".encode())
    assert not (tmp_path / "gone").exists()  # a removed run dir is not recreated


class LaggingClockCluster(ClockFileCluster):
    """A node whose clock follows its control file, except that after a reset its first `stale_reads`
    readings still show the old offset (the preload re-reads the file lazily), or every reading does when
    `stuck`."""

    def __init__(self, tmp_path, stuck=False):
        super().__init__(tmp_path)
        self.stale_reads, self.stuck, self.last_s = 0, stuck, 0.0

    def dump_state(self, node, include_log=True):
        written_s = int((self.dir / node).read_text().split()[0]) / 1e9
        if written_s == 0 and (self.stale_reads or self.stuck):
            self.stale_reads = max(0, self.stale_reads - 1)
            written_s = self.last_s
        self.last_s = written_s
        return {"time_ms": int((time.time() + written_s) * 1000)}


@pytest.mark.parametrize("stuck", [False, True])
def test_a_clock_heal_is_seen_once_the_readings_settle_and_not_on_a_stale_first_one(tmp_path, stuck):
    cluster = LaggingClockCluster(tmp_path, stuck=stuck)
    actions = fault_actions(cluster)
    rec = actions.set_clock("broker-1", "clock", clock_preload.offset_file_text(30 * 10**9), (30.0,), "clock")
    assert rec.observed
    cluster.stale_reads = 1  # the first reading after the reset is still 30 s off
    (healed,) = actions.reset_clock("broker-1")
    assert healed.healed is (not stuck)
    readings = healed.heal_evidence["clock_offset_s"]
    assert abs(readings[0] - 30.0) < 1  # the stale reading is kept as evidence
    assert stuck or all(abs(r) < 0.2 for r in readings[-3:])


class SlowDumpCluster(ClockFileCluster):
    """A node whose state dump takes `delay_s`, read at the start of it (a docker exec into a loaded node:
    the node's clock is read early and the answer comes back late), so a reading of a clock at offset 0
    shows about -delay_s/2."""

    def __init__(self, tmp_path, delay_s):
        super().__init__(tmp_path)
        self.delay_s = delay_s

    def dump_state(self, node, include_log=True):
        written_s = int((self.dir / node).read_text().split()[0]) / 1e9
        now = time.time()
        time.sleep(self.delay_s)
        return {"time_ms": int((now + written_s) * 1000)}


@pytest.mark.parametrize("delay_s, healed", [(0.7, True), (2.5, False)])
def test_a_clock_reading_counts_within_its_own_round_trip_and_a_too_slow_one_proves_nothing(tmp_path, delay_s,
                                                                                               healed):
    cluster = SlowDumpCluster(tmp_path, 0.0)
    actions = fault_actions(cluster)
    assert actions.set_clock("broker-1", "clock", clock_preload.offset_file_text(30 * 10**9), (30.0,), "clock").observed
    cluster.delay_s = delay_s  # the heal's readings are off by -delay_s/2, beyond CLOCK_TOLERANCE_S
    (rec,) = actions.reset_clock("broker-1")
    readings, errors = rec.heal_evidence["clock_offset_s"], rec.heal_evidence["error_s"]
    assert all(r < -0.25 for r in readings) and all(e >= delay_s / 2 - 0.05 for e in errors)
    assert rec.healed is healed
