"""What a broker's or controller's port accepts (issue 20 item 4): the internal requests' tags
(rpc.py), the Kafka header checks (kafka_api.decode_request), the cluster secret's file, and the
listener's caps (listener.py), on a Listener served in-process on loopback.

Every listener scenario also checks the listener's own promises: each refused connection wrote
exactly one line, nothing reached the event loop's exception handler, and once the connections are
gone the memory pool holds nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import stat
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest

from kafkaesque_harness.clusters.broker import kafka_api, rpc
from kafkaesque_harness.clusters.broker.__main__ import build_parser
from kafkaesque_harness.clusters.broker.listener import Limits, Listener

SECRET = "s" * 64


def framed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def untagged(api: str, body: dict, cid: int = 1) -> bytes:
    """An internal request as any Kafka client can write it: no tag."""
    return framed(json.dumps({"api": api, "id": cid, "body": body}).encode())


def tagged_raw(data: bytes, secret: str = SECRET) -> bytes:
    return framed(data + rpc.request_tag(secret, data))


def deep_json(depth: int) -> bytes:
    return b'{"api":"dump_state","id":1,"body":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"


# --- the tag: rpc.open_request -------------------------------------------------------------------
def test_a_tagged_request_opens_to_its_id_api_and_body():
    frame = rpc.encode_request("replica_fetch", 7, {"topic": "t"}, SECRET)
    assert rpc.open_request(frame[4:], SECRET) == (7, "replica_fetch", {"topic": "t"})


@pytest.mark.parametrize("pad", [0, 100_000])  # a small request, and one past the one-shot tag's size
def test_the_tag_is_hmac_sha256_under_the_secret_of_the_domain_and_the_json(pad):
    import hashlib
    import hmac

    frame = rpc.encode_request("raft", 3, {"pad": "x" * pad}, SECRET)
    data = json.dumps({"api": "raft", "id": 3, "body": {"pad": "x" * pad}}, separators=(",", ":")).encode()
    expected = hmac.new(SECRET.encode(), b"kafkaesque-rpc-request\0" + data, hashlib.sha256).digest()
    assert frame == struct.pack(">i", len(data) + 32) + data + expected


@pytest.mark.parametrize("frame", [
    untagged("replica_fetch", {"replica_id": 2, "fetch_offset": 3}),             # the measured attack
    rpc.encode_request("replica_fetch", 1, {"replica_id": 2}, "x" * 64),          # another cluster's secret
    rpc.encode_request("dump_state", 1, {}, SECRET).replace(b"dump_state", b"dump_stat3"),  # tampered
    framed(b"{"),                                                                 # shorter than a tag
])
def test_a_request_without_this_clusters_tag_is_unauthenticated(frame):
    with pytest.raises(rpc.BadFrame, match="unauthenticated internal request"):
        rpc.open_request(frame[4:], SECRET)


def test_deep_json_without_the_tag_is_refused_before_it_is_parsed():
    with pytest.raises(rpc.BadFrame, match="unauthenticated"):
        rpc.open_request(deep_json(100_000), SECRET)


def test_deep_json_with_the_tag_is_refused_as_not_json():
    with pytest.raises(rpc.BadFrame, match=r"not JSON \(RecursionError\)"):
        rpc.open_request(tagged_raw(deep_json(100_000))[4:], SECRET)


@pytest.mark.parametrize(("message", "reason"), [
    (b"[1, 2]", "without a body object"),
    (b'{"api": "dump_state", "id": 1}', "without a body object"),
    (b'{"api": "dump_state", "id": 1, "body": [1]}', "without a body object"),
    (b'{"api": "drop_everything", "id": 1, "body": {}}', "unknown internal api"),
    (b'{"api": 5, "id": 1, "body": {}}', "unknown internal api"),
    (b'{"api": "dump_state", "id": "1", "body": {}}', "without an integer id"),
    (b'{"api": "dump_state", "id": true, "body": {}}', "without an integer id"),
    (b"\xff\xfe not utf-8", "not JSON"),
])
def test_a_tagged_request_of_the_wrong_shape_is_refused_naming_why(message, reason):
    with pytest.raises(rpc.BadFrame, match=reason):
        rpc.open_request(tagged_raw(message)[4:], SECRET)


# --- the Kafka side: kafka_api.decode_request ------------------------------------------------------
@pytest.mark.parametrize(("payload", "reason"), [
    (b"\x00\x12\x00", "shorter than a request header"),
    (struct.pack(">hhi", 57, 0, 1) + b"\x00\x00", "unsupported api 57"),
    (struct.pack(">hhi", 3, 13, 1) + b"\x00\x00", "unsupported api 3 v13"),
    (struct.pack(">hhih", 3, 1, 1, 500) + b"short", "cannot decode api 3 v1"),  # client id past the end
])
def test_a_kafka_request_that_does_not_decode_is_a_bad_request_naming_why(payload, reason):
    with pytest.raises(kafka_api.BadRequest, match=reason):
        kafka_api.decode_request(payload)


# --- the secret ------------------------------------------------------------------------------------
def test_a_secret_file_open_to_other_users_is_refused_with_the_chmod_that_fixes_it(tmp_path):
    path = tmp_path / "cluster.secret"
    path.write_text(SECRET)
    path.chmod(0o644)
    with pytest.raises(rpc.SecretError, match=f"mode 0644.*chmod 600 {path}"):
        rpc.read_secret_file(str(path))


def test_a_secret_file_without_a_long_enough_secret_is_refused(tmp_path):
    path = tmp_path / "cluster.secret"
    rpc.write_secret_file(str(path), "short")
    with pytest.raises(rpc.SecretError, match="no cluster secret of at least 32 characters"):
        rpc.read_secret_file(str(path))


def test_the_secret_file_is_written_private_even_over_a_file_open_to_others(tmp_path):
    path = tmp_path / "cluster.secret"
    path.write_text("old")
    path.chmod(0o644)
    rpc.write_secret_file(str(path), SECRET)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert rpc.read_secret_file(str(path)) == SECRET


@pytest.mark.parametrize("role", ["broker", "controller"])
def test_a_node_without_a_secret_refuses_to_start_in_one_sentence(tmp_path, monkeypatch, capsys, role):
    from kafkaesque_harness.clusters.broker.__main__ import main

    monkeypatch.delenv(rpc.SECRET_ENV, raising=False)
    argv = [role, "--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path)]
    assert main(argv + (["--controller", "127.0.0.1:2"] if role == "broker" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no cluster secret: give --secret-file PATH" in err and rpc.SECRET_ENV in err


def test_a_node_refuses_a_request_cap_larger_than_its_memory_pool(tmp_path, monkeypatch, capsys):
    from kafkaesque_harness.clusters.broker.__main__ import main

    monkeypatch.setenv(rpc.SECRET_ENV, SECRET)
    assert main(["controller", "--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path),
                 "--socket-request-max-bytes", "2048", "--queued-max-request-bytes", "1024"]) == 2
    assert "--queued-max-request-bytes must be at least --socket-request-max-bytes" in capsys.readouterr().err


def test_the_caps_default_to_the_documented_values():
    args = build_parser().parse_args(["broker", "--node-id", "1", "--listen", "h:1", "--data-dir", "d",
                                      "--controller", "h:2"])
    assert Limits.from_args(args) == Limits(request_max_bytes=16 << 20, queued_max_request_bytes=64 << 20,
                                            max_connections=512, connections_max_idle_ms=600_000)


def test_call_sync_without_any_secret_is_an_rpc_error_naming_the_fix(monkeypatch):
    monkeypatch.delenv(rpc.SECRET_ENV, raising=False)
    with pytest.raises(rpc.RpcError, match="no cluster secret"):
        rpc.call_sync("127.0.0.1", 1, "dump_state", {})


# --- the listener, in-process ---------------------------------------------------------------------
class Node:
    """A Listener with handlers that record what reached them; `gate` holds internal requests."""

    def __init__(self, limits: Limits, kafka: bool = True):
        self.lines: list[dict[str, Any]] = []
        self.served: list[str] = []
        self.gate: asyncio.Event | None = None
        self.listener = Listener(limits, SECRET, self.lines.append, self.dispatch,
                                 kafka_decode=kafka_api.decode_request if kafka else None,
                                 kafka_respond=self.respond if kafka else None)
        self.port = 0

    async def dispatch(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        self.served.append(api)
        if self.gate is not None:
            await self.gate.wait()
        if api == "get_replica_log_info":
            return {"error": rpc.NONE, "log_end_offset": body["partition"] + 1}  # KeyError if absent
        return {"error": rpc.NONE}

    async def respond(self, request: kafka_api.KafkaRequest) -> bytes:
        self.served.append(f"kafka {request.correlation_id}")
        if request.correlation_id == 99:
            raise ValueError("a request this broker cannot serve")
        # 1: ready after 2 (answers still go out in order); 3: not ready before the client has left.
        await asyncio.sleep({1: 0.2, 3: 2.0}.get(request.correlation_id, 0))
        return framed(struct.pack(">i", request.correlation_id))

    def refusals(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["event"] == "bad_request"]


def run_node(limits: Limits, scenario: Callable[[Node], Awaitable[None]], kafka: bool = True) -> Node:
    """Run `scenario` against a fresh listener; then check the listener's own promises."""
    loop_errors: list[dict[str, Any]] = []

    async def main() -> Node:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        node = Node(limits, kafka)
        server = await node.listener.start("127.0.0.1", 0)
        node.port = server.sockets[0].getsockname()[1]
        try:
            await scenario(node)
            for _ in range(200):  # the connections' ends are seen by the server a little later
                if node.listener.connections == 0:
                    break
                await asyncio.sleep(0.01)
        finally:
            server.close()
        gc.collect()  # a task whose failure nobody retrieved would report it now
        await asyncio.sleep(0)
        return node

    node = asyncio.run(main())
    assert loop_errors == []
    assert node.listener.connections == 0
    assert node.listener.pool.used == 0
    return node


