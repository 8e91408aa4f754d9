"""Durable small files of a data dir: atomic writes, the HWM checkpoint, the clean-shutdown marker.

- `replication-offset-checkpoint` (Kafka's format: "0", count, then "topic partition hwm"
  lines) holds each partition's high watermark (000: HW checkpoints; 004 scenario 1 shows why
  a restarting follower must not truncate to it).
- `clean-shutdown` holds the broker epoch, written after the final flush of a controlled
  shutdown and read and deleted at start-up; its absence means the last shutdown was unclean
  (001 5.1.1, 5.2; PROTOCOL.md 5.1: PreviousBrokerEpoch is the file's epoch or -1).

Every write is atomic: write `<name>.tmp`, fsync it, rename over `<name>`, fsync the directory,
so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os

from kafkaesque_harness.clusters.broker import hostenv

HWM_CHECKPOINT_NAME = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_NAME = "clean-shutdown"
TMP_SUFFIX = ".tmp"
NO_BROKER_EPOCH = -1


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed."""


def fsync_dir(path: str) -> None:
    """fsync a directory so a create, rename or unlink inside it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        hostenv.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` atomically and durably (tmp, fsync, rename, fsync dir)."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        hostenv.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_hwm_checkpoint(data_dir: str, hwms: dict[tuple[str, int], int]) -> None:
    """Write every partition's high watermark to `<data_dir>/replication-offset-checkpoint`."""
    rows = []
    for (topic, partition), hwm in sorted(hwms.items()):
        if not topic or any(c.isspace() for c in topic):
            raise ValueError(f"topic name {topic!r} cannot be checkpointed (empty or contains whitespace)")
        rows.append(f"{topic} {partition} {hwm}")
    write_versioned(os.path.join(data_dir, HWM_CHECKPOINT_NAME), rows)


def write_versioned(path: str, rows: list[str]) -> None:
    """Kafka's checkpoint layout: a version line (0), a count line, then one row per entry."""
    atomic_write(path, ("\n".join(["0", str(len(rows))] + rows) + "\n").encode())


def read_versioned(path: str, fields: int) -> list[list[str]]:
    """The rows of a checkpoint written by write_versioned, each split into `fields` fields.

    Raises ValueError naming what is wrong (the callers turn it into a CheckpointError that
    says which file and what to do)."""
    with open(path, encoding="utf-8") as fh:
        lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
    try:
        if not lines or lines[0] != "0":
            raise ValueError("missing version 0")
        count = int(lines[1])
        rows = [ln.split() for ln in lines[2 : 2 + count]]
    except IndexError as exc:
        raise ValueError("truncated header") from exc
    if len(rows) != count:
        raise ValueError(f"{count} entries announced, {len(rows)} present")
    if any(len(r) != fields for r in rows):
        raise ValueError(f"an entry does not have {fields} fields")
    return rows


def read_hwm_checkpoint(data_dir: str) -> dict[tuple[str, int], int]:
    """The checkpointed high watermarks ({} if the file does not exist)."""
    path = os.path.join(data_dir, HWM_CHECKPOINT_NAME)
    if not os.path.exists(path):
        return {}
    try:
        return {(topic, int(partition)): int(hwm) for topic, partition, hwm in read_versioned(path, 3)}
    except ValueError as exc:
        raise CheckpointError(f"HWM checkpoint {path} is malformed ({exc}); delete it to start from HWM 0") from exc


def write_clean_shutdown(data_dir: str, broker_epoch: int) -> None:
    """Mark a controlled shutdown as complete: call after the final flush (001 5.2)."""
    atomic_write(os.path.join(data_dir, CLEAN_SHUTDOWN_NAME), f"{broker_epoch}\n".encode())


def take_clean_shutdown(data_dir: str) -> int:
    """Read and delete the clean-shutdown marker at start-up; the broker epoch on file, or -1.

    The marker is deleted durably before returning, so a crash during this run is detected as
    unclean on the next start (PROTOCOL.md 5.1: PreviousBrokerEpoch, -1 if absent). A marker
    that cannot be parsed counts as absent (the conservative reading: unclean).
    """
    path = os.path.join(data_dir, CLEAN_SHUTDOWN_NAME)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().strip()
    except FileNotFoundError:
        return NO_BROKER_EPOCH
    os.unlink(path)
    fsync_dir(data_dir)
    try:
        return int(text)
    except ValueError:
        return NO_BROKER_EPOCH


def remove_stale_tmp_files(directory: str) -> list[str]:
    """Delete `*.tmp` leftovers of interrupted atomic writes; return their names."""
    removed = []
    for name in os.listdir(directory):
        if name.endswith(TMP_SUFFIX):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    return removed
