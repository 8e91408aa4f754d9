"""The broker's Kafka listener and the controller's internal listener under generated input (issue 20
item 5): a real controller and broker process take mutated Kafka requests, random bytes, forged and
malformed internal requests, deep JSON and out-of-range lengths (tests/integration/broker_fuzz.py),
then connections holding the largest requests nearly complete and more connections than the cap.
Afterwards both still live and serve a real client, nothing reached an event loop's exception
handler, each input got at most one log line, and resident memory stayed within the memory pool.

The budget is small, for `make test`; KAFKAESQUE_FUZZ_EXAMPLES / KAFKAESQUE_FUZZ_SECONDS raise it,
and benchmarks/bench_broker_fuzz.py runs it as long as a person likes and prints the figures.
"""

from __future__ import annotations

import pytest

from tests.integration.broker_fuzz import QUEUED_MAX, MiB, budget_from_env, run_fuzz

pytestmark = pytest.mark.integration

EXAMPLES, SECONDS = budget_from_env(400, 60)
BIG_PER_NODE = 16  # x 2 MiB requests: 32 MiB a node would hold without its 8 MiB memory pool
# Beyond the pool: the interpreter's own growth (frames being parsed, buffers read ahead).
SLACK = 16 * MiB


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    target, figures, measures = run_fuzz(tmp_path_factory.mktemp("fuzz"), EXAMPLES, SECONDS, BIG_PER_NODE,
                                         hold_s=3.0)
    try:
        yield target, figures, measures
    finally:
        target.stop()


def test_the_broker_and_the_controller_survive_every_input(fuzzed):
    _, figures, measures = fuzzed
    assert figures.inputs["broker"] > 0 and figures.inputs["controller"] > 0
    assert figures.crashes == []
    assert measures["alive"] == {"controller": True, "broker": True}


def test_a_real_client_still_produces_and_consumes_afterwards(fuzzed):
    assert fuzzed[2]["round_trip"] == [f"r{i}".encode() for i in range(20)]


def test_nothing_reaches_an_event_loops_exception_handler(fuzzed):
    target, _, measures = fuzzed
    assert measures["unhandled"] == {"controller": [], "broker": []}
    for name in ("controller", "broker"):
        out = target.stdout(name)
        assert "Traceback" not in out and "never retrieved" not in out, out[-2000:]


def test_every_input_got_at_most_one_log_line(fuzzed):
    assert fuzzed[2]["most_lines_for_one_input"] == {"controller": 1, "broker": 1}


def test_resident_memory_stays_within_the_memory_pool_while_big_requests_are_held(fuzzed):
    measures = fuzzed[2]
    for name, before in measures["rss_before_hold_kib"].items():
        grown = (measures["rss_while_held_kib"][name] - before) * 1024
        assert grown <= QUEUED_MAX + SLACK, f"{name} grew {grown / MiB:.0f} MiB holding the big requests"


def test_resident_memory_after_the_run_is_back_near_where_it_started(fuzzed):
    measures = fuzzed[2]
    for name, before in measures["rss_before_kib"].items():
        grown = (measures["rss_after_kib"][name] - before) * 1024
        assert grown <= SLACK, f"{name} kept {grown / MiB:.0f} MiB after the run"


def test_connections_beyond_the_cap_are_refused_and_logged(fuzzed):
    assert fuzzed[2]["refused_connection_lines"] >= 2  # one on each node at least