async def connect(node: Node) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", node.port)


async def closed_without_an_answer(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


async def answer(reader: asyncio.StreamReader) -> dict[str, Any]:
    (n,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    return json.loads(await reader.readexactly(n))


async def send_and_see_closed(node: Node, data: bytes, half_close: bool = False) -> None:
    reader, writer = await connect(node)
    writer.write(data)
    if half_close:
        writer.write_eof()
    assert await closed_without_an_answer(reader)
    writer.close()


SMALL = Limits(request_max_bytes=4096, queued_max_request_bytes=8192, max_connections=4,
               connections_max_idle_ms=60_000, read_timeout_s=5.0, max_in_flight=2)


def test_a_tagged_request_is_served_and_answered_by_id():
    async def scenario(node: Node) -> None:
        reader, writer = await connect(node)
        writer.write(rpc.encode_request("dump_state", 41, {}, SECRET))
        assert await answer(reader) == {"id": 41, "body": {"error": rpc.NONE}}
        writer.close()

    node = run_node(SMALL, scenario)
    assert node.served == ["dump_state"] and node.lines == []


@pytest.mark.parametrize(("data", "reason"), [
    (untagged("replica_fetch", {"replica_id": 2}), "unauthenticated internal request"),
    (tagged_raw(deep_json(100_000)[:3000]), "not JSON"),
    (struct.pack(">i", 5000) + b"{", "request length out of range"),
    (struct.pack(">i", -1), "request length out of range"),
    (struct.pack(">i", 0), "request length out of range"),
    (framed(struct.pack(">hhi", 57, 0, 1) + b"\x00\x00"), "unsupported api 57"),
    (framed(b"\x00\x03\x00"), "shorter than a request header"),
])
def test_a_refused_request_closes_its_connection_unserved_with_one_line(data, reason):
    node = run_node(SMALL, lambda node: send_and_see_closed(node, data))
    assert node.served == []
    (line,) = node.refusals()
    assert reason in line["reason"] and line["action"] == "connection closed"


@pytest.mark.parametrize(("data", "reason"), [
    (struct.pack(">i", 100) + b"\x00\x03", "connection closed inside a request"),
    (b"\x00\x00", "connection closed inside a request length"),
])
def test_a_request_cut_short_by_the_client_is_one_line(data, reason):
    node = run_node(SMALL, lambda node: send_and_see_closed(node, data, half_close=True))
    (line,) = node.refusals()
    assert line["reason"] == reason


def test_a_kafka_frame_on_a_controller_port_is_refused():
    node = run_node(SMALL, lambda node: send_and_see_closed(node, kafka_api_versions(1)), kafka=False)
    (line,) = node.refusals()
    assert "serves the internal RPC only" in line["reason"] and node.served == []


@pytest.mark.parametrize(("body", "error"), [({"topic": "t"}, "KeyError"), ({"partition": "0"}, "TypeError")])
def test_a_handler_that_raises_on_a_request_closes_the_connection_with_one_line(body, error):
    # Authenticated but without its field, or of the wrong type: the request's fault, not the node's.
    data = rpc.encode_request("get_replica_log_info", 1, body, SECRET)
    node = run_node(SMALL, lambda node: send_and_see_closed(node, data + data))
    (line,) = node.refusals()
    assert line["reason"] == "cannot serve internal request get_replica_log_info" and error in line["error"]


def kafka_api_versions(cid: int) -> bytes:
    request = ApiVersionsRequest[0]()
    request.with_header(correlation_id=cid, client_id="c")
    return framed(bytes(request.encode(header=True)))


def test_a_kafka_request_that_failed_unanswered_when_its_client_left_reaches_no_loop_handler():
    async def scenario(node: Node) -> None:
        reader, writer = await connect(node)
        writer.write(kafka_api_versions(3) + kafka_api_versions(99))  # 99 fails while 3 is still being served
        writer.write_eof()  # the client leaves before 3 is answered, so 99's failure is never awaited
        await asyncio.wait_for(reader.read(), 5)
        writer.close()

    node = run_node(SMALL, scenario)  # its checks: no "exception was never retrieved", nothing held
    assert node.served == ["kafka 3", "kafka 99"]


def test_kafka_answers_go_out_in_request_order_though_they_are_ready_out_of_order():
    async def scenario(node: Node) -> None:
        reader, writer = await connect(node)
        for cid in (1, 2):
            writer.write(kafka_api_versions(cid))
        got = [struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), 5))[1] for _ in (1, 2)]
        assert got == [1, 2]
        writer.close()

    node = run_node(SMALL, scenario)
    assert node.served == ["kafka 1", "kafka 2"]


