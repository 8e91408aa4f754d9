"""The one history writer and reader: whole lines, survives SIGKILL, clear errors, pairing."""

import json
import signal
import subprocess
import sys
import time

import pytest

from kafkaesque_harness.history import HistoryFormatError, HistoryWriter, Op, pair_ops, read_history

WRITER = r"""
import sys
from kafkaesque_harness.history import HistoryWriter, Op
w = HistoryWriter(sys.argv[1])
i = 0
while True:
    w.append(Op("invoke", "send", i % 10, [i % 3, i]))
    w.append(Op("ok", "send", i % 10, [i % 3, [i, i]]))
    i += 1
    if i == 200:
        print("ready", flush=True)
"""


def test_history_written_by_a_process_killed_with_sigkill_is_parseable(tmp_path):
    path = tmp_path / "history.jsonl"
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    ops = read_history(path)
    assert len(ops) >= 400
    assert [o.index for o in ops] == list(range(len(ops)))


def test_torn_last_line_is_dropped_but_a_bad_middle_line_is_named(tmp_path):
    path = tmp_path / "h.jsonl"
    good = json.dumps(Op("invoke", "poll", 0, None, index=0).to_dict())
    path.write_text(good + "\n" + '{"index": 1, "type": "ok", "f": "po')
    assert len(read_history(path)) == 1
    path.write_text(good + "\nnot json\n" + good + "\n")
    with pytest.raises(HistoryFormatError, match="line 2: not valid JSON"):
        read_history(path)
    path.write_text('{"type": "done", "f": "x", "process": 0}\n')
    with pytest.raises(HistoryFormatError, match="line 1: type 'done' is not one of"):
        read_history(path)


def test_writer_assigns_indexes_and_times(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as w:
        a = w.append(Op("invoke", "poll", 0, None))
        b = w.append(Op("ok", "poll", 0, {}))
    assert (a.index, b.index) == (0, 1) and 0 < a.time <= b.time
    assert [o.to_dict() for o in read_history(tmp_path / "h.jsonl")] == [a.to_dict(), b.to_dict()]


def test_pairing_treats_unmatched_invocations_as_open():
    h = [Op("invoke", "send", 0, [0, 1]), Op("invoke", "send", 1, [0, 2]), Op("ok", "send", 0, [0, [0, 1]])]
    pairs = pair_ops(h)
    assert pairs[0][1] is h[2] and pairs[1][1] is None


def test_a_history_read_from_disk_is_paired_once_for_every_checker_and_the_report(tmp_path, monkeypatch):
    import kafkaesque_harness.history.ops as ops
    from kafkaesque_harness.harness.runner import analyze_history
    from kafkaesque_harness.results.report import render_report

    w = HistoryWriter(tmp_path / "history.jsonl")
    for p in range(3):
        w.append(Op("invoke", "send", p, [0, p]))
        w.append(Op("ok", "send", p, [0, [p, p]]))
    w.append(Op("invoke", "poll", 0, None))
    w.append(Op("ok", "poll", 0, {0: [[0, 0], [1, 1], [2, 2]]}))
    w.close()
    calls = []
    real = ops._pair
    monkeypatch.setattr(ops, "_pair", lambda h: calls.append(len(h)) or real(h))
    history = read_history(tmp_path / "history.jsonl")
    test = {"workload": "queue", "nemesis": [], "concurrency": 3, "time_limit": 1}
    (tmp_path / "test.json").write_text(json.dumps(test))
    analyze_history(test, history)
    render_report(tmp_path, history)
    assert calls == [8]  # every checker and the report shared one pairing
    assert pair_ops(history) is pair_ops(history)
    history.append(Op("invoke", "send", 4, [0, 9]))  # a changed history is paired again, not served stale
    assert len(pair_ops(history)) == 5 and calls == [8, 9]
    assert pair_ops(list(history)) is not pair_ops(list(history))  # a plain list is paired on every ask
