"""The real controller process over the real RPC: registration epochs, fencing on silence, a restart
that keeps everything (the metadata log is durable), and a bad connection that hurts nothing."""

import socket
import subprocess
import time

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.admin import dump_state
from kafkaesque_harness.clusters.broker.local_cluster import controller_argv
from kafkaesque_harness.clusters.ports import free_ports

pytestmark = pytest.mark.integration


def start(port, data_dir):
    return subprocess.Popen(controller_argv("127.0.0.1", port, str(data_dir), ["--session-timeout-ms", "1000"]),
                            stderr=subprocess.PIPE)


def call(port, api, body):
    deadline = time.monotonic() + 10
    while True:
        try:
            return rpc.call_sync("127.0.0.1", port, api, body, timeout=2)
        except rpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def register(port, bid, inc, previous=-1):
    r = call(port, "broker_registration", {"broker_id": bid, "incarnation_id": inc, "host": "127.0.0.1",
                                           "port": 1, "previous_broker_epoch": previous})
    assert r["error"] == rpc.NONE, r
    return r["broker_epoch"]


def heartbeat(port, bid, epoch):
    return call(port, "broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch, "want_fence": False,
                                           "want_shutdown": False, "metadata_offset": 10**6})


def brokers(port):
    return {b["broker_id"]: b for b in dump_state("127.0.0.1", port, include_log=False)["brokers"]}


def test_controller_process_epochs_fencing_restart_and_bad_input(tmp_path):
    port = free_ports(1)[0]
    p = start(port, tmp_path)
    try:
        e1, e2 = register(port, 1, "a"), register(port, 2, "b")
        assert e2 > e1
        for _ in range(3):
            assert heartbeat(port, 1, e1)["is_fenced"] is False
            assert heartbeat(port, 2, e2)["is_fenced"] is False
        # broker 2 goes silent: fenced after the session timeout; broker 1 keeps heartbeating
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not brokers(port)[2]["fenced"]:
            heartbeat(port, 1, e1)
            time.sleep(0.2)
        assert brokers(port)[2]["fenced"] and not brokers(port)[1]["fenced"]
        # a connection speaking something else is closed; the controller keeps serving
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            s.settimeout(5)
            assert s.recv(10) == b""
        before = dump_state("127.0.0.1", port, include_log=False)
        p.terminate()
        assert p.wait(10) == 0
        p = start(port, tmp_path)
        call(port, "dump_state", {"include_log": False})
        after = dump_state("127.0.0.1", port, include_log=False)
        assert after["brokers"] == before["brokers"]
        assert after["metadata_end_offset"] == before["metadata_end_offset"]
        # re-registration after the restart: a higher epoch, recorded as unclean (no marker epoch)
        e2b = register(port, 2, "c")
        assert e2b > e2 and brokers(port)[2]["clean"] is False
    finally:
        p.kill()
        p.wait(10)
