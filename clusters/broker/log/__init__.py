"""Segmented on-disk log: record batches, CRCs, leader-epoch cache, checkpoints, recovery.

The API the broker's data plane uses (everything else in this package is internal):

- `LogManager(data_dir, flush_policy, segment_bytes)`: `get_or_create(topic, p)`, `get`,
  `load_all()`, `delete`, `flush_all()`, `maybe_flush_all(now_ms)`, `close_all()`,
  `read_hwm_checkpoint()` / `write_hwm_checkpoint({(topic, p): hwm})`,
  `take_clean_shutdown()` (start-up: previous broker epoch or -1) / `write_clean_shutdown(epoch)`.
- `PartitionLog`: `append_as_leader(raw, epoch) -> (first, last)`, `append_as_follower(raw)`,
  `assign_epoch(epoch)` (new leader, KAFKA-7415), `read(offset, max_bytes, max_offset=None)`,
  `truncate_to(offset) -> new LEO`, `end_offset_for_epoch(epoch, is_leader_current_epoch)`,
  `log_start_offset`, `log_end_offset`, `last_epoch`, `flushed_offset`, `flush()`,
  `maybe_flush(now_ms)`, `batch_headers()`, `physical_log()`, `crc_failures()`, `close()`.
- Pure protocol rules (PROTOCOL.md 2): `leader_divergence(...)`, `follower_truncation_offset(...)`.
- Batch helpers: `validate_batches`, `parse_batch_header`, `iter_records`, `build_batch`.
- Errors: `InvalidBatchError` (CORRUPT_MESSAGE), `OffsetOutOfRangeError` (OFFSET_OUT_OF_RANGE),
  `NonContiguousAppendError` (a follower append not at the LEO).
"""

from kafkaesque_harness.clusters.broker.log.batch import (
    BatchHeader,
    InvalidBatchError,
    RecordView,
    build_batch,
    iter_all_records,
    iter_batch_headers,
    iter_records,
    parse_batch_header,
    validate_batches,
    value_digest,
)
from kafkaesque_harness.clusters.broker.log.checkpoints import (
    CheckpointError,
    atomic_write,
    read_hwm_checkpoint,
    take_clean_shutdown,
    write_clean_shutdown,
    write_hwm_checkpoint,
)
from kafkaesque_harness.clusters.broker.log.epoch_cache import (
    NO_EPOCH,
    EpochEntry,
    LeaderEpochCache,
    follower_truncation_offset,
    leader_divergence,
)
from kafkaesque_harness.clusters.broker.log.flush import (
    FlushLog,
    FlushMode,
    FlushPolicy,
    last_synced_lengths,
    parse_flush_policy,
)
from kafkaesque_harness.clusters.broker.log.manager import LogManager
from kafkaesque_harness.clusters.broker.log.partition_log import (
    NonContiguousAppendError,
    OffsetOutOfRangeError,
    PartitionLog,
    PhysicalRecord,
)

__all__ = [
    "NO_EPOCH",
    "BatchHeader",
    "CheckpointError",
    "EpochEntry",
    "FlushLog",
    "FlushMode",
    "FlushPolicy",
    "InvalidBatchError",
    "LeaderEpochCache",
    "LogManager",
    "NonContiguousAppendError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "PhysicalRecord",
    "RecordView",
    "atomic_write",
    "build_batch",
    "follower_truncation_offset",
    "iter_all_records",
    "iter_batch_headers",
    "iter_records",
    "last_synced_lengths",
    "leader_divergence",
    "parse_batch_header",
    "parse_flush_policy",
    "read_hwm_checkpoint",
    "take_clean_shutdown",
    "validate_batches",
    "value_digest",
    "write_clean_shutdown",
    "write_hwm_checkpoint",
]
