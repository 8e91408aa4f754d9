"""Throughput of the broker's on-disk log (clusters/broker/log): leader append, follower append, read.

Prints records/s and MB/s for batches like a batching producer sends (default 100 records of
100 bytes), under a chosen flush policy. The broker-wide target is 20,000 batched records/s
end to end, so the log alone should be far above it.

    .venv/bin/python benchmarks/bench_broker_log.py [--batches 2000] [--records 100]
        [--value-bytes 100] [--flush-policy never]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from kafkaesque_harness.clusters.broker.log import PartitionLog, build_batch, parse_flush_policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--flush-policy", default="never")
    ap.add_argument("--segment-bytes", type=int, default=16 * 1024 * 1024)
    args = ap.parse_args()
    policy = parse_flush_policy(args.flush_policy)
    raw = build_batch([b"x" * args.value_bytes] * args.records, producer_id=1, producer_epoch=0, base_sequence=0)
    n_records = args.batches * args.records
    mb = args.batches * len(raw) / 1e6
    quiet = lambda event: None  # noqa: E731

    with tempfile.TemporaryDirectory() as d:
        leader = PartitionLog(f"{d}/leader/t-0", args.segment_bytes, policy, logger=quiet)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            leader.append_as_leader(raw, 1)
        t_append = time.perf_counter() - t0

        t0 = time.perf_counter()
        chunks, off = [], 0
        while off < leader.log_end_offset:
            chunk = leader.read(off, 1024 * 1024)
            chunks.append(chunk)
            off += (len(chunk) // len(raw)) * args.records
        t_read = time.perf_counter() - t0

        follower = PartitionLog(f"{d}/follower/t-0", args.segment_bytes, policy, logger=quiet)
        t0 = time.perf_counter()
        for chunk in chunks:
            follower.append_as_follower(chunk)
        t_follow = time.perf_counter() - t0

        leader.close()
        t0 = time.perf_counter()
        reopened = PartitionLog(f"{d}/leader/t-0", args.segment_bytes, policy, logger=quiet)
        t_recover = time.perf_counter() - t0
        assert reopened.log_end_offset == n_records == follower.log_end_offset
        reopened.close()
        follower.close()

    print(f"batches={args.batches} records/batch={args.records} value_bytes={args.value_bytes} "
          f"batch_bytes={len(raw)} flush_policy={policy}")
    for name, t in [("leader append", t_append), ("read (1 MiB fetches)", t_read),
                    ("follower append", t_follow), ("open + recovery scan", t_recover)]:
        print(f"{name:22s} {n_records / t:12,.0f} records/s {mb / t:9.1f} MB/s {t * 1e6 / args.batches:8.1f} us/batch")


if __name__ == "__main__":
    main()
