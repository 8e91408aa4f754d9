"""PartitionLog against a model: random appends, truncations, reopens and lossy crashes.

A lossy crash cuts every file to its last fsynced length read from flush.log (as issue 4's
scenario runner does); the recovered log must then be exactly the model's prefix up to the
`flushed_offset` observed before the crash, with the matching epoch cache.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaesque_harness.clusters.broker.log import (
    LogManager,
    build_batch,
    iter_all_records,
    last_synced_lengths,
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.booleans()),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("flush")),
        st.tuples(st.just("lossy-crash")),
    ),
    max_size=25,
)


def model_epochs(batches: list[tuple[int, int, list[bytes]]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for base, epoch, _ in batches:
        if not out or out[-1][0] < epoch:
            out.append((epoch, base))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, policy=st.sampled_from(["never", "every-write", "every-N-records:3"]))
def test_log_matches_model_through_truncations_reopens_and_lossy_crashes(ops, policy):
    with tempfile.TemporaryDirectory() as d:
        quiet = lambda event: None  # noqa: E731
        lm = LogManager(d, policy, segment_bytes=200, logger=quiet)
        log = lm.get_or_create("t", 0)
        batches: list[tuple[int, int, list[bytes]]] = []  # (base offset, epoch, values)
        epoch, counter = 1, 0
        for op in ops:
            if op[0] == "append":
                epoch += 1 if op[2] else 0
                values = [b"v%d" % (counter + i) for i in range(op[1])]
                counter += op[1]
                first, last = log.append_as_leader(build_batch(values), epoch)
                assert first == (batches[-1][0] + len(batches[-1][2]) if batches else 0)
                batches.append((first, epoch, values))
            elif op[0] == "truncate":
                leo = log.truncate_to(op[1])
                batches = [b for b in batches if b[0] + len(b[2]) <= op[1]]
                assert leo == (batches[-1][0] + len(batches[-1][2]) if batches else 0)
            elif op[0] == "flush":
                log.flush()
            elif op[0] in ("reopen", "lossy-crash"):
                flushed = log.flushed_offset
                lm.close_all()
                if op[0] == "lossy-crash":
                    for rel, length in last_synced_lengths(d).items():
                        path = os.path.join(d, rel)
                        if length is not None and os.path.exists(path):
                            os.truncate(path, min(length, os.path.getsize(path)))
                    batches = [b for b in batches if b[0] + len(b[2]) <= flushed]
                lm = LogManager(d, policy, segment_bytes=200, logger=quiet)
                log = lm.get_or_create("t", 0)
            expected = [(base + i, ep, v) for base, ep, vals in batches for i, v in enumerate(vals)]
            got = [(r.offset, h.partition_leader_epoch, r.value) for h, r in iter_all_records(log.read(0, 1 << 30))]
            assert got == expected
            assert log.log_end_offset == len(expected)
            assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == model_epochs(batches)
            if batches:  # appends continue in an epoch no older than the log's
                epoch = max(epoch, log.last_epoch)
        lm.close_all()