def test_a_body_that_does_not_arrive_in_time_is_refused():
    limits = Limits(request_max_bytes=4096, queued_max_request_bytes=8192, read_timeout_s=0.2)
    node = run_node(limits, lambda node: send_and_see_closed(node, struct.pack(">i", 100) + b"{"))
    (line,) = node.refusals()
    assert line["reason"] == "request not received in time" and line["length"] == 100


def test_an_idle_connection_is_closed_quietly():
    limits = Limits(request_max_bytes=4096, queued_max_request_bytes=8192, connections_max_idle_ms=200)

    async def scenario(node: Node) -> None:
        reader, writer = await connect(node)
        assert await closed_without_an_answer(reader)
        writer.close()

    assert run_node(limits, scenario).lines == []


def test_connections_beyond_the_cap_are_closed_at_once_and_counted_in_one_line():
    async def scenario(node: Node) -> None:
        held = [await connect(node) for _ in range(SMALL.max_connections)]
        writer = held[-1][1]
        writer.write(rpc.encode_request("dump_state", 1, {}, SECRET))
        await answer(held[-1][0])  # every held connection is accepted and served by now
        extra = [await connect(node) for _ in range(3)]
        for reader, _ in extra:
            assert await closed_without_an_answer(reader)
        for _, w in held + extra:
            w.close()

    node = run_node(SMALL, scenario)
    (line,) = [x for x in node.lines if x["event"] == "connections_refused"]  # at most one a second
    assert line["limit"] == SMALL.max_connections and line["flag"] == "--max-connections"
    assert node.refusals() == []


