"""The metadata log's records and their materialized view (002 1.2.1, 2.3, 2.3.2).

The controller appends records to its durable metadata log (fsynced before it acts on
them); brokers pull the log, keep a persistent copy, and act on the materialized state.
Both sides materialize with the same `MetadataImage.apply`, so they cannot disagree on
what a record means.

Records are plain JSON dicts with a "type":

  register_broker  {broker_id, broker_epoch, incarnation_id, host, port, fenced: true,
                    clean: bool}   broker_epoch is this record's own offset (PROTOCOL.md 5.1);
                    clean is false when previous_broker_epoch did not match (unclean restart)
  broker_change    {broker_id, fenced?: bool, in_controlled_shutdown?: bool}
  topic            {topic, partitions, replication_factor, configs: {...}}
  partition        full partition state (every change writes the whole state, so
                   materialization is "newest partition_epoch wins"): {topic, partition,
                   replicas, isr, elr, last_known_elr, leader (-1 = none), leader_epoch,
                   partition_epoch, adding, removing}
  broker_unregistered {broker_id}
  unclean_recovery {topic, partition, leader, leader_epoch, strategy, candidates: {broker: [last
                   epoch, LEO]}}  a leader elected without a completeness guarantee (001 5.3,
                   004's unclean election): reported as a potential data-loss event
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv
from kafkaesque_harness.clusters.broker.log.checkpoints import atomic_write, fsync_dir

NO_LEADER = -1


@dataclass
class BrokerInfo:
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    fenced: bool = True
    in_controlled_shutdown: bool = False
    clean: bool = True


@dataclass
class PartitionState:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        return {"type": "partition", **asdict(self)}

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> PartitionState:
        fields = {k: v for k, v in r.items() if k != "type"}
        return cls(**fields)


@dataclass
class TopicInfo:
    topic: str
    partitions: int
    replication_factor: int
    configs: dict[str, Any] = field(default_factory=dict)

    @property
    def min_isr(self) -> int:
        return int(self.configs.get("min.insync.replicas", 1))


class MetadataImage:
    """The materialized view of the metadata log up to `offset` (the last applied record)."""

    def __init__(self) -> None:
        self.offset = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.unclean_recoveries: list[dict[str, Any]] = []

    def apply(self, offset: int, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "register_broker":
            self.brokers[record["broker_id"]] = BrokerInfo(
                broker_id=record["broker_id"],
                broker_epoch=record["broker_epoch"],
                incarnation_id=record["incarnation_id"],
                host=record["host"],
                port=record["port"],
                fenced=record.get("fenced", True),
                clean=record.get("clean", True),
            )
        elif kind == "broker_change":
            b = self.brokers.get(record["broker_id"])
            if b is not None:
                if record.get("fenced") is not None:
                    b.fenced = record["fenced"]
                if record.get("in_controlled_shutdown") is not None:
                    b.in_controlled_shutdown = record["in_controlled_shutdown"]
        elif kind == "unclean_recovery":
            self.unclean_recoveries.append({"offset": offset, **{k: v for k, v in record.items() if k != "type"}})
        elif kind == "broker_unregistered":
            self.brokers.pop(record["broker_id"], None)
        elif kind == "topic":
            self.topics[record["topic"]] = TopicInfo(
                topic=record["topic"],
                partitions=record["partitions"],
                replication_factor=record["replication_factor"],
                configs=dict(record.get("configs", {})),
            )
        elif kind == "partition":
            p = PartitionState.from_record(record)
            old = self.partitions.get((p.topic, p.partition))
            # 002 2.3.2 / PROTOCOL.md 1: apply only if the partition epoch is newer.
            if old is None or p.partition_epoch > old.partition_epoch:
                self.partitions[(p.topic, p.partition)] = p
        else:
            raise ValueError(f"unknown metadata record type {kind!r} at offset {offset}")
        self.offset = offset

    def to_snapshot(self) -> dict[str, Any]:
        """The whole image as a JSON value (a metadata snapshot at `offset`)."""
        return {"offset": self.offset,
                "brokers": [asdict(b) for _, b in sorted(self.brokers.items())],
                "topics": [asdict(t) for _, t in sorted(self.topics.items())],
                "partitions": [asdict(p) for _, p in sorted(self.partitions.items())],
                "unclean_recoveries": [dict(u) for u in self.unclean_recoveries]}

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> MetadataImage:
        image = cls()
        image.offset = int(data["offset"])
        for b in data["brokers"]:
            image.brokers[b["broker_id"]] = BrokerInfo(**b)
        for t in data["topics"]:
            image.topics[t["topic"]] = TopicInfo(**t)
        for p in data["partitions"]:
            image.partitions[(p["topic"], p["partition"])] = PartitionState(**p)
        image.unclean_recoveries = [dict(u) for u in data["unclean_recoveries"]]
        return image

    def partitions_of(self, topic: str) -> list[PartitionState]:
        return sorted((p for (t, _), p in self.partitions.items() if t == topic), key=lambda p: p.partition)


def parse_log_lines(data: bytes, base: int | None = None) -> tuple[int, list[dict[str, Any]], int]:
    """A metadata log file's JSON lines ({"offset", "record"}, consecutive offsets from `base`, or
    from the first line's offset when `base` is None) -> (base, records, length of the good
    prefix in bytes). A torn or out-of-sequence line ends the log there (a crash mid-append)."""
    records: list[dict[str, Any]] = []
    good = 0
    for line in data.split(b"\n"):
        if not line:
            good += 1
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            break
        if base is None and isinstance(entry.get("offset"), int):
            base = entry["offset"]
        if entry.get("offset") != (base or 0) + len(records):
            break
        records.append(entry["record"])
        good += len(line) + 1
    return base or 0, records, min(good, len(data))


class MetadataLogFile:
    """A durable JSON-lines metadata log: one {"offset", "record"} per line, fsynced on append.

    Used by the controller (the log of record) and by brokers (their persistent copy).
    A torn final line (a crash mid-append) is dropped at open.

    The log may start after a snapshot (a broker that caught up from a controller's snapshot):
    <path>.snapshot holds {"end_offset", "image"} (written to a temporary file, fsynced and
    renamed), `base_offset` is its end offset, and `records` are the records from there on
    (absolute offsets in the file). Without a snapshot file base_offset is 0.
    """

    def __init__(self, path: str):
        self.path = path
        self.snapshot_path = path + ".snapshot"
        self.base_offset = 0
        self.snapshot: dict[str, Any] | None = None  # the image at base_offset - 1
        if os.path.exists(self.snapshot_path):
            with open(self.snapshot_path, "rb") as fh:
                snap = json.loads(fh.read())
            self.base_offset = int(snap["end_offset"])
            self.snapshot = snap["image"]
        self.records: list[dict[str, Any]] = []
        if os.path.exists(path):
            with open(path, "rb") as fh:
                data = fh.read()
            _, self.records, good = parse_log_lines(data, self.base_offset)
            if good < len(data):
                with open(path, "r+b") as fh:
                    fh.truncate(good)
        self._fh = open(path, "ab")

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def image(self) -> MetadataImage:
        """The snapshot (if any) with the records after it applied."""
        image = MetadataImage.from_snapshot(self.snapshot) if self.snapshot is not None else MetadataImage()
        for i, r in enumerate(self.records):
            image.apply(self.base_offset + i, r)
        return image

    def append(self, records: list[dict[str, Any]], fsync: bool = True) -> int:
        """Append records and fsync; returns the offset of the first one."""
        first = self.end_offset
        lines = []
        for i, r in enumerate(records):
            lines.append(json.dumps({"offset": first + i, "record": r}, separators=(",", ":")))
        self._fh.write(("\n".join(lines) + "\n").encode())
        self._fh.flush()
        if fsync:
            hostenv.fsync(self._fh.fileno())
        self.records.extend(records)
        return first

    def _rewrite(self) -> None:
        self._fh.close()
        atomic_write(self.path, b"".join(
            (json.dumps({"offset": self.base_offset + i, "record": r}, separators=(",", ":")) + "\n").encode()
            for i, r in enumerate(self.records)))
        self._fh = open(self.path, "ab")

    def truncate_to(self, offset: int) -> None:
        """Drop records at and after `offset` (a broker whose copy diverged from the controller's).
        Below the snapshot, the snapshot goes too (the copy starts again from empty)."""
        if offset < self.base_offset:
            if os.path.exists(self.snapshot_path):
                os.remove(self.snapshot_path)
                fsync_dir(os.path.dirname(os.path.abspath(self.path)))
            self.base_offset, self.snapshot, self.records = 0, None, []
        else:
            self.records = self.records[:offset - self.base_offset]
        self._rewrite()

    def install_snapshot(self, image: dict[str, Any], end_offset: int) -> None:
        """Replace the whole copy with a snapshot whose records end at `end_offset`. The snapshot
        file is durable before the log is emptied; a crash in between leaves a log whose first
        line does not follow the snapshot, which the next open drops (nothing wrong is kept)."""
        atomic_write(self.snapshot_path,
                     json.dumps({"end_offset": end_offset, "image": image}, separators=(",", ":")).encode())
        self.base_offset, self.snapshot, self.records = end_offset, image, []
        self._rewrite()

    def compact(self) -> None:
        """Fold every record into the snapshot (keeps a broker's copy bounded)."""
        if self.records:
            self.install_snapshot(self.image().to_snapshot(), self.end_offset)

    def close(self) -> None:
        self._fh.close()

