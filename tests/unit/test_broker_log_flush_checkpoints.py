"""Flush policies and the flush log, atomic checkpoints, the clean-shutdown marker, LogManager."""

from __future__ import annotations

import json
import os

import pytest

from kafkaesque_harness.clusters.broker.log import (
    CheckpointError,
    FlushMode,
    FlushPolicy,
    LogManager,
    atomic_write,
    build_batch,
    last_synced_lengths,
    parse_flush_policy,
    read_hwm_checkpoint,
    take_clean_shutdown,
    write_clean_shutdown,
    write_hwm_checkpoint,
)
from kafkaesque_harness.clusters.broker.log import checkpoints as checkpoints_mod


def flush_lines(data_dir) -> list[dict]:
    with open(os.path.join(data_dir, "flush.log")) as fh:
        return [json.loads(ln) for ln in fh if ln.strip()]


def batch(*values: bytes) -> bytes:
    return build_batch(list(values))


# ---------------------------------------------------------------- policy parsing


@pytest.mark.parametrize(
    "text,policy",
    [
        ("every-write", FlushPolicy(FlushMode.EVERY_WRITE)),
        ("never", FlushPolicy(FlushMode.NEVER)),
        ("every-N-records:100", FlushPolicy(FlushMode.EVERY_N_RECORDS, 100)),
        ("every-ms:250", FlushPolicy(FlushMode.EVERY_MS, 250)),
    ],
)
def test_flush_policy_parses_and_prints_back(text, policy):
    assert parse_flush_policy(text) == policy
    assert str(policy) == text


@pytest.mark.parametrize("text", ["always", "every-ms", "every-ms:", "every-ms:-5", "every-ms:0", "every-N-records:x", ""])
def test_bad_flush_policy_gives_one_clear_sentence(text):
    with pytest.raises(ValueError) as exc:
        parse_flush_policy(text)
    msg = str(exc.value)
    assert "\n" not in msg and ("use every-write" in msg or "positive N" in msg)


# ---------------------------------------------------------------- policies applied


def test_every_write_fsyncs_each_append_and_logs_it(tmp_path):
    lm = LogManager(str(tmp_path), "every-write")
    log = lm.get_or_create("t", 0)
    before = len(flush_lines(tmp_path))
    for i in range(3):
        log.append_as_leader(batch(b"x%d" % i), 1)
        last = flush_lines(tmp_path)[-1]
        assert last == {"file": "t-0/00000000000000000000.log", "synced_bytes": os.path.getsize(log.segment_paths()[0]),
                        "offset": i + 1}
        assert log.flushed_offset == i + 1
    assert len(flush_lines(tmp_path)) == before + 3


def test_never_does_not_fsync_appends(tmp_path):
    lm = LogManager(str(tmp_path), "never")
    log = lm.get_or_create("t", 0)
    before = len(flush_lines(tmp_path))
    for _ in range(5):
        log.append_as_leader(batch(b"x"), 1)
    assert len(flush_lines(tmp_path)) == before and log.flushed_offset == 0
    log.flush()
    assert flush_lines(tmp_path)[-1]["offset"] == 5 and log.flushed_offset == 5


def test_every_n_records_fsyncs_once_n_records_are_unflushed(tmp_path):
    lm = LogManager(str(tmp_path), "every-N-records:5")
    log = lm.get_or_create("t", 0)
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c", b"d"), 1)
    assert log.flushed_offset == 0
    log.append_as_leader(batch(b"e"), 1)
    assert log.flushed_offset == 5
    log.append_as_leader(batch(b"f"), 1)
    assert log.flushed_offset == 5


def test_every_ms_fsyncs_from_maybe_flush_only_when_due(tmp_path):
    lm = LogManager(str(tmp_path), "every-ms:100")
    log = lm.get_or_create("t", 0)
    assert lm.maybe_flush_all(1000) == 0  # starts the clock
    log.append_as_leader(batch(b"a"), 1)
    assert lm.maybe_flush_all(1050) == 0 and log.flushed_offset == 0
    assert lm.maybe_flush_all(1100) == 1 and log.flushed_offset == 1
    assert lm.maybe_flush_all(1300) == 0  # nothing new to sync


def test_last_synced_lengths_follow_rolls_and_truncation(tmp_path):
    lm = LogManager(str(tmp_path), "every-write", segment_bytes=150)
    log = lm.get_or_create("t", 0)
    for i in range(5):
        log.append_as_leader(batch(b"v%d" % i), 1)
    lengths = last_synced_lengths(str(tmp_path))
    for p in log.segment_paths():
        assert lengths[os.path.relpath(p, tmp_path)] == os.path.getsize(p)
    doomed = log.segment_paths()[-1]
    log.truncate_to(1)
    lengths = last_synced_lengths(str(tmp_path))
    assert lengths[os.path.relpath(doomed, tmp_path)] is None
    first = log.segment_paths()[0]
    assert lengths[os.path.relpath(first, tmp_path)] == os.path.getsize(first)


