"""The controller's metadata state machine, without I/O (002 sections 1.2, 2.3, 2.8, 2.9; PROTOCOL.md 4-5).

`Controller.handle(api, body, now_ms)` takes a request and returns the response; every
state change it makes is a metadata record, emitted through `_emit`, which assigns the
record its offset and applies it to the MetadataImage at once. The asyncio shell
(controller_server.py) must append and fsync `take_pending()` before it answers the
request or serves the records to brokers (002 1.2.1: durable before acted on). A
restarted controller replays its log into a fresh image, so broker epochs (the offset of
the registration record, PROTOCOL.md 5.1) stay monotonic across restarts.

Volatile state (last heartbeat times, brokers' metadata offsets) is not logged: after a
restart every registered broker gets a fresh session timeout of grace.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clusters.broker import rpc
from clusters.broker.metadata import NO_LEADER, MetadataImage, PartitionState


@dataclass
class ControllerConfig:
    node_id: int = 1000
    session_timeout_ms: int = 6000
    unclean_leader_election: bool = False
    variants: frozenset[str] = field(default_factory=frozenset)


def place_replicas(brokers: list[int], partitions: int, replication_factor: int) -> list[list[int]]:
    """Replica placement of 003 ("Replication high-level design"): partition p goes first to
    broker i = p mod n (the preferred replica); its jth other replica to (i + j + k) mod n,
    where k = p div n is p's rank among the partitions assigned to broker i. Where that
    formula lands on a broker already chosen (it can when j + k is a multiple of n), the
    next broker round the ring is taken, so replicas are always distinct.
    """
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} exceeds the {n} registered brokers")
    out = []
    for p in range(partitions):
        i, k = p % n, p // n
        chosen = [i]
        for j in range(1, replication_factor):
            c = (i + j + k) % n
            while c in chosen:
                c = (c + 1) % n
            chosen.append(c)
        out.append([ids[c] for c in chosen])
    return out


@dataclass
class BrokerSession:
    """Volatile per-broker state the controller keeps outside the log."""

    last_heartbeat_ms: int
    metadata_offset: int = -1
    want_shutdown: bool = False


class Controller:
    def __init__(self, config: ControllerConfig, image: MetadataImage | None = None,
                 log: Callable[[dict[str, Any]], None] | None = None):
        self.config = config
        self.image = image or MetadataImage()
        self.sessions: dict[int, BrokerSession] = {}
        self._pending: list[dict[str, Any]] = []
        self._log = log or (lambda event: None)
        self._started = False

    # --- records ---------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.image.offset + 1

    def _emit(self, record: dict[str, Any]) -> int:
        offset = self.end_offset
        self.image.apply(offset, record)
        self._pending.append(record)
        return offset

    def take_pending(self) -> list[dict[str, Any]]:
        """Records emitted since the last call; the shell must make them durable before acting."""
        out, self._pending = self._pending, []
        return out

    def start(self, now_ms: int) -> None:
        """After replay: every registered broker gets a full session timeout of grace."""
        for b in self.image.brokers:
            self.sessions.setdefault(b, BrokerSession(last_heartbeat_ms=now_ms))
        self._started = True

    def _event(self, event: str, **fields: Any) -> None:
        self._log({"role": "controller", "node": self.config.node_id, "event": event, **fields})

    def _write_partition(self, old: PartitionState, new: PartitionState, reason: str) -> None:
        self._emit(new.to_record())
        self._event("partition_change", topic=new.topic, partition=new.partition, reason=reason,
                    **{"from": _summary(old), "to": _summary(new)})

    # --- dispatch --------------------------------------------------------------------
    def handle(self, api: str, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        handler = getattr(self, f"_handle_{api}", None)
        if handler is None:
            return {"error": rpc.INVALID_REQUEST, "message": f"unknown api {api!r}"}
        return handler(body, now_ms)

    # --- brokers: registration, heartbeats, fencing (PROTOCOL.md 5) --------------------
    def _session_expired(self, broker_id: int, now_ms: int) -> bool:
        s = self.sessions.get(broker_id)
        return s is None or now_ms - s.last_heartbeat_ms > self.config.session_timeout_ms

    def _handle_broker_registration(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        bid = int(body["broker_id"])
        old = self.image.brokers.get(bid)
        if old is not None and old.incarnation_id == body["incarnation_id"]:
            return {"error": rpc.NONE, "broker_epoch": old.broker_epoch}  # a retry
        if old is not None and not old.fenced and not self._session_expired(bid, now_ms):
            return {"error": rpc.DUPLICATE_BROKER_REGISTRATION,
                    "message": f"broker {bid} is registered with epoch {old.broker_epoch} and its session is live"}
        if old is not None and not old.fenced:
            self._fence(bid, "session expired at re-registration")
        previous = int(body.get("previous_broker_epoch", -1))
        # 001 5.2 / PROTOCOL.md 5.2: a restart is clean only if the broker wrote its epoch to
        # the clean-shutdown file after a controlled shutdown.
        clean = old is None or previous == old.broker_epoch
        epoch = self._emit({"type": "register_broker", "broker_id": bid, "broker_epoch": self.end_offset,
                            "incarnation_id": body["incarnation_id"], "host": body["host"],
                            "port": int(body["port"]), "fenced": True, "clean": clean})
        self.sessions[bid] = BrokerSession(last_heartbeat_ms=now_ms)
        self._event("broker_registered", broker=bid, broker_epoch=epoch, clean=clean,
                    previous_broker_epoch=previous)
        return {"error": rpc.NONE, "broker_epoch": epoch}

    def _handle_broker_heartbeat(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        bid = int(body["broker_id"])
        b = self.image.brokers.get(bid)
        if b is None:
            return {"error": rpc.BROKER_ID_NOT_REGISTERED}
        if int(body["broker_epoch"]) != b.broker_epoch:
            return {"error": rpc.STALE_BROKER_EPOCH}
        s = self.sessions.setdefault(bid, BrokerSession(last_heartbeat_ms=now_ms))
        s.last_heartbeat_ms = now_ms
        s.metadata_offset = int(body.get("metadata_offset", -1))
        if body.get("want_shutdown"):
            return self._controlled_shutdown(bid, s)
        # Unfence once the broker asks and has replayed the log up to its own registration.
        if b.fenced and not body.get("want_fence", True) and s.metadata_offset >= b.broker_epoch:
            self._unfence(bid)
        return {"error": rpc.NONE, "is_fenced": self.image.brokers[bid].fenced, "should_shutdown": False}

    def _controlled_shutdown(self, bid: int, s: BrokerSession) -> dict[str, Any]:
        b = self.image.brokers[bid]
        if not b.in_controlled_shutdown:
            self._emit({"type": "broker_change", "broker_id": bid, "in_controlled_shutdown": True})
            self._event("controlled_shutdown_started", broker=bid)
            self._remove_broker_from_partitions(bid, "controlled shutdown")
        s.want_shutdown = True
        leads = any(p.leader == bid for p in self.image.partitions.values())
        return {"error": rpc.NONE, "is_fenced": b.fenced, "should_shutdown": not leads}

    def tick(self, now_ms: int) -> None:
        """Fence every unfenced broker whose session timed out (002 1.2.2)."""
        if not self._started:
            self.start(now_ms)
        for bid, b in list(self.image.brokers.items()):
            if not b.fenced and self._session_expired(bid, now_ms):
                self._fence(bid, "session timeout")

    def _fence(self, bid: int, reason: str) -> None:
        self._emit({"type": "broker_change", "broker_id": bid, "fenced": True})
        self._event("broker_fenced", broker=bid, reason=reason)
        self._remove_broker_from_partitions(bid, f"broker {bid} fenced ({reason})")

    def _unfence(self, bid: int) -> None:
        self._emit({"type": "broker_change", "broker_id": bid, "fenced": False, "in_controlled_shutdown": False})
        self._event("broker_unfenced", broker=bid)
        # A leaderless partition whose ISR holds this broker can now be served again (002 2.8).
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if p.leader == NO_LEADER and bid in p.isr:
                self._elect(p, f"broker {bid} unfenced")

    # --- partitions: elections and ISR changes (002 2.8, 2.9) --------------------------
    def _eligible(self, bid: int) -> bool:
        b = self.image.brokers.get(bid)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _remove_broker_from_partitions(self, bid: int, reason: str) -> None:
        """The controller may only shrink ISRs (002 2.9.1): drop the broker from every ISR it is
        in, electing a new leader where it led. The last ISR member stays (002 2.8)."""
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if bid not in p.isr and p.leader != bid:
                continue
            new = copy.deepcopy(p)
            if bid in new.isr and len(new.isr) > 1:
                new.isr = [r for r in new.isr if r != bid]
            if p.leader == bid:
                new.leader = self._choose_leader(new, exclude=bid)
                new.leader_epoch += 1
            if new.isr == p.isr and new.leader == p.leader:
                continue
            new.partition_epoch += 1
            self._write_partition(p, new, reason)

    def _choose_leader(self, p: PartitionState, exclude: int | None = None) -> int:
        """An ISR member that is unfenced and not shutting down, preferring replica order; else
        (only with unclean.leader.election.enable, 004) any live replica; else no leader."""
        for r in p.replicas:
            if r in p.isr and r != exclude and self._eligible(r):
                return r
        if self.config.unclean_leader_election:
            for r in p.replicas:
                if r != exclude and self._eligible(r):
                    self._event("unclean_leader_election", topic=p.topic, partition=p.partition, leader=r,
                                isr=p.isr, warning="possible data loss")
                    return r
        return NO_LEADER

    def _elect(self, p: PartitionState, reason: str) -> None:
        leader = self._choose_leader(p)
        if leader == NO_LEADER:
            return
        new = copy.deepcopy(p)
        new.leader = leader
        if leader not in new.isr:  # an unclean election: the new leader's log is the truth now
            new.isr = [leader]
        new.leader_epoch += 1
        new.partition_epoch += 1
        self._write_partition(p, new, reason)

    def _handle_alter_partition(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """Accept a leader's ISR change only if every epoch matches (002 2.9.2, PROTOCOL.md 4)."""
        key = (body["topic"], int(body["partition"]))
        p = self.image.partitions.get(key)
        if p is None:
            return {"error": rpc.UNKNOWN_TOPIC_OR_PARTITION}
        bid = int(body["broker_id"])
        b = self.image.brokers.get(bid)
        if b is None or b.fenced or int(body["broker_epoch"]) != b.broker_epoch:
            return {"error": rpc.STALE_BROKER_EPOCH}
        if bid != p.leader:
            return {"error": rpc.NOT_LEADER_OR_FOLLOWER}
        le = int(body["leader_epoch"])
        if le < p.leader_epoch:
            return {"error": rpc.FENCED_LEADER_EPOCH}
        if le > p.leader_epoch:
            return {"error": rpc.UNKNOWN_LEADER_EPOCH}
        if int(body["partition_epoch"]) != p.partition_epoch:
            return {"error": rpc.INVALID_UPDATE_VERSION}
        proposed = [int(m["broker_id"]) for m in body["new_isr"]]
        if bid not in proposed or not set(proposed) <= set(p.replicas) or len(set(proposed)) != len(proposed):
            return {"error": rpc.INVALID_REQUEST, "message": "the ISR must hold the leader and only replicas"}
        for m in body["new_isr"]:
            r, epoch = int(m["broker_id"]), int(m.get("broker_epoch", -1))
            if r in p.isr:
                continue
            rb = self.image.brokers.get(r)
            # KIP-841 / KIP-903: an added member must be live, and the broker epoch the leader
            # saw in its fetches must be the registered one (a restarted replica is not).
            if rb is None or rb.fenced or rb.in_controlled_shutdown or (epoch != -1 and epoch != rb.broker_epoch):
                return {"error": rpc.INELIGIBLE_REPLICA, "message": f"replica {r} is not eligible for the ISR"}
        new = copy.deepcopy(p)
        new.isr = [r for r in p.replicas if r in proposed]
        new.partition_epoch += 1
        self._write_partition(p, new, f"AlterPartition from leader {bid}")
        return {"error": rpc.NONE, "partition": new.to_record()}

    # --- topics ------------------------------------------------------------------------
    def _handle_create_topic(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        topic = str(body["topic"])
        if topic in self.image.topics:
            return {"error": rpc.TOPIC_ALREADY_EXISTS, "message": f"topic {topic!r} already exists"}
        partitions, rf = int(body["partitions"]), int(body["replication_factor"])
        configs = {str(k): v for k, v in (body.get("configs") or {}).items()}
        live = [b for b, info in self.image.brokers.items() if not info.fenced and not info.in_controlled_shutdown]
        if partitions < 1 or rf < 1:
            return {"error": rpc.INVALID_REQUEST, "message": "partitions and replication factor must be >= 1"}
        if rf > len(live):
            return {"error": rpc.INVALID_REPLICATION_FACTOR,
                    "message": f"replication factor {rf} exceeds the {len(live)} live brokers"}
        min_isr = int(configs.get("min.insync.replicas", 1))
        if not 1 <= min_isr <= rf:
            return {"error": rpc.INVALID_REQUEST, "message": f"min.insync.replicas {min_isr} must be in 1..{rf}"}
        self._emit({"type": "topic", "topic": topic, "partitions": partitions, "replication_factor": rf,
                    "configs": configs})
        for i, replicas in enumerate(place_replicas(live, partitions, rf)):
            p = PartitionState(topic=topic, partition=i, replicas=replicas, isr=list(replicas),
                               leader=replicas[0], leader_epoch=0, partition_epoch=0)
            self._emit(p.to_record())
            self._event("partition_created", topic=topic, partition=i, to=_summary(p))
        return {"error": rpc.NONE}

    # --- reads -------------------------------------------------------------------------
    def records_since(self, records: list[dict[str, Any]], offset: int, max_records: int) -> list[list[Any]]:
        return [[o, records[o]] for o in range(max(offset, 0), min(len(records), offset + max_records))]

    def dump(self) -> dict[str, Any]:
        return {
            "node_id": self.config.node_id,
            "role": "controller",
            "active": True,
            "metadata_end_offset": self.end_offset,
            "brokers": [
                {"broker_id": b.broker_id, "broker_epoch": b.broker_epoch, "fenced": b.fenced,
                 "in_controlled_shutdown": b.in_controlled_shutdown, "host": b.host, "port": b.port,
                 "clean": b.clean}
                for b in sorted(self.image.brokers.values(), key=lambda b: b.broker_id)
            ],
            "topics": [{"topic": t.topic, "partitions": t.partitions, "replication_factor": t.replication_factor,
                        "configs": t.configs} for t in self.image.topics.values()],
            "partitions": [p.to_record() for _, p in sorted(self.image.partitions.items())],
        }


def _summary(p: PartitionState) -> dict[str, Any]:
    return {"leader": p.leader, "isr": p.isr, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch}
