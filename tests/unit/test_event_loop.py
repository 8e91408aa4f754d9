"""Which event loop a node serves on (clusters/broker/listener.py event_loop_runner, --event-loop)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from kafkaesque_harness.clusters.broker.__main__ import build_parser
from kafkaesque_harness.clusters.broker.listener import event_loop_runner


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def test_auto_and_uvloop_serve_on_uvloop_when_it_is_installed():
    pytest.importorskip("uvloop")  # a dependency on Linux (pyproject.toml); the node image installs it too
    assert event_loop_runner("auto")(_loop_module()) == "uvloop"
    assert event_loop_runner("uvloop")(_loop_module()) == "uvloop"


def test_asyncio_serves_on_asyncios_own_loop():
    assert event_loop_runner("asyncio")(_loop_module()) == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert event_loop_runner("auto")(_loop_module()) == "asyncio"
    with pytest.raises(ValueError, match="--event-loop uvloop needs the uvloop package.*--event-loop asyncio"):
        event_loop_runner("uvloop")


def test_the_flag_defaults_to_auto_for_both_roles():
    for role in ("broker", "controller"):
        args = build_parser().parse_args([role, "--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", "/d",
                                          *(["--controller", "127.0.0.1:2"] if role == "broker" else [])])
        assert args.event_loop == "auto"
