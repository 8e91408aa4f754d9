"""file-corruption: damage the segment files of a running minority of brokers, as Jepsen's 2025 file
nemesis (jepsen.nemesis.file) does to a node's files: flipped bits, a cut tail, a chunk rolled back.

Modes (`--nemesis-option file_mode=...`; `random` draws one per start):

- bitflip: in a chunk of `file_chunk_bytes` at a random place of a segment, flip each bit with
  probability `file_probability` (a bad sector, a DMA error the disk did not see).
- truncate: drop the last `file_truncate_bytes` bytes of a segment (a lost tail).
- rollback: the start copies the last `file_chunk_bytes` of a segment and its length; the stop
  writes those bytes back and cuts the file to that length: the file is as it was at the start,
  everything written since is gone with no checksum to say so (a lost or misdirected write).

The broker keeps running on the damaged file: its in-memory index still names the bytes that were
there. The stop then restarts each damaged broker (`file_restart`: kill, a crash; stop, a controlled
shutdown; none), so it reads its files back at start-up, the one place our broker checks its own
files (the recovery scan: CRC-32C, lengths, offsets). The damage itself is permanent, as Jepsen's
is: a record is healed when its broker runs again on the damaged file (or, with none, at once),
with evidence saying so and whether the broker's log shows its recovery cutting the file.

Targets (Jepsen's nodes-gen rule, a minority over the whole run): a fixed set of floor((n-1)/2)
brokers, chosen at the first start; per partition, at most floor((replicas-1)/2) of them may be
damaged, and never a partition whose whole ISR they are. Only running brokers are hit.

Each damage is one `file-corruption` record in the ledger: detail (mode, file, partition, the byte
range, what was done) and evidence read back from the file after the fsync (the range's sha256
before and after, which must differ). The work on the node is a small Python program made of the
functions below (the node has python3), so the very code the unit tests run on temp files is the
code that runs there.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import inspect
import json
import math
import os
import random
import shlex
import zlib
from typing import Any

from kafkaesque_harness.clusters.remote import RemoteError, RemoteResult
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.history import INFO, Op
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.fault import DATA_DIRS, FaultKind, Option
from kafkaesque_harness.nemesis.targets import running_brokers

NAME = "file-corruption"
MODES = ("bitflip", "truncate", "rollback")
RESTARTS = ("kill", "stop", "none")
RESTART_WAIT_S = 15.0  # how long to wait for the restarted broker's start-up line (its recovery is before it)


# --- what runs on the node (and in the unit tests): stdlib only, each function self-contained -------------
def sha256_range(path: str, start: int, end: int) -> str:
    """sha256 of the bytes in [start, end) as the file has them now (fewer when it is shorter)."""
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.sha256(f.read(max(end - start, 0))).hexdigest()


def flip_bits(path: str, start: int, length: int, probability: float, seed: int) -> dict:
    """Flip each bit of [start, start + length) with `probability`, fsync, and read the range back.
    The gaps between flipped bits are drawn geometrically, so a sparse chunk costs its flips, not its bits."""
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(start)
        original = f.read(length)
        buf = bytearray(original)
        flipped = []
        bits = len(buf) * 8
        i = -1
        while probability > 0:
            i += 1 if probability >= 1 else 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - probability))
            if i >= bits:
                break
            buf[i // 8] ^= 1 << (i % 8)
            flipped.append(start * 8 + i)
        f.seek(start)
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    return {"mode": "bitflip", "file": path, "range": [start, start + len(buf)], "flipped_bits": len(flipped),
            "first_flipped_bits": flipped[:16], "sha256_before": hashlib.sha256(original).hexdigest(),
            "sha256_after": sha256_range(path, start, start + len(buf))}


def truncate_tail(path: str, nbytes: int) -> dict:
    """Cut the last `nbytes` bytes (all of them if the file is shorter), fsync, and read the tail back."""
    size = os.path.getsize(path)
    cut = max(0, min(nbytes, size))
    before = sha256_range(path, size - cut, size)
    with open(path, "r+b") as f:
        f.truncate(size - cut)
        os.fsync(f.fileno())
    return {"mode": "truncate", "file": path, "range": [size - cut, size], "size_before": size,
            "truncated_bytes": cut, "size_after": os.path.getsize(path), "sha256_before": before,
            "sha256_after": sha256_range(path, size - cut, size)}


def snapshot_tail(path: str, nbytes: int) -> dict:
    """The last `nbytes` bytes of the file and its length: what rollback restores later."""
    size = os.path.getsize(path)
    start = max(0, size - nbytes)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(size - start)
    return {"file": path, "offset": start, "size": size, "data": base64.b64encode(data).decode()}


def restore_snapshot(path: str, offset: int, size: int, data: str) -> dict:
    """Write a snapshot's bytes back at its offset and cut the file to its length, fsync, read back."""
    raw = base64.b64decode(data)
    size_before = os.path.getsize(path)
    end = max(size_before, size)
    before = sha256_range(path, offset, end)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(raw)
        f.truncate(size)
        os.fsync(f.fileno())
    return {"mode": "rollback", "file": path, "range": [offset, end], "size_before": size_before,
            "size_after": os.path.getsize(path), "restored_bytes": len(raw), "dropped_bytes": max(size_before - size, 0),
            "sha256_before": before, "sha256_after": sha256_range(path, offset, end)}


