"""Leader-epoch cache: EndOffsetForEpoch, divergence and truncation (PROTOCOL.md section 2).

The table of test vectors (Vanlightly section 3) is replayed literally: logs are written as
PROTOCOL.md writes them ("0e1 1e1" = offset 0 epoch 1, offset 1 epoch 1).
"""

from __future__ import annotations

import os

import pytest

from kafkaesque_harness.clusters.broker.log import (
    CheckpointError,
    LeaderEpochCache,
    follower_truncation_offset,
    leader_divergence,
)


def cache_of(log: str, current_epoch: int | None = None) -> tuple[LeaderEpochCache, int]:
    """An epoch cache and LEO for a log written like "0e1 1e1 2e2"; a leader's current epoch
    gets its entry at the LEO at once (KAFKA-7415)."""
    entries: list[tuple[int, int]] = []
    leo = 0
    for rec in log.split():
        off, ep = (int(x) for x in rec.split("e"))
        assert off == leo
        if not entries or entries[-1][0] != ep:
            entries.append((ep, off))
        leo = off + 1
    cache = LeaderEpochCache.from_entries(entries)
    if current_epoch is not None:
        cache.assign(current_epoch, leo)
    return cache, leo


# Case, follower log, leader log, leader current epoch, fetch (offset, epoch), reply, truncate.
VECTORS = [
    ("A", "0e1 1e1", "0e1 1e1 2e1 3e1", 2, (2, 1), None, None),
    ("C", "0e1 1e1 2e1 3e1", "0e1 1e1", 2, (4, 1), (1, 2), 2),
    ("D", "0e1 1e1 2e2 3e2", "0e1 1e1", 3, (4, 2), (1, 2), 2),
    ("F", "0e1 1e2 2e2", "0e1 1e1", 3, (3, 2), (1, 2), 1),
    ("G", "0e2", "0e1 1e3", 4, (1, 2), (1, 1), 0),
]


@pytest.mark.parametrize("case,follower,leader,cur,fetch,reply,truncate", VECTORS, ids=[v[0] for v in VECTORS])
def test_protocol_vectors_leader_reply_and_follower_truncation(case, follower, leader, cur, fetch, reply, truncate):
    leader_cache, leader_leo = cache_of(leader, current_epoch=cur)
    f_cache, f_leo = cache_of(follower)
    fetch_offset, last_fetched_epoch = fetch
    assert (fetch_offset, last_fetched_epoch) == (f_leo, f_cache.last_epoch)
    got = leader_divergence(leader_cache, leader_leo, cur, fetch_offset, last_fetched_epoch)
    assert got == reply
    if reply is not None:
        assert follower_truncation_offset(f_cache, f_leo, *reply) == truncate


def test_vectors_hold_without_the_leaders_current_epoch_entry():
    # A leader that has not yet written in its epoch and lacks the KAFKA-7415 entry answers the
    # same for these cases (its latest epoch is then the follower's).
    for _case, _follower, leader, cur, fetch, reply, _truncate in VECTORS:
        leader_cache, leader_leo = cache_of(leader)
        assert leader_divergence(leader_cache, leader_leo, cur, *fetch) == reply


def test_end_offset_for_epoch_rules():
    cache = LeaderEpochCache.from_entries([(2, 0), (4, 10), (7, 20)])
    leo = 25
    assert cache.end_offset_for_epoch(7, leo) == (7, 25)  # latest epoch -> LEO
    assert cache.end_offset_for_epoch(4, leo) == (4, 20)  # start of the next epoch
    assert cache.end_offset_for_epoch(5, leo) == (4, 20)  # largest epoch <= 5 is 4
    assert cache.end_offset_for_epoch(9, leo) == (7, 25)  # largest <= 9 is the latest: LEO
    assert cache.end_offset_for_epoch(1, leo) == (1, 0)  # no epoch <= 1: start of the lowest
    assert cache.end_offset_for_epoch(5, leo, is_leader_current_epoch=True) == (5, 25)
    assert LeaderEpochCache.from_entries([]).end_offset_for_epoch(3, 0) == (3, 0)  # empty log


def test_follower_intermediate_truncation_when_epoch_differs():
    # Follower has epochs 1 and 3; the leader says epoch 2 ended at 8. The follower's largest
    # epoch <= 2 is 1, which ends where 3 starts (5): truncate to 5 and ask again (KIP-279).
    cache = LeaderEpochCache.from_entries([(1, 0), (3, 5)])
    assert follower_truncation_offset(cache, 9, 2, 8) == 5


def test_no_divergence_for_a_follower_without_epoch():
    cache, leo = cache_of("0e1 1e1")
    assert leader_divergence(cache, leo, 1, 0, -1) is None


def test_divergence_when_follower_is_ahead_in_the_same_epoch():
    cache, leo = cache_of("0e1 1e1", current_epoch=2)
    assert leader_divergence(cache, leo, 2, 5, 2) == (2, 2)  # current epoch: end = LEO 2 < 5


def test_assign_keeps_both_columns_strictly_increasing(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch: ignored
    assert not cache.assign(0, 7)  # older epoch: ignored
    assert cache.assign(3, 4)
    assert cache.assign(4, 4)  # epoch 3 never got a record at 4: replaced
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 0), (4, 4)]
    with pytest.raises(ValueError):
        LeaderEpochCache.from_entries([(2, 5), (3, 5)])


def test_truncate_from_end_drops_entries_at_or_past_offset_and_persists(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for ep, start in [(1, 0), (2, 5), (3, 9)]:
        cache.assign(ep, start)
    assert cache.truncate_from_end(9)
    assert [(e.epoch, e.start_offset) for e in LeaderEpochCache(str(tmp_path)).entries] == [(1, 0), (2, 5)]
    assert not cache.truncate_from_end(100)
    assert cache.epoch_for_offset(7) == 2 and cache.epoch_for_offset(0) == 1


def test_checkpoint_file_format_and_malformed_file(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(2, 0)
    cache.assign(5, 17)
    path = os.path.join(tmp_path, "leader-epoch-checkpoint")
    assert open(path).read() == "0\n2\n2 0\n5 17\n"
    with open(path, "w") as fh:
        fh.write("0\n2\n5 17\n2 0\n")
    with pytest.raises(CheckpointError, match="delete it"):
        LeaderEpochCache(str(tmp_path))