def test_cutting_files_to_synced_lengths_recovers_the_flushed_prefix(tmp_path):
    # What issue 4's scenario runner does after a SIGKILL: keep only fsynced bytes.
    lm = LogManager(str(tmp_path), "never")
    log = lm.get_or_create("t", 0)
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.flush()
    log.append_as_leader(batch(b"c"), 2)
    lm.close_all()
    for rel, length in last_synced_lengths(str(tmp_path)).items():
        if length is not None:
            os.truncate(os.path.join(tmp_path, rel), length)
    again = LogManager(str(tmp_path), "never").get_or_create("t", 0)
    assert again.log_end_offset == 2 and again.last_epoch == 1


# ---------------------------------------------------------------- checkpoints


def test_hwm_checkpoint_round_trip_and_format(tmp_path):
    write_hwm_checkpoint(str(tmp_path), {("orders", 1): 7, ("orders", 0): 12})
    assert read_hwm_checkpoint(str(tmp_path)) == {("orders", 0): 12, ("orders", 1): 7}
    assert open(tmp_path / "replication-offset-checkpoint").read() == "0\n2\norders 0 12\norders 1 7\n"
    assert read_hwm_checkpoint(str(tmp_path / "missing")) == {}


def test_malformed_hwm_checkpoint_names_the_fix(tmp_path):
    (tmp_path / "replication-offset-checkpoint").write_text("0\n3\norders 0 12\n")
    with pytest.raises(CheckpointError, match="delete it"):
        read_hwm_checkpoint(str(tmp_path))


def test_atomic_write_never_leaves_the_tmp_file_as_the_real_one(tmp_path, monkeypatch):
    path = str(tmp_path / "replication-offset-checkpoint")
    write_hwm_checkpoint(str(tmp_path), {("t", 0): 1})
    old = open(path).read()

    def crash(*_args):
        raise OSError("crash before rename")

    monkeypatch.setattr(checkpoints_mod.os, "replace", crash)  # a crash between fsync and rename
    with pytest.raises(OSError):
        write_hwm_checkpoint(str(tmp_path), {("t", 0): 99})
    monkeypatch.undo()
    assert open(path).read() == old  # the real file is the old one, whole
    assert os.path.exists(path + ".tmp")
    LogManager(str(tmp_path))  # start-up removes the leftover
    assert not os.path.exists(path + ".tmp")
    atomic_write(path, b"new")
    assert open(path, "rb").read() == b"new" and not os.path.exists(path + ".tmp")


def test_clean_shutdown_marker_is_read_once(tmp_path):
    assert take_clean_shutdown(str(tmp_path)) == -1
    write_clean_shutdown(str(tmp_path), 4711)
    assert take_clean_shutdown(str(tmp_path)) == 4711
    assert take_clean_shutdown(str(tmp_path)) == -1  # deleted: a crash now is unclean next time
    (tmp_path / "clean-shutdown").write_text("garbage")
    assert take_clean_shutdown(str(tmp_path)) == -1


# ---------------------------------------------------------------- LogManager


def test_log_manager_lists_reopens_and_deletes_partitions(tmp_path):
    lm = LogManager(str(tmp_path), "never")
    lm.get_or_create("orders", 0).append_as_leader(batch(b"a"), 1)
    lm.get_or_create("orders", 1)
    lm.get_or_create("my.topic-x", 2).append_as_leader(batch(b"b", b"c"), 1)
    os.makedirs(tmp_path / "metadata")  # other broker files are not partitions
    lm.flush_all()
    lm.write_clean_shutdown(9)
    lm.close_all()

    lm2 = LogManager(str(tmp_path), "never")
    assert lm2.take_clean_shutdown() == 9
    assert lm2.load_all() == [("my.topic-x", 2), ("orders", 0), ("orders", 1)]
    assert lm2.get("my.topic-x", 2).log_end_offset == 2
    assert lm2.delete("orders", 0)
    assert not os.path.exists(tmp_path / "orders-0")
    assert lm2.get("orders", 0) is None and not lm2.delete("orders", 0)
    assert lm2.on_disk() == [("my.topic-x", 2), ("orders", 1)]
    with pytest.raises(ValueError, match="bad topic-partition"):
        lm2.get_or_create("bad topic", 0)
