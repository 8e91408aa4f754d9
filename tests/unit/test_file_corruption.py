"""The file-corruption fault (nemesis/kinds/file_corruption.py): its three damages on real temp files, the
program that carries them to a node, the minority rule, and the nemesis's ledger records over a fake cluster
whose nodes are temp directories reached through a real LocalRemote."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from kafkaesque_harness.clusters.base import PartitionView
from kafkaesque_harness.clusters.remote import LocalRemote
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.kinds.file_corruption import (
    NODE_PROGRAM,
    FileCorruptionNemesis,
    allowed_replicas,
    flip_bits,
    restore_snapshot,
    snapshot_tail,
    truncate_tail,
)
from kafkaesque_harness.nemesis.registry import (
    make_nemesis,
    nemesis_names,
    nemesis_options_problems,
    parse_nemesis_options,
)
from tests.unit.fakes import RecordedProcesses, fault_actions


def a_file(tmp_path, size: int, name: str = "00000000000000000000.log") -> tuple[str, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return str(path), data


def differing_bits(a: bytes, b: bytes) -> list[int]:
    return [i * 8 + k for i, (x, y) in enumerate(zip(a, b, strict=True)) for k in range(8) if (x ^ y) >> k & 1]


# --- the damages, on real files ----------------------------------------------------------------------------
def test_bit_flips_follow_the_probability_and_stay_inside_the_chunk(tmp_path):
    path, before = a_file(tmp_path, 80_000)
    start, length, p = 4096, 64 * 1024, 0.01
    report = flip_bits(path, start, length, p, seed=7)
    after = open(path, "rb").read()
    flipped = differing_bits(before, after)
    n = length * 8
    mean, sd = n * p, math.sqrt(n * p * (1 - p))  # binomial: 5243 +- 72
    assert abs(len(flipped) - mean) < 6 * sd
    assert len(flipped) == report["flipped_bits"]
    assert all(start * 8 <= b < (start + length) * 8 for b in flipped)
    assert report["first_flipped_bits"] == flipped[:16]
    assert report["sha256_before"] != report["sha256_after"]


@pytest.mark.parametrize("p,expected", [(0.0, 0), (1.0, 8 * 100)])
def test_probability_zero_flips_nothing_and_one_flips_every_bit(tmp_path, p, expected):
    path, before = a_file(tmp_path, 300)
    report = flip_bits(path, 100, 100, p, seed=1)
    after = open(path, "rb").read()
    assert len(differing_bits(before, after)) == expected == report["flipped_bits"]
    assert (report["sha256_before"] == report["sha256_after"]) == (expected == 0)


def test_a_chunk_past_the_end_flips_only_bytes_the_file_has(tmp_path):
    path, before = a_file(tmp_path, 100)
    report = flip_bits(path, 90, 1024, 1.0, seed=1)
    assert report["range"] == [90, 100] and os.path.getsize(path) == 100
    assert len(differing_bits(before, open(path, "rb").read())) == 80


def test_truncation_cuts_exactly_the_last_n_bytes(tmp_path):
    path, before = a_file(tmp_path, 10_000)
    report = truncate_tail(path, 512)
    assert open(path, "rb").read() == before[:10_000 - 512]
    assert report["truncated_bytes"] == 512 and report["size_after"] == 9488 and report["range"] == [9488, 10_000]
    assert report["sha256_before"] != report["sha256_after"]


def test_truncation_longer_than_the_file_empties_it(tmp_path):
    path, _ = a_file(tmp_path, 100)
    assert truncate_tail(path, 512)["truncated_bytes"] == 100 and os.path.getsize(path) == 0


def test_rollback_restores_the_exact_earlier_bytes_and_length(tmp_path):
    path, before = a_file(tmp_path, 5000)
    snap = snapshot_tail(path, 1024)
    assert (snap["offset"], snap["size"]) == (5000 - 1024, 5000)
    with open(path, "r+b") as f:  # the broker goes on: rewrites inside the chunk, appends after it
        f.seek(4500)
        f.write(b"\0" * 100)
        f.seek(0, 2)
        f.write(os.urandom(700))
    report = restore_snapshot(path, snap["offset"], snap["size"], snap["data"])
    assert open(path, "rb").read() == before
    assert report["dropped_bytes"] == 700 and report["restored_bytes"] == 1024
    assert report["sha256_before"] != report["sha256_after"]


def test_rollback_of_an_unchanged_file_changes_nothing_and_says_so(tmp_path):
    path, before = a_file(tmp_path, 2000)
    snap = snapshot_tail(path, 1024)
    report = restore_snapshot(path, snap["offset"], snap["size"], snap["data"])
    assert open(path, "rb").read() == before and report["sha256_before"] == report["sha256_after"]


def test_the_node_program_runs_the_same_functions_with_plain_python3(tmp_path):
    path, before = a_file(tmp_path, 2000)
    call = {"op": "truncate_tail", "args": {"path": path, "nbytes": 100}}
    r = subprocess.run(["python3", "-c", NODE_PROGRAM, json.dumps(call)], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["size_after"] == 1900 and open(path, "rb").read() == before[:1900]


# --- which replicas may be damaged ------------------------------------------------------------------------------
@pytest.mark.parametrize("replicas,isr,chosen,allowed", [
    (["b1", "b2", "b3"], ["b1", "b2", "b3"], ["b2"], ["b2"]),
    (["b1", "b2", "b3"], ["b1", "b2", "b3"], ["b2", "b3"], ["b2"]),          # a minority of 3 is 1
    (["b1", "b2", "b3", "b4", "b5"], ["b1", "b2"], ["b4", "b5", "b1"], ["b4", "b5"]),
    (["b1", "b2", "b3"], ["b2"], ["b2"], []),                                  # never the whole ISR
    (["b1", "b2", "b3"], ["b1"], ["b4"], []),                                  # not a replica
    (["b1", "b2"], ["b1", "b2"], ["b1"], []),                                  # a minority of 2 is 0
])
def test_at_most_a_minority_of_each_partition_and_never_its_whole_isr(replicas, isr, chosen, allowed):
    assert allowed_replicas(replicas, isr, chosen) == allowed


# --- the registry and the options --------------------------------------------------------------------------------
def test_it_is_a_fault_by_its_file_alone_with_typed_options():
    assert "file-corruption" in nemesis_names()
    options, problems = parse_nemesis_options(["file_mode=truncate", "file_probability=0.5", "file_restart=none"])
    assert options == {"file_mode": "truncate", "file_probability": 0.5, "file_restart": "none"} and not problems
    assert "is not a number" in parse_nemesis_options(["file_probability=lots"])[1][0]
    assert "is not one of random, bitflip" in nemesis_options_problems({"file_mode": "shred"})[0]
    assert "is not within [0, 1]" in nemesis_options_problems({"file_probability": 2.0})[0]
    assert "unknown nemesis option 'file_moed'" in nemesis_options_problems({"file_moed": "x"})[0]
    made = make_nemesis(["file-corruption"], {"file_mode": "rollback"}).parts[0]
    assert made.mode == "rollback" and made.probability == 1e-3  # the declared default


# --- the nemesis over a fake cluster: nodes are temp dirs, the remote is a real local shell ---------------------
class DirCluster(RecordedProcesses):
    name = "dirs"
    python = sys.executable

    def __init__(self, root, isr=(1, 2, 3)):
        super().__init__()
        self.root = root
        self.isr = list(isr)
        for n in self.broker_nodes():
            d = root / n / "data" / "logs" / "queue-0"
            d.mkdir(parents=True)
            (d / "00000000000000000000.log").write_bytes(bytes(range(256)) * 40)
            (root / n / "broker.log").write_text('{"event": "broker_started"}\n')

    def broker_nodes(self):
        return ["broker-1", "broker-2", "broker-3"]

    def controller_nodes(self):
        return []

    def nodes(self):
        return self.broker_nodes()

    def node_name(self, i):
        return f"broker-{i}"

    def node_id(self, n):
        return int(n.rsplit("-", 1)[1])

    def data_dir(self, n):
        return str(self.root / n / "data")

    def log_path(self, n):
        return str(self.root / n / "broker.log")

    def remote(self, n):
        return LocalRemote(n)

    def partitions(self, topic):
        return [PartitionView(topic, 0, 1, [1, 2, 3], self.isr)]

    def start(self, n):
        if n in self.down:
            with open(self.log_path(n), "a") as f:  # what a restarted broker writes: its recovery, then started
                seg = f"{self.data_dir(n)}/logs/queue-0/00000000000000000000.log"
                f.write(json.dumps({"event": "log-recovery-truncated", "file": seg}) + "\n")
                f.write('{"event": "broker_started"}\n')
        super().start(n)


def start_stop(nem, c):
    done = nem.invoke(c, Op(INVOKE, nem.start_f, "nemesis", None))
    stopped = nem.invoke(c, Op(INVOKE, nem.stop_f, "nemesis", None))
    return done.value, stopped.value


@pytest.mark.parametrize("mode", ["bitflip", "truncate"])
def test_each_damage_is_recorded_observed_and_healed_by_a_restart(tmp_path, mode):
    c = DirCluster(tmp_path)
    nem = FileCorruptionNemesis({"file_mode": mode, "file_probability": 0.05, "seed": 3})
    faults = fault_actions(c)
    nem.setup(c, faults)
    started, stopped = start_stop(nem, c)
    (node,) = started["file-corruption"]
    damage = next(r for r in faults.ledger.records() if r.fault == "file-corruption")
    assert damage.nodes == [node] and damage.by == "file-corruption"
    assert damage.detail["mode"] == mode and damage.detail["file"].endswith("queue-0/00000000000000000000.log")
    assert damage.applied and damage.observed and damage.evidence["sha256_before"] != damage.evidence["sha256_after"]
    assert damage.healed and damage.heal_evidence["process"] == "running" and damage.heal_evidence["detected"]
    assert c.events == [("kill", node), ("start", node)]
    kill = next(r for r in faults.ledger.records() if r.fault == "kill")
    assert kill.by == "file-corruption" and kill.healed  # the restart is in the ledger too
    assert stopped["restarted"][node]["detected"]


def test_rollback_snapshots_at_the_start_and_restores_at_the_stop(tmp_path):
    c = DirCluster(tmp_path)
    nem = FileCorruptionNemesis({"file_mode": "rollback", "file_restart": "none", "seed": 1})
    faults = fault_actions(c)
    nem.setup(c, faults)
    started = nem.invoke(c, Op(INVOKE, nem.start_f, "nemesis", None)).value
    seg = started["snapshot"]["file"]
    original = open(seg, "rb").read()
    assert not faults.ledger.records()  # a snapshot changes nothing
    with open(seg, "ab") as f:
        f.write(b"written after the snapshot")
    stopped = nem.invoke(c, Op(INVOKE, nem.stop_f, "nemesis", None)).value
    assert open(seg, "rb").read() == original
    (rec,) = faults.ledger.records()
    assert rec.detail["mode"] == "rollback" and rec.observed and rec.evidence["dropped_bytes"] == 26
    assert rec.healed and "permanent" in rec.heal_evidence and c.events == []  # file_restart=none
    assert stopped["restarted"] == {}


def test_only_the_chosen_minority_is_damaged_and_never_the_whole_isr(tmp_path):
    c = DirCluster(tmp_path)
    nem = FileCorruptionNemesis({"file_mode": "truncate", "file_restart": "none", "seed": 5})
    nem.setup(c, fault_actions(c))
    hit = {n for _ in range(6) for n in start_stop(nem, c)[0]["file-corruption"]}
    assert hit == set(nem.chosen) and len(hit) == 1
    c.isr = [c.node_id(nem.chosen[0])]  # the ISR shrank to the damaged broker: it is left alone
    assert "skipped" in start_stop(nem, c)[0]


def test_a_cluster_too_small_for_a_minority_is_refused_by_name(tmp_path):
    from kafkaesque_harness.nemesis.base import NemesisRefused

    class Two(DirCluster):
        def partitions(self, topic):
            return [PartitionView(topic, 0, 1, [1, 2], [1, 2])]

    c = Two(tmp_path)
    with pytest.raises(NemesisRefused, match="file-corruption fault damages at most"):
        FileCorruptionNemesis({}).setup(c, fault_actions(c))
