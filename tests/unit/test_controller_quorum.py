"""The controller quorum's wiring without processes: Raft messages survive the JSON RPC, the
--quorum flag is parsed strictly, and the broker's ControllerClient follows NOT_CONTROLLER hints."""

import asyncio
import json

import pytest

from clusters.broker import rpc
from clusters.broker.controller_quorum import decode_message, encode_message, parse_quorum
from clusters.broker.raft import (
    AppendEntries,
    AppendResponse,
    InstallSnapshot,
    RequestVote,
    SnapshotResponse,
    VoteResponse,
)
from clusters.broker.raft_store import Entry, Snapshot
from clusters.broker.server import ControllerClient


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
    c = ControllerClient(list(fakes), log=lambda event: None)
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
