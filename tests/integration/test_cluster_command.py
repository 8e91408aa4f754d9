"""`python -m kafkaesque_harness.clusters.broker cluster`: one bootstrap line once every broker serves; clean exit on SIGTERM."""

import signal
import socket
import subprocess
import sys
import time

import pytest
from kafka import KafkaProducer

from kafkaesque_harness.clusters.broker.admin import create_topic

pytestmark = pytest.mark.integration


def free_base_port(count: int) -> int:
    """A base port with `count` consecutive free ports (the command uses base .. base+count-1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        socks = []
        try:
            for i in range(count):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise AssertionError("no run of free ports found")


def test_cluster_command_prints_one_bootstrap_line_and_shuts_down_cleanly(tmp_path):
    base = free_base_port(4)
    p = subprocess.Popen([sys.executable, "-m", "kafkaesque_harness.clusters.broker", "cluster", "--brokers", "3",
                          "--data-dir", str(tmp_path), "--base-port", str(base)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        assert line, p.stderr.read()[-2000:]
        assert line == "bootstrap=" + ",".join(f"127.0.0.1:{base + i}" for i in (1, 2, 3))
        bootstrap = line.split("=", 1)[1]
        create_topic(bootstrap, "t", 3, 3, 2)
        prod = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
        assert prod.send("t", value=b"x", partition=2).get(timeout=20).offset == 0
        prod.close()
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0
        assert time.monotonic() - t0 < 30
        assert p.stdout.read() == ""  # exactly one line on stdout
        assert "Traceback" not in p.stderr.read()
        for i in (1, 2, 3):
            log = (tmp_path / f"broker-{i}" / "broker.log").read_text()
            assert '"event": "controlled_shutdown_done"' in log
    finally:
        if p.poll() is None:
            p.kill()
