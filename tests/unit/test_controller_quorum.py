"""The controller quorum's wiring without processes: Raft messages survive the JSON RPC, the
--quorum flag is parsed strictly, and the broker's ControllerClient follows NOT_CONTROLLER hints."""

import asyncio
import json

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.controller_quorum import decode_message, encode_message, parse_quorum
from kafkaesque_harness.clusters.broker.raft import (
    AppendEntries,
    AppendResponse,
    InstallSnapshot,
    RequestVote,
    SnapshotResponse,
    VoteResponse,
)
from kafkaesque_harness.clusters.broker.raft_store import Entry, Snapshot
from kafkaesque_harness.clusters.broker.server import ControllerClient


@pytest.mark.parametrize("message", [
    RequestVote(src=1, dst=2, term=3, last_log_index=7, last_log_term=2, pre_vote=True),
    VoteResponse(src=2, dst=1, term=3, granted=True),
    AppendEntries(src=1, dst=3, term=4, prev_index=5, prev_term=4, leader_commit=5,
                  entries=(Entry(6, 4, None), Entry(7, 4, {"type": "topic", "topic": "t"}))),
    AppendResponse(src=3, dst=1, term=4, success=False, rejected_prev=5, conflict_term=2, conflict_index=3),
    InstallSnapshot(src=1, dst=2, term=4, snapshot=Snapshot(9, 4, {"k": [1, 2]})),
    SnapshotResponse(src=2, dst=1, term=4, match_index=9),
])
def test_raft_messages_survive_the_json_rpc(message):
    assert decode_message(json.loads(json.dumps(encode_message(message)))) == message


def test_quorum_spec_is_parsed_strictly():
    assert parse_quorum("1@127.0.0.1:9000, 2@h:9001,3@h:9002") == {
        1: ("127.0.0.1", 9000), 2: ("h", 9001), 3: ("h", 9002)}
    for bad in ("1@h", "x@h:1", "h:1", "1@:5"):
        with pytest.raises(ValueError, match="ID@HOST:PORT"):
            parse_quorum(bad)


class FakeRpc:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    async def call(self, api, body, timeout=5.0):
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client_with(fakes):
    c = ControllerClient(list(fakes), log=lambda event: None, secret=rpc.new_secret())
    c.clients = dict(fakes)
    return c


def test_a_follower_redirects_to_the_active_controller():
    a, b = ("h", 1), ("h", 2)
    fa = FakeRpc([{"error": rpc.NOT_CONTROLLER, "leader": "h:2"}])
    fb = FakeRpc([{"error": rpc.NONE, "broker_epoch": 7}])
    c = client_with({a: fa, b: fb})
    assert asyncio.run(c.call("broker_registration", {}))["broker_epoch"] == 7
    assert c.current == 1
    assert asyncio.run(c.call("broker_heartbeat", {}))["error"] == rpc.NONE
    assert fa.calls == 1 and fb.calls == 2  # it stays with the active controller


def test_an_unreachable_controller_sends_the_next_call_elsewhere():
    a, b = ("h", 1), ("h", 2)
    c = client_with({a: FakeRpc([rpc.RpcError("refused")]), b: FakeRpc([{"error": rpc.NONE}])})
    with pytest.raises(rpc.RpcError):
        asyncio.run(c.call("fetch_metadata", {}))
    assert asyncio.run(c.call("fetch_metadata", {}))["error"] == rpc.NONE


def test_no_leader_known_is_an_error_the_caller_retries():
    a, b = ("h", 1), ("h", 2)
    c = client_with({a: FakeRpc([{"error": rpc.NOT_CONTROLLER, "leader": None}]), b: FakeRpc([{"error": rpc.NONE}])})
    with pytest.raises(rpc.RpcError, match="not the active controller"):
        asyncio.run(c.call("broker_heartbeat", {}))
    assert c.current == 1


def test_one_controller_is_a_plain_client():
    a = ("h", 1)
    fa = FakeRpc([rpc.RpcError("down"), {"error": rpc.STALE_BROKER_EPOCH}])
    c = client_with({a: fa})
    with pytest.raises(rpc.RpcError):
        asyncio.run(c.call("broker_heartbeat", {}))
    assert asyncio.run(c.call("broker_heartbeat", {}))["error"] == rpc.STALE_BROKER_EPOCH


# --- compaction: three QuorumControllerServers wired together in-process ---------------------

