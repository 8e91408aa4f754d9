"""LogManager: every PartitionLog of one broker data dir, plus the dir's checkpoints and flush log.

Layout of a data dir (the metadata log and other files of the broker may sit beside these):

    <data dir>/<topic>-<partition>/00000000000000000000.log ...   segments (PartitionLog)
    <data dir>/<topic>-<partition>/leader-epoch-checkpoint        epoch cache
    <data dir>/replication-offset-checkpoint                      HWMs of all partitions
    <data dir>/clean-shutdown                                     present only after a clean stop
    <data dir>/flush.log                                          one JSON line per fsync
"""

from __future__ import annotations

import os
import re
import shutil
import threading

from kafkaesque_harness.clusters.broker.log import checkpoints
from kafkaesque_harness.clusters.broker.log.epoch_cache import CHECKPOINT_NAME as EPOCH_CHECKPOINT_NAME
from kafkaesque_harness.clusters.broker.log.flush import FlushLog, FlushPolicy, parse_flush_policy
from kafkaesque_harness.clusters.broker.log.partition_log import (
    DEFAULT_SEGMENT_BYTES,
    SEGMENT_SUFFIX,
    EventLogger,
    PartitionLog,
    stderr_event_logger,
)

_PARTITION_DIR_RE = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)$")


class LogManager:
    """Opens, creates, lists and deletes the partition logs of one data dir.

    Start-up order for a broker (001 5.2, PROTOCOL.md 5.1):
        lm = LogManager(data_dir, flush_policy="every-ms:1000")
        previous_epoch = lm.take_clean_shutdown()     # -1 means the last stop was unclean
        lm.load_all()                                 # recovery of every partition
        hwms = lm.read_hwm_checkpoint()
    Controlled shutdown: lm.flush_all(); lm.write_hwm_checkpoint(...); lm.write_clean_shutdown(epoch);
    lm.close_all().
    """

    def __init__(
        self,
        data_dir: str,
        flush_policy: FlushPolicy | str = "never",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        logger: EventLogger | None = None,
    ):
        self.data_dir = os.path.abspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        self.flush_policy = parse_flush_policy(flush_policy) if isinstance(flush_policy, str) else flush_policy
        self.segment_bytes = segment_bytes
        self._logger = logger or stderr_event_logger
        self.flush_log = FlushLog(self.data_dir)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.Lock()
        checkpoints.remove_stale_tmp_files(self.data_dir)

    # ------------------------------------------------------------------ partitions

    def partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{topic}-{partition}")

    def on_disk(self) -> list[tuple[str, int]]:
        """(topic, partition) of every partition directory in the data dir, sorted."""
        out = []
        for name in os.listdir(self.data_dir):
            m = _PARTITION_DIR_RE.match(name)
            path = os.path.join(self.data_dir, name)
            if m and os.path.isdir(path) and _looks_like_partition(path):
                out.append((m["topic"], int(m["partition"])))
        return sorted(out)

    def load_all(self) -> list[tuple[str, int]]:
        """Open (and so recover) every partition found on disk; returns their keys."""
        keys = self.on_disk()
        for topic, partition in keys:
            self.get_or_create(topic, partition)
        return keys

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log of a partition, or None if it is not open."""
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, opened (with recovery) or created on first use."""
        key = (topic, partition)
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                if not _PARTITION_DIR_RE.match(f"{topic}-{partition}") or partition < 0:
                    raise ValueError(f"bad topic-partition {topic!r}/{partition}: use [A-Za-z0-9._-] names, partition >= 0")
                log = PartitionLog(
                    self.partition_dir(topic, partition),
                    segment_bytes=self.segment_bytes,
                    flush_policy=self.flush_policy,
                    flush_log=self.flush_log,
                    logger=self._logger,
                    topic=topic,
                    partition=partition,
                )
                self._logs[key] = log
            return log

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        """The open logs, by (topic, partition)."""
        return dict(self._logs)

    def delete(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log (a replica removed by reassignment); True if it existed."""
        key = (topic, partition)
        with self._lock:
            log = self._logs.pop(key, None)
            if log is not None:
                paths = log.segment_paths()
                log.close()
            else:
                paths = []
            path = self.partition_dir(topic, partition)
            if not os.path.isdir(path):
                return log is not None
            if not paths:
                paths = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(SEGMENT_SUFFIX)]
            shutil.rmtree(path)
            checkpoints.fsync_dir(self.data_dir)
            for p in paths:
                self.flush_log.record(p, 0, 0, deleted=True)
            return True

    # ------------------------------------------------------------------ flushing

    def flush_all(self) -> None:
        for log in list(self._logs.values()):
            log.flush()

    def maybe_flush_all(self, now_ms: int) -> int:
        """Apply every-ms policies (call from a timer); returns how many logs fsynced."""
        return sum(1 for log in list(self._logs.values()) if log.maybe_flush(now_ms))

    def close_all(self) -> None:
        """Close every log and the flush log (no flush: call flush_all() first when stopping cleanly)."""
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()
            self.flush_log.close()

    # ------------------------------------------------------------------ checkpoints

    def write_hwm_checkpoint(self, hwms: dict[tuple[str, int], int]) -> None:
        checkpoints.write_hwm_checkpoint(self.data_dir, hwms)

    def read_hwm_checkpoint(self) -> dict[tuple[str, int], int]:
        return checkpoints.read_hwm_checkpoint(self.data_dir)

    def write_clean_shutdown(self, broker_epoch: int) -> None:
        """Write the marker; call after flush_all() at the end of a controlled shutdown (001 5.2)."""
        checkpoints.write_clean_shutdown(self.data_dir, broker_epoch)

    def take_clean_shutdown(self) -> int:
        """Read and delete the marker at start-up: the previous broker epoch, or -1 if unclean."""
        return checkpoints.take_clean_shutdown(self.data_dir)


def _looks_like_partition(path: str) -> bool:
    names = os.listdir(path)
    return EPOCH_CHECKPOINT_NAME in names or any(n.endswith(SEGMENT_SUFFIX) for n in names)
