"""PartitionLog on real files: append, read, roll, truncate, reopen, recovery of damaged tails."""

from __future__ import annotations

import os

import pytest

from kafkaesque_harness.clusters.broker.log import (
    InvalidBatchError,
    NonContiguousAppendError,
    OffsetOutOfRangeError,
    PartitionLog,
    build_batch,
    iter_all_records,
    iter_batch_headers,
    last_synced_lengths,
    parse_flush_policy,
    value_digest,
)


class Events:
    """Collects the log's JSON events (the logger callback)."""

    def __init__(self) -> None:
        self.items: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.items.append(event)

    def of(self, name: str) -> list[dict]:
        return [e for e in self.items if e["event"] == name]


def open_log(tmp_path, events: Events | None = None, **kw) -> PartitionLog:
    return PartitionLog(str(tmp_path / "orders-0"), logger=events or Events(), **kw)


def values_in(raw: bytes) -> list[tuple[int, int, bytes | None]]:
    return [(r.offset, h.partition_leader_epoch, r.value) for h, r in iter_all_records(raw)]


def batch(*values: bytes | None) -> bytes:
    return build_batch(list(values), base_offset=0, leader_epoch=0)


def test_leader_append_assigns_offsets_and_stamps_epoch(tmp_path):
    log = open_log(tmp_path)
    assert log.append_as_leader(batch(b"a", b"b"), 3) == (0, 1)
    assert log.append_as_leader(batch(b"c") + batch(b"d", None), 3) == (2, 4)
    assert log.log_end_offset == 5 and log.log_start_offset == 0 and log.last_epoch == 3
    raw = log.read(0, 1 << 20)
    assert values_in(raw) == [(0, 3, b"a"), (1, 3, b"b"), (2, 3, b"c"), (3, 3, b"d"), (4, 3, None)]
    assert all(h.crc_ok for _, h in iter_batch_headers(raw))  # stamping leaves the CRC valid
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(3, 0)]