import os  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from kafkaesque_harness.clusters.broker.controller_quorum import QuorumControllerServer  # noqa: E402
from kafkaesque_harness.clusters.broker.metadata import MetadataImage, MetadataLogFile  # noqa: E402

QUORUM = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"


def _args(tmp_path, node, snapshot_every):
    d = tmp_path / f"c{node}"
    return SimpleNamespace(listen=f"127.0.0.1:{node}", node_id=node, quorum=QUORUM, data_dir=str(d),
                           log_file=str(tmp_path / f"c{node}.log"), session_timeout_ms=6000,
                           unclean_leader_election=False, unclean_recovery_strategy="balanced",
                           unclean_recovery_timeout_ms=2000, variant=[], snapshot_every=snapshot_every)


class Quorum:
    """Three controllers whose Raft messages are delivered by hand (a node in `down` gets none)."""

    def __init__(self, tmp_path, snapshot_every=10):
        self.tmp_path, self.snapshot_every = tmp_path, snapshot_every
        self.nodes = {n: self._start(n) for n in (1, 2, 3)}
        self.down: set[int] = set()

    def _start(self, n):
        s = QuorumControllerServer(_args(self.tmp_path, n, self.snapshot_every), rpc.new_secret())
        s._outbox = {p: asyncio.Queue() for p in s.voters if p != n}
        return s

    def restart(self, n):
        self.nodes[n].store.close()
        self.nodes[n] = self._start(n)
        self.nodes[n].process_ready()  # restores its snapshot, as the ticker's first round does

    def deliver(self, rounds=50):
        for _ in range(rounds):
            moved = False
            for n, s in list(self.nodes.items()):
                for p, q in s._outbox.items():
                    batch = []
                    while not q.empty():
                        batch.append(q.get_nowait())
                    if batch and p not in self.down and n not in self.down:
                        self.nodes[p].on_raft({"messages": batch})
                        moved = True
            if not moved:
                return

    def heartbeat(self, leader=1):
        s = self.nodes[leader]
        s.raft.tick(s.raft.now + 200)
        s.process_ready()
        self.deliver()

    def elect(self, n=1):
        self.nodes[n].raft.campaign()
        self.nodes[n].process_ready()
        self.deliver()
        self.heartbeat(n)
        assert self.nodes[n].controller is not None

    def propose_topics(self, names, leader=1):
        s = self.nodes[leader]
        for name in names:
            s.raft.propose_batch([{"type": "topic", "topic": name, "partitions": 1, "replication_factor": 3}])
            s.process_ready()
            self.deliver()
        self.heartbeat(leader)


def _image(s):
    return s.image.to_snapshot()


def test_compaction_past_the_threshold_shrinks_raft_log(tmp_path):
    q = Quorum(tmp_path, snapshot_every=10)
    q.elect(1)
    q.propose_topics([f"t{i}" for i in range(8)])
    path = os.path.join(q.nodes[1].store.path)
    size_before = os.path.getsize(path)
    assert q.nodes[1].base_offset == 0
    q.propose_topics([f"u{i}" for i in range(25)])
    for s in q.nodes.values():
        assert s.base_offset > 0 and s.raft.snapshot.index > 0
        assert len(s.records) <= 20  # the records since the previous snapshot stay in memory
        assert s.end_offset == 33 and len(s.image.topics) == 33 and s.image.offset == 32
    assert len(q.nodes[1].raft.log) <= 11
    assert os.path.getsize(path) < size_before + 25 * 60  # far less than 25 more entries would take
    assert q.nodes[1].dump(True)["metadata_snapshot_offset"] == q.nodes[1].base_offset


def test_a_lagging_follower_catches_up_by_snapshot(tmp_path):
    q = Quorum(tmp_path, snapshot_every=5)
    q.elect(1)
    q.down.add(3)
    q.propose_topics([f"t{i}" for i in range(20)])
    assert q.nodes[3].end_offset == 0 and q.nodes[1].base_offset > 0
    q.down.clear()
    for _ in range(5):
        q.heartbeat(1)
    assert q.nodes[3].raft.snapshot.index > 0
    assert q.nodes[3].end_offset == q.nodes[1].end_offset == 20
    assert _image(q.nodes[3]) == _image(q.nodes[1])
    q.propose_topics(["after"])  # and goes on with records after the snapshot
    assert _image(q.nodes[3]) == _image(q.nodes[1]) and q.nodes[3].end_offset == 21