def list_segments(data_dir: str, partition: str) -> list:
    """[path, size] of each segment (*.log) of a partition ("queue-0"), oldest first; [] if there is none.
    Our broker keeps its partitions in <data dir>/logs/ (clusters/broker/server.py), Kafka in its log.dirs."""
    for directory in (os.path.join(data_dir, "logs", partition), os.path.join(data_dir, partition)):
        if os.path.isdir(directory):
            names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
            return [[os.path.join(directory, n), os.path.getsize(os.path.join(directory, n))] for n in names]
    return []


_NODE_FUNCTIONS = (sha256_range, flip_bits, truncate_tail, snapshot_tail, restore_snapshot, list_segments)
NODE_PROGRAM = "\n".join(
    ["import base64, hashlib, json, math, os, random, sys"] + [inspect.getsource(f) for f in _NODE_FUNCTIONS] +
    ["call = json.loads(sys.argv[1])", "print(json.dumps(globals()[call['op']](**call['args'])))"])


def run_on_node(cluster, node: str, op: str, **args: Any) -> RemoteResult:
    """Run one of the functions above on the node, through its Remote."""
    return cluster.remote(node).run([cluster.python, "-c", NODE_PROGRAM, json.dumps({"op": op, "args": args})],
                                    timeout=60.0)


def on_node(cluster, node: str, op: str, **args: Any) -> Any:
    """run_on_node's JSON answer; RemoteError (naming the node, the function and the node's error, not
    the whole program) when it failed."""
    r = run_on_node(cluster, node, op, **args)
    if not r.ok:
        raise RemoteError(f"{node}: {op} on the node exited {r.exit}: {(r.err or r.out).strip()[-300:]}")
    return json.loads(r.out.strip().splitlines()[-1])