def test_read_returns_whole_batches_from_the_one_containing_the_offset(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b", b"c"), 1)
    log.append_as_leader(batch(b"d"), 1)
    assert [o for o, _, _ in values_in(log.read(1, 1 << 20))] == [0, 1, 2, 3]
    assert [o for o, _, _ in values_in(log.read(3, 1 << 20))] == [3]
    assert log.read(4, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 1 << 20)


def test_read_capped_at_max_offset_excludes_batches_reaching_it(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b"), 1)  # 0-1
    log.append_as_leader(batch(b"c", b"d"), 1)  # 2-3
    assert [o for o, _, _ in values_in(log.read(0, 1 << 20, max_offset=3))] == [0, 1]
    assert [o for o, _, _ in values_in(log.read(0, 1 << 20, max_offset=4))] == [0, 1, 2, 3]
    assert log.read(0, 1 << 20, max_offset=1) == b""  # HWM inside the first batch
    assert log.read(2, 1 << 20, max_offset=2) == b""


def test_read_respects_max_bytes_but_always_returns_one_batch(tmp_path):
    log = open_log(tmp_path)
    for i in range(4):
        log.append_as_leader(batch(bytes([i]) * 100), 1)
    one = log.read(0, 1)
    assert [o for o, _, _ in values_in(one)] == [0]
    assert [o for o, _, _ in values_in(log.read(0, 2 * len(one)))] == [0, 1]


def test_follower_append_keeps_offsets_and_epochs_and_rejects_gaps(tmp_path):
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(batch(b"a"), 1)
    leader.append_as_leader(batch(b"b", b"c"), 2)
    follower = open_log(tmp_path / "follower")
    assert follower.append_as_follower(leader.read(0, 1 << 20)) == (0, 2)
    assert values_in(follower.read(0, 1 << 20)) == [(0, 1, b"a"), (1, 2, b"b"), (2, 2, b"c")]
    assert [(e.epoch, e.start_offset) for e in follower.epoch_cache.entries] == [(1, 0), (2, 1)]
    assert follower.append_as_follower(b"") == (3, 2)
    with pytest.raises(NonContiguousAppendError):
        follower.append_as_follower(leader.read(1, 1 << 20))  # starts at 1, LEO is 3
    assert follower.log_end_offset == 3


def test_corrupt_client_batch_is_rejected_without_writing(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(batch(b"hello"))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidBatchError, match="CRC"):
        log.append_as_leader(bytes(bad), 1)
    with pytest.raises(InvalidBatchError, match="short"):
        log.append_as_leader(batch(b"hello")[:-3], 1)
    assert log.log_end_offset == 0 and os.path.getsize(log.segment_paths()[0]) == 0


def test_leader_append_in_an_older_epoch_is_refused(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 5)
    with pytest.raises(ValueError, match="epoch 4"):
        log.append_as_leader(batch(b"b"), 4)


def test_segments_roll_at_segment_bytes_and_reopen_intact(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    for i in range(10):
        log.append_as_leader(batch(b"v%d" % i), 1 + i // 5)
    names = [os.path.basename(p) for p in log.segment_paths()]
    assert len(names) > 2 and names[0] == "00000000000000000000.log"
    assert all(os.path.getsize(p) <= 200 for p in log.segment_paths())
    before = log.physical_log()
    log.close()
    events = Events()
    again = open_log(tmp_path, events, segment_bytes=200)
    assert again.physical_log() == before
    assert again.log_end_offset == 10
    assert [(e.epoch, e.start_offset) for e in again.epoch_cache.entries] == [(1, 0), (2, 5)]
    assert events.of("log-recovery-truncated") == []
    assert [o for o, _, _ in values_in(again.read(3, 1 << 20))] == list(range(3, 10))


def test_truncate_mid_segment(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 2)
    log.append_as_leader(batch(b"d"), 3)
    assert log.truncate_to(3) == 3
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(1, 0), (2, 2)]
    assert log.truncate_to(1) == 0  # offset 1 lies inside batch 0-1: the batch goes whole
    assert log.log_end_offset == 0 and log.epoch_cache.entries == []
    log.append_as_leader(batch(b"x"), 4)
    assert values_in(log.read(0, 1 << 20)) == [(0, 4, b"x")]


def test_truncate_across_segments_deletes_later_files_and_survives_reopen(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for i in range(8):
        log.append_as_leader(batch(b"v%d" % i), 1 + i // 3)
    assert len(log.segment_paths()) >= 4
    assert log.truncate_to(2) == 2
    # Two 70-byte batches per 150-byte segment: segments 0, 2, 4, 6; cutting at 2 empties all but 0.
    assert [os.path.basename(p) for p in log.segment_paths()] == ["00000000000000000000.log"]
    assert log.epoch_cache.last_epoch == 1
    log.append_as_leader(batch(b"new"), 5)
    log.close()
    again = open_log(tmp_path, segment_bytes=150)
    assert [v for _, _, v in values_in(again.read(0, 1 << 20))] == [b"v0", b"v1", b"new"]
    assert [(e.epoch, e.start_offset) for e in again.epoch_cache.entries] == [(1, 0), (5, 2)]


def test_recovery_cuts_a_torn_final_batch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.append_as_leader(batch(b"b"), 1)
    keep = os.path.getsize(log.segment_paths()[0])
    log.append_as_leader(batch(b"torn" * 10), 2)
    path = log.segment_paths()[0]
    log.close()
    with open(path, "r+b") as fh:
        fh.truncate(keep + 30)  # cut mid-batch, as a crash during write would
    events = Events()
    again = open_log(tmp_path, events)
    cut = events.of("log-recovery-truncated")
    assert len(cut) == 1 and cut[0]["file"] == path and cut[0]["offset"] == 2
    assert "short" in cut[0]["reason"]
    assert os.path.getsize(path) == keep
    assert values_in(again.read(0, 1 << 20)) == [(0, 1, b"a"), (1, 1, b"b")]
    assert again.last_epoch == 1  # the epoch-2 entry was beyond the recovered LEO


def test_recovery_cuts_a_batch_with_a_flipped_byte(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    keep = os.path.getsize(log.segment_paths()[0])
    log.append_as_leader(batch(b"bbbbbbbb"), 1)
    path = log.segment_paths()[0]
    log.close()
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) - 3)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x40]))
    events = Events()
    again = open_log(tmp_path, events)
    cut = events.of("log-recovery-truncated")
    assert [(c["file"], c["offset"], c["reason"]) for c in cut] == [(path, 1, "CRC mismatch")]
    assert os.path.getsize(path) == keep
    assert values_in(again.read(0, 1 << 20)) == [(0, 1, b"a")]
    assert again.append_as_leader(batch(b"c"), 1) == (1, 1)


def test_recovery_drops_segments_after_a_corrupt_one(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for i in range(6):
        log.append_as_leader(batch(b"v%d" % i), 1)
    paths = log.segment_paths()
    assert len(paths) >= 3
    log.close()
    with open(paths[1], "r+b") as fh:
        fh.truncate(10)
    events = Events()
    again = open_log(tmp_path, events, segment_bytes=150)
    assert again.log_end_offset == int(os.path.basename(paths[1])[:20])
    assert not any(os.path.exists(p) for p in paths[2:])
    assert {c["file"] for c in events.of("log-recovery-truncated")} >= {paths[1], paths[2]}


def test_recovery_rejects_non_monotonic_offsets(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    path = log.segment_paths()[0]
    log.close()
    with open(path, "ab") as fh:
        fh.write(build_batch([b"z"], base_offset=7, leader_epoch=1))
    events = Events()
    again = open_log(tmp_path, events)
    assert again.log_end_offset == 1
    assert "non-monotonic" in events.of("log-recovery-truncated")[0]["reason"]


def test_default_logger_writes_one_json_line_to_stderr(tmp_path, capfd):
    log = PartitionLog(str(tmp_path / "t-0"))
    log.append_as_leader(batch(b"a"), 1)
    path = log.segment_paths()[0]
    log.close()
    with open(path, "ab") as fh:
        fh.write(b"\x00\x01garbage")
    PartitionLog(str(tmp_path / "t-0")).close()
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and '"reason"' in err[0] and path in err[0] and '"offset": 1' in err[0]


def test_physical_log_digests_values(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", None), 2)
    assert [tuple(r) for r in log.physical_log()] == [(0, 2, value_digest(b"a")), (1, 2, None)]
    assert len(value_digest(b"a")) == 16


def test_batch_headers_expose_producer_fields(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(build_batch([b"a", b"b"], producer_id=42, producer_epoch=3, base_sequence=10), 1)
    (h,) = log.batch_headers()
    assert (h.base_offset, h.last_offset, h.record_count) == (0, 1, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 10, 11)


def test_assign_epoch_marks_a_new_leaders_start(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    assert log.assign_epoch(2) == 1
    assert log.end_offset_for_epoch(1) == (1, 1)
    assert log.end_offset_for_epoch(2, is_leader_current_epoch=True) == (2, 1)


def test_flush_policy_every_write_is_applied(tmp_path):
    log = open_log(tmp_path, flush_policy=parse_flush_policy("every-write"))
    log.append_as_leader(batch(b"a"), 1)
    assert log.flushed_offset == 1


def test_malformed_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 2)
    log.append_as_leader(batch(b"b"), 5)
    log.close()
    (tmp_path / "orders-0" / "leader-epoch-checkpoint").write_text("0\n7\nnonsense\n")
    events = Events()
    again = open_log(tmp_path, events)
    assert [(e.epoch, e.start_offset) for e in again.epoch_cache.entries] == [(2, 0), (5, 1)]
    assert len(events.of("log-recovery-epoch-checkpoint-rebuilt")) == 1


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(build_batch([b"a", b"b"], timestamp_ms=1000), 1)
    log.append_as_leader(build_batch([b"c"], timestamp_ms=2000), 1)
    assert log.offset_for_timestamp(500) == (0, 1000)
    assert log.offset_for_timestamp(1500) == (2, 2000)
    assert log.offset_for_timestamp(2500) is None


def test_recovery_drops_segments_after_a_gap_and_records_the_deletion(tmp_path):
    log = open_log(tmp_path, segment_bytes=150)
    for i in range(6):
        log.append_as_leader(batch(b"v%d" % i), 1)
    paths = log.segment_paths()
    log.close()
    os.unlink(paths[1])
    events = Events()
    again = open_log(tmp_path, events, segment_bytes=150)
    assert again.log_end_offset == int(os.path.basename(paths[1])[:20])
    reasons = {c["file"]: c["reason"] for c in events.of("log-recovery-truncated")}
    assert reasons[paths[2]].startswith("gap")
    assert last_synced_lengths(str(tmp_path))[os.path.relpath(paths[2], tmp_path)] is None


def test_a_batch_damaged_under_a_running_log_is_named_by_crc_failures_and_left_out_of_the_physical_log(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.append_as_leader(batch(b"bbbbbbbb"), 1)
    log.append_as_leader(batch(b"c"), 1)
    assert log.crc_failures() == []
    path = log.segment_paths()[0]
    first, second = (h.size for h in log.batch_headers()[:2])
    with open(path, "r+b") as fh:  # as the file-corruption fault does: the log stays open on the damaged file
        fh.seek(first + second - 3)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x40]))
    assert log.crc_failures() == [[1, 1]]
    assert [(r.offset, r.value_digest) for r in log.physical_log()] == [(0, value_digest(b"a")),
                                                                          (2, value_digest(b"c"))]
    log.close()
    again = open_log(tmp_path)  # the start-up recovery cuts it, and what followed
    assert again.crc_failures() == [] and [r.offset for r in again.physical_log()] == [0]