def test_a_restarted_controller_restores_snapshot_plus_tail(tmp_path):
    q = Quorum(tmp_path, snapshot_every=7)
    q.elect(1)
    q.propose_topics([f"t{i}" for i in range(17)])
    before = _image(q.nodes[2])
    base = q.nodes[2].snapshot_end
    assert 0 < base < 17 and q.nodes[2].end_offset > base  # a snapshot and a tail
    q.restart(2)
    s = q.nodes[2]
    assert s.base_offset == s.snapshot_end == base and s.raft.snapshot.index > 0
    q.heartbeat(1)  # commit index reaches it again; the tail is applied
    assert s.end_offset == 17 and _image(s) == before


def test_a_broker_fetching_from_before_the_snapshot_gets_it(tmp_path):
    q = Quorum(tmp_path, snapshot_every=5)
    q.elect(1)
    q.propose_topics([f"t{i}" for i in range(12)])
    s = q.nodes[1]
    resp = asyncio.run(s.fetch_metadata({"offset": 0}))
    snap = resp["snapshot"]
    assert 0 < s.base_offset < s.snapshot_end  # the records since the previous snapshot are kept
    assert resp["records"] == [] and snap["end_offset"] == s.snapshot_end
    image = MetadataImage.from_snapshot(snap["image"])
    assert image.offset == snap["end_offset"] - 1
    resp = asyncio.run(s.fetch_metadata({"offset": snap["end_offset"]}))
    for o, r in resp["records"]:
        image.apply(o, r)
    assert image.to_snapshot() == _image(s)
    # from after the snapshot: plain records with continuous offsets
    resp = asyncio.run(s.fetch_metadata({"offset": s.base_offset}))
    assert [o for o, _ in resp["records"]] == list(range(s.base_offset, s.end_offset))


def test_snapshot_image_round_trips():
    image = MetadataImage()
    image.apply(0, {"type": "register_broker", "broker_id": 1, "broker_epoch": 0, "incarnation_id": "x",
                    "host": "h", "port": 1, "fenced": True, "clean": False})
    image.apply(1, {"type": "topic", "topic": "t", "partitions": 1, "replication_factor": 1,
                    "configs": {"min.insync.replicas": 1}})
    image.apply(2, {"type": "partition", "topic": "t", "partition": 0, "replicas": [1], "isr": [1],
                    "leader": 1, "leader_epoch": 1, "partition_epoch": 1})
    image.apply(3, {"type": "unclean_recovery", "topic": "t", "partition": 0, "leader": 1, "leader_epoch": 1,
                    "strategy": "balanced", "candidates": {"1": [0, 0]}})
    snap = json.loads(json.dumps(image.to_snapshot()))
    again = MetadataImage.from_snapshot(snap)
    assert again.to_snapshot() == image.to_snapshot() and again.offset == 3
    assert again.partitions[("t", 0)].leader == 1 and again.brokers[1].clean is False


def test_a_broker_metadata_copy_with_a_base_offset_round_trips_and_survives_a_torn_line(tmp_path):
    path = str(tmp_path / "metadata.log")
    f = MetadataLogFile(path)
    f.append([{"type": "topic", "topic": "a", "partitions": 1, "replication_factor": 1}])
    image = f.image()
    image.apply(5, {"type": "topic", "topic": "b", "partitions": 1, "replication_factor": 1})
    f.install_snapshot(image.to_snapshot(), 6)  # the controller's snapshot ends at offset 6
    assert f.base_offset == 6 and f.end_offset == 6 and f.records == []
    assert f.append([{"type": "topic", "topic": "c", "partitions": 1, "replication_factor": 1}]) == 6
    f.close()
    with open(path, "ab") as fh:
        fh.write(b'{"offset":7,"record":{"type":"to')  # torn mid-append
    g = MetadataLogFile(path)
    assert g.base_offset == 6 and g.end_offset == 7
    assert sorted(g.image().topics) == ["a", "b", "c"] and g.image().offset == 6
    assert g.append([{"type": "topic", "topic": "d", "partitions": 1, "replication_factor": 1}]) == 7
    g.compact()
    g.close()
    h = MetadataLogFile(path)
    assert h.base_offset == 8 and h.records == [] and sorted(h.image().topics) == ["a", "b", "c", "d"]
    h.truncate_to(3)  # below the snapshot: the copy starts over
    h.close()
    assert MetadataLogFile(path).end_offset == 0