def test_a_full_memory_pool_holds_the_next_request_unread_until_an_answer_frees_room():
    limits = Limits(request_max_bytes=4096, queued_max_request_bytes=4096, max_in_flight=8)
    big = {"pad": "x" * 3000}

    async def scenario(node: Node) -> None:
        node.gate = asyncio.Event()
        r1, w1 = await connect(node)
        r2, w2 = await connect(node)
        w1.write(rpc.encode_request("dump_state", 1, big, SECRET))
        while node.served != ["dump_state"]:
            await asyncio.sleep(0.01)
        w2.write(rpc.encode_request("fetch_metadata", 2, big, SECRET))
        await asyncio.sleep(0.2)
        assert node.served == ["dump_state"]  # the second request does not fit beside the first
        node.gate.set()
        assert (await answer(r1))["id"] == 1 and (await answer(r2))["id"] == 2
        w1.close()
        w2.close()

    assert run_node(limits, scenario).served == ["dump_state", "fetch_metadata"]


def test_one_connection_is_not_read_beyond_its_requests_in_flight():
    async def scenario(node: Node) -> None:
        node.gate = asyncio.Event()
        reader, writer = await connect(node)
        for cid in (1, 2, 3):
            writer.write(rpc.encode_request("dump_state", cid, {}, SECRET))
        while len(node.served) < SMALL.max_in_flight:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert len(node.served) == SMALL.max_in_flight  # the third waits unread
        node.gate.set()
        assert sorted([(await answer(reader))["id"] for _ in (1, 2, 3)]) == [1, 2, 3]
        writer.close()

    assert len(run_node(SMALL, scenario).served) == 3


@settings(max_examples=60, deadline=None)
@given(st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=200).map(framed),
    st.binary(max_size=200).map(lambda b: framed(b"{" + b)),
    st.binary(max_size=200).map(lambda b: framed(b"\x00\x03\x00\x0c" + b)),
    st.integers(min_value=-2**31, max_value=2**31 - 1).map(lambda n: struct.pack(">i", n)),
))
def test_any_bytes_get_at_most_one_line_and_leave_nothing_held(data):
    async def scenario(node: Node) -> None:
        reader, writer = await connect(node)
        writer.write(data)
        writer.write_eof()
        await asyncio.wait_for(reader.read(), 5)  # whatever it answers, it closes the connection
        writer.close()

    assert len(run_node(SMALL, scenario).refusals()) <= 1