# --- which files: a minority of the replicas of each partition, never a whole ISR --------------------------
def minority(n: int) -> int:
    return max((n - 1) // 2, 0)


def allowed_replicas(replicas: list[str], isr: list[str], chosen: list[str]) -> list[str]:
    """The replicas of one partition that may be damaged: those in `chosen` (in its order), at most
    floor((replicas - 1) / 2) of them, and none if together they would be the whole ISR."""
    mine = [n for n in chosen if n in replicas][:minority(len(replicas))]
    return [] if isr and set(isr) <= set(mine) else mine


# --- the nemesis ---------------------------------------------------------------------------------------------
class FileCorruptionNemesis(NemesisBase):
    name, start_f, stop_f = NAME, "start-file-corruption", "stop-file-corruption"

    def __init__(self, options: dict[str, Any]):
        self.options = {**KIND.defaults(), **options}
        o = self.options
        self.mode, self.restart = o["file_mode"], o["file_restart"]
        self.probability, self.chunk = float(o["file_probability"]), int(o["file_chunk_bytes"])
        self.truncate_bytes = int(o["file_truncate_bytes"])
        self.topic = o.get("topic", "queue")
        self.rng = random.Random(o.get("seed", 0) + zlib.crc32(NAME.encode()) % 1000)
        self.chosen: list[str] = []  # the minority of brokers this run may damage, fixed at the first start
        self.snapshots: list[dict[str, Any]] = []  # rollback: taken at a start, restored at the stop

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        brokers = cluster.broker_nodes()
        replicas = min((len(p.replicas) for p in cluster.partitions(self.topic)), default=0)
        if minority(len(brokers)) < 1 or minority(replicas) < 1:
            raise NemesisRefused(f"the {NAME} fault damages at most floor((n-1)/2) brokers and replicas of a partition, "
                                 f"which is 0 with {len(brokers)} broker(s) and replication factor {replicas}; use 3 "
                                 f"or more of each, or drop {NAME} from --nemesis")
        probe = run_on_node(cluster, brokers[0], "list_segments", data_dir=cluster.data_dir(brokers[0]),
                            partition=self.topic)
        if not probe.ok:
            raise NemesisRefused(f"the {NAME} fault runs Python on the brokers' nodes, which failed on {brokers[0]} "
                                 f"({(probe.err or probe.out).strip()[-200:]}); drop {NAME} from --nemesis")

    # --- start: damage one segment -----------------------------------------------------------------------
    def invoke(self, cluster, op: Op) -> Op:
        if op.f == self.start_f:
            return Op(INFO, op.f, op.process, self._start(cluster))
        if op.f == self.stop_f:
            return Op(INFO, op.f, op.process, self._stop(cluster))
        raise ValueError(f"{NAME} nemesis cannot do {op.f!r}")

    def _start(self, cluster) -> dict[str, Any]:
        if not self.chosen:
            brokers = sorted(cluster.broker_nodes())
            self.chosen = self.rng.sample(brokers, minority(len(brokers)))
        up = set(running_brokers(cluster))
        candidates = []
        for p in cluster.partitions(self.topic):
            names = [cluster.node_name(r) for r in p.replicas]
            isr = [cluster.node_name(r) for r in p.isr]
            candidates += [(n, p.partition) for n in allowed_replicas(names, isr, self.chosen) if n in up]
        if not candidates:
            return {NAME: [], "skipped": f"none of {', '.join(self.chosen)} is running and may be damaged (a "
                                         "partition's whole ISR, or more than a minority of its replicas)"}
        node, partition = self.rng.choice(sorted(candidates))
        segments = [s for s in on_node(cluster, node, "list_segments", data_dir=cluster.data_dir(node),
                                       partition=f"{self.topic}-{partition}") if s[1] > 0]
        if not segments:
            return {NAME: [], "skipped": f"{node} has no data in {self.topic}-{partition} yet"}
        path, size = self.rng.choice(segments)
        mode = self.rng.choice(MODES) if self.mode == "random" else self.mode
        where = {"node": node, "partition": partition, "file": path, "mode": mode}
        if mode == "rollback":
            snap = on_node(cluster, node, "snapshot_tail", path=path, nbytes=self.chunk)
            self.snapshots.append({**where, **snap})
            return {NAME: [], "snapshot": {**where, "offset": snap["offset"], "size": snap["size"]}}
        if mode == "bitflip":
            start = self.rng.randrange(0, max(size - self.chunk, 0) + 1)
            args = {"path": path, "start": start, "length": self.chunk, "probability": self.probability,
                    "seed": self.rng.randrange(2**31)}
            report = self._damage(cluster, node, where, "flip_bits", args)
        else:
            report = self._damage(cluster, node, where, "truncate_tail", {"path": path, "nbytes": self.truncate_bytes})
        return {NAME: [node], **where, "range": report["range"]}  # the rest is in the record's evidence

    def _damage(self, cluster, node: str, where: dict[str, Any], function: str, args: dict[str, Any]) -> dict[str, Any]:
        """One record: applied when the node's program ran, observed when the range reads back changed."""
        ledger = self.faults.ledger
        detail = {**where, **{k: v for k, v in args.items() if k not in ("path", "data")}}
        with ledger.applying(NAME, [node], NAME, detail) as rec:
            report = on_node(cluster, node, function, **args)
        changed = report["sha256_before"] != report["sha256_after"]
        ledger.observed(rec, changed, report, f"the bytes of {report['file']} {report['range']} read back unchanged "
                                              f"({json.dumps({k: v for k, v in report.items() if 'sha' not in k})})")
        if self.restart == "none":
            ledger.healed(rec, True, {"permanent": "the damage stays on disk; no restart (file_restart=none): the "
                                                   "broker meets it when it reads the file"})
        return report

    # --- stop: roll back what was snapshotted, then restart each damaged broker -----------------------------
    def _stop(self, cluster) -> dict[str, Any]:
        rolled = []
        for snap in self.snapshots:
            where = {k: snap[k] for k in ("node", "partition", "file", "mode")}
            args = {"path": snap["file"], "offset": snap["offset"], "size": snap["size"], "data": snap["data"]}
            try:
                rolled.append(self._damage(cluster, snap["node"], where, "restore_snapshot", args))
            except Exception as e:  # noqa: BLE001 - recorded as not applied; the other snapshots still go
                rolled.append({"file": snap["file"], "error": f"{type(e).__name__}: {e}"[:300]})
        self.snapshots = []
        return {"rolled-back": rolled, "restarted": self._restart_damaged(cluster)}

    def _restart_damaged(self, cluster) -> dict[str, Any]:
        owed: dict[str, list] = {}
        for rec in self.faults.ledger.active((NAME,), by=NAME):
            owed.setdefault(rec.nodes[0], []).append(rec)
        out = {}
        for node, recs in sorted(owed.items()):
            seen = self._log_lines(cluster, node)
            if self.restart == "stop":
                self.faults.stop(node, by=NAME, detail={"why": f"restart after {NAME}"})
            else:
                self.faults.kill(node, by=NAME, detail={"why": f"restart after {NAME}"})
            self.faults.start(node)
            recovery = self._recovery_lines(cluster, node, seen)
            state = cluster.process_state(node)
            files = {r.detail.get("file") for r in recs}
            detected = [line for line in recovery if any(f and f in line for f in files)]
            for rec in recs:
                self.faults.ledger.healed(rec, state == "running", {
                    "permanent": "the damaged bytes stay; the broker was restarted to read its files back",
                    "restart": self.restart, "process": state, "recovery_log": recovery[:10],
                    "detected": bool(detected)}, f"{node}'s process is {state} after its restart, not running")
            out[node] = {"process": state, "detected": bool(detected), "recovery_log": recovery[:5]}
        return out

    def _log_lines(self, cluster, node: str) -> int:
        path = cluster.log_path(node)  # SegmentFiles, checked at set-up
        if not path:
            return -1
        r = cluster.remote(node).run(["sh", "-c", f"wc -l < {shlex.quote(path)}"])
        return int(r.out.strip()) if r.ok and r.out.strip().isdigit() else 0

    def _recovery_lines(self, cluster, node: str, seen: int) -> list[str]:
        """The broker's log lines about its start-up recovery, written after line `seen` (up to its
        broker_started line, which comes once the recovery scan is done)."""
        if seen < 0:
            return []
        path = shlex.quote(cluster.log_path(node))
        lines: list[str] = []

        def started() -> bool:
            nonlocal lines
            r = cluster.remote(node).run(["sh", "-c", f"tail -n +{seen + 1} {path}"])
            lines = r.out.splitlines() if r.ok else []
            return any('"broker_started"' in line for line in lines)

        with contextlib.suppress(WaitTimeout):  # not started in time: what it logged so far is the answer
            wait_until(started, RESTART_WAIT_S, 0.2, f"{node}'s broker_started line")
        return [line[:400] for line in lines if "log-recovery" in line]

    def teardown(self, cluster) -> None:
        """Restart what is still damaged and running on it (snapshots not yet restored are dropped:
        nothing was done with them)."""
        self.snapshots = []
        if self.faults is not None and self.restart != "none":
            self._restart_damaged(cluster)


KIND = FaultKind(
    NAME, "damage segment files of a running minority of brokers (bit flips, a cut tail, a chunk rolled back), "
          "then restart them so they read the files back",
    FileCorruptionNemesis,
    options=(
        Option("file_mode", str, "random", "what to do to a segment", choices=("random", *MODES)),
        Option("file_probability", float, 1e-3, "bitflip: the probability that each bit of the chunk flips",
               low=0, high=1),
        Option("file_chunk_bytes", int, 1024, "bitflip: the chunk's size; rollback: how much of the tail is "
                                              "snapshotted", low=1, high=64 * 1024),
        Option("file_truncate_bytes", int, 512, "truncate: how many bytes to cut off the end", low=1),
        Option("file_restart", str, "kill", "after the damage, at the stop: kill -9 and start the broker (kill), "
                                            "stop it cleanly and start it (stop), or leave it running (none)",
               choices=RESTARTS),
    ),
    abilities=(DATA_DIRS,), capabilities=("sigstop",))
