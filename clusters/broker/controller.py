"""The controller's metadata state machine, without I/O (002 sections 1.2, 2.3, 2.8, 2.9; 001 section 5;
PROTOCOL.md 4-7).

`Controller.handle(api, body, now_ms)` takes a request and returns the response; every
state change it makes is a metadata record, emitted through `_emit`, which assigns the
record its offset and applies it to the MetadataImage at once. The asyncio shell
(controller_server.py) must append and fsync `take_pending()` before it answers the
request or serves the records to brokers (002 1.2.1: durable before acted on). A
restarted controller replays its log into a fresh image, so broker epochs (the offset of
the registration record, PROTOCOL.md 5.1) stay monotonic across restarts.

Volatile state (last heartbeat times, brokers' metadata offsets, unclean recoveries waiting
for GetReplicaLogInfo replies) is not logged: after a restart every registered broker gets a
fresh session timeout of grace, and a recovery still needed starts over.

Recovery (001 section 5): the ISR may become empty; while it is below min ISR the replicas
it loses move to the Eligible Leader Replicas (ELR), which stay leader candidates because
the HWM cannot advance without them (KIP-966, cases A to G of 001 5.2.1). A broker that
registers without the clean-shutdown epoch leaves every ELR (for the LastKnownELR while the
ISR is below min ISR), so an uncleanly restarted replica leads again only after catching up
(Unclean Exclusion). When ISR and ELR are both empty, `unclean.recovery.strategy` decides
(001 5.3): `balanced` asks the LastKnownELR for their logs and elects the highest
(last epoch, end offset); `proactive` does not wait for fenced ELR members and takes the best
reply within a timeout; `manual` waits for an operator's `elect_leader`. Every unclean
recovery or election is a metadata record and a log line flagged as possible data loss.

Reassignment (PROTOCOL.md 7): `alter_partition_reassignments` grows the replicas to
current ∪ target (target first; `adding`/`removing` in the partition record), the leader
adds the new replicas to the ISR with AlterPartition, and the reassignment completes (after
an accepted AlterPartition, on tick, or at once when only removing) once every adding
replica is in the ISR and |ISR − removing| ≥ min ISR: replicas = target, removed replicas
leave ISR, ELR and LastKnownELR, a removed leader is replaced, both epochs are bumped. A
cancel reverts to replicas − adding (refused when no original replica is left in ISR or ELR,
unless unclean election is on); a new target while one is in progress is refused.
`elect_preferred_leaders` moves leadership to replicas[0] where it is a live ISR member;
`unregister_broker` forgets a broker that hosts no replica and is fenced or silent.

Historic flaws as variants: `no-elr` restores 3.5's rules (the last ISR member stays in the
ISR even when fenced or restarted uncleanly, no ELR: the Last Replica Standing of 002 2.4.2);
`unclean-election` is `unclean.leader.election.enable` (004, any live replica may lead).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, MetadataImage, PartitionState

UNCLEAN_RECOVERY_STRATEGIES = ("proactive", "balanced", "manual")


@dataclass
class ControllerConfig:
    node_id: int = 1000
    session_timeout_ms: int = 6000
    unclean_leader_election: bool = False
    unclean_recovery_strategy: str = "balanced"
    unclean_recovery_timeout_ms: int = 2000  # proactive: how long to collect log replies
    variants: frozenset[str] = field(default_factory=frozenset)

    @property
    def elr_enabled(self) -> bool:
        return "no-elr" not in self.variants

    @property
    def unclean_election(self) -> bool:
        return self.unclean_leader_election or "unclean-election" in self.variants


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


@dataclass
class UncleanRecovery:
    """A leaderless partition whose logs are being inspected (001 5.3; volatile)."""

    strategy: str
    candidates: list[int]
    started_ms: int
    replies: dict[int, tuple[int, int]] = field(default_factory=dict)  # broker -> (last epoch, LEO)


class Controller:
    def __init__(self, config: ControllerConfig, image: MetadataImage | None = None,
                 log: Callable[[dict[str, Any]], None] | None = None):
        self.config = config
        self.image = image or MetadataImage()
        self.sessions: dict[int, BrokerSession] = {}
        self._pending: list[dict[str, Any]] = []
        self._log = log or (lambda event: None)
        self._started = False
        self.recoveries: dict[tuple[str, int], UncleanRecovery] = {}
        self._manual_noted: set[tuple[str, int]] = set()

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
        if not clean:
            self._exclude_unclean(bid)
        return {"error": rpc.NONE, "broker_epoch": epoch}

    def _exclude_unclean(self, bid: int) -> None:
        """001 5.2: an unclean registration removes the broker's replicas from every ELR (into the
        LastKnownELR while the ISR is below min ISR, 001 5.3.1); fencing already took them out of
        the ISR. They come back only as caught-up followers the leader adds (Unclean Exclusion).
        Under `no-elr` (3.5) nothing happens here: the last ISR member keeps its place."""
        if not self.config.elr_enabled:
            return
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if bid not in p.elr and bid not in p.isr:
                continue
            new = copy.deepcopy(p)
            new.isr = [r for r in p.isr if r != bid]
            new.elr = [r for r in p.elr if r != bid]
            if len(new.isr) < self._min_isr(p) and bid not in new.last_known_elr:
                new.last_known_elr = [r for r in p.replicas if r in set(p.last_known_elr) | {bid}]
            if p.leader == bid:
                self._elected(p, NO_LEADER, p.leader_epoch + 1, "none", exclude=bid)
                new.leader, new.leader_epoch = NO_LEADER, p.leader_epoch + 1
            new.partition_epoch += 1
            self._write_partition(p, new, f"broker {bid} restarted uncleanly (unclean exclusion)")

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
        self._elect_leaderless("periodic check")
        self._complete_reassignments()
        self._plan_recoveries(now_ms)
        for key in list(self.recoveries):
            self._maybe_finish_recovery(key, now_ms)

    def _fence(self, bid: int, reason: str) -> None:
        self._emit({"type": "broker_change", "broker_id": bid, "fenced": True})
        self._event("broker_fenced", broker=bid, reason=reason)
        self._remove_broker_from_partitions(bid, f"broker {bid} fenced ({reason})")

    def _unfence(self, bid: int) -> None:
        self._emit({"type": "broker_change", "broker_id": bid, "fenced": False, "in_controlled_shutdown": False})
        self._event("broker_unfenced", broker=bid)
        # A leaderless partition whose ISR or ELR holds this broker can be served again (002 2.8).
        self._elect_leaderless(f"broker {bid} unfenced")

    # --- partitions: elections, ISR and ELR changes (002 2.8, 2.9; 001 5.2) ---------------
    def _eligible(self, bid: int) -> bool:
        b = self.image.brokers.get(bid)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _min_isr(self, p: PartitionState) -> int:
        topic = self.image.topics.get(p.topic)
        return topic.min_isr if topic else 1

    def _update_elr(self, old: PartitionState, new: PartitionState) -> None:
        """After an ISR change (PROTOCOL.md 4): at or above min ISR the HWM can advance, so nobody
        outside the ISR keeps a completeness guarantee and ELR and LastKnownELR are cleared
        (cases D, E, F, G); below it, the replicas the ISR just lost join the ELR (cases A, C),
        since the HWM cannot pass them. ISR, ELR and LastKnownELR stay disjoint."""
        if not self.config.elr_enabled:
            new.elr, new.last_known_elr = [], []
            return
        if len(new.isr) >= self._min_isr(new):
            new.elr, new.last_known_elr = [], []
            return
        removed = set(old.isr) - set(new.isr)
        elr = (set(old.elr) | removed) - set(new.isr)
        new.elr = [r for r in new.replicas if r in elr]
        new.last_known_elr = [r for r in new.replicas if r in set(old.last_known_elr) - elr - set(new.isr)]

    def _remove_broker_from_partitions(self, bid: int, reason: str) -> None:
        """The controller may only shrink ISRs (002 2.9.1): drop the broker from every ISR it is
        in, electing a new leader where it led. With the ELR (KIP-966) the ISR may become
        empty; under `no-elr` the last ISR member stays (3.5's Last Replica Standing)."""
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if bid not in p.isr and p.leader != bid:
                continue
            new = copy.deepcopy(p)
            if bid in new.isr and (len(new.isr) > 1 or self.config.elr_enabled):
                new.isr = [r for r in new.isr if r != bid]
            self._update_elr(p, new)
            if p.leader == bid:
                self._elect_into(new, exclude=bid)
            if new.isr == p.isr and new.leader == p.leader and new.elr == p.elr:
                continue
            new.partition_epoch += 1
            self._write_partition(p, new, reason)

    def _choose_leader(self, p: PartitionState, exclude: int | None = None) -> tuple[int, str]:
        """(leader, how): an eligible ISR member in replica order; else an eligible ELR member
        (001 5.2); else, only with unclean.leader.election.enable (004), any live replica;
        else no leader."""
        for members, how in ((p.isr, "isr"), (p.elr, "elr")):
            for r in p.replicas:
                if r in members and r != exclude and self._eligible(r):
                    return r, how
        if self.config.unclean_election:
            for r in p.replicas:
                if r != exclude and self._eligible(r):
                    return r, "unclean"
        return NO_LEADER, "none"

    def _elected(self, before: PartitionState, leader: int, leader_epoch: int, how: str,
                 exclude: int | None = None) -> None:
        """The trace's election record: who was chosen, how, and the sets it was chosen from (trace.py)."""
        self._event("leader_elected", topic=before.topic, partition=before.partition, leader=leader,
                    leader_epoch=leader_epoch, how=how, unclean=how == "unclean" or how.startswith("recovery"),
                    isr=list(before.isr), elr=list(before.elr), last_known_elr=list(before.last_known_elr),
                    replicas=list(before.replicas),
                    candidates=[r for r in before.replicas if r != exclude and self._eligible(r)])

    def _elect_into(self, new: PartitionState, exclude: int | None = None) -> None:
        """Set a new leader on `new` (a copy being written) and bump its leader epoch."""
        leader, how = self._choose_leader(new, exclude)
        self._elected(new, leader, new.leader_epoch + 1, how, exclude)
        new.leader = leader
        new.leader_epoch += 1
        if how == "elr":  # case B: the elected ELR member moves to the ISR
            old = copy.deepcopy(new)
            new.isr = [r for r in new.replicas if r in set(new.isr) | {leader}]
            self._update_elr(old, new)
        elif how == "unclean":
            self._record_unclean_leader(new, leader, "unclean-leader-election", {})

    def _elect_leaderless(self, reason: str) -> None:
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if p.leader != NO_LEADER or self._choose_leader(p)[0] == NO_LEADER:
                continue
            new = copy.deepcopy(p)
            self._elect_into(new)
            new.partition_epoch += 1
            self._write_partition(p, new, reason)

    def _record_unclean_leader(self, new: PartitionState, leader: int, strategy: str,
                               candidates: dict[int, tuple[int, int]]) -> None:
        """The new leader's log becomes the truth, committed records it lacks are gone: report it
        as a potential data-loss event (001 5.3.2) in the metadata log and the controller's log."""
        lost_isr, lost_elr = list(new.isr), list(new.elr)
        new.leader, new.isr, new.elr, new.last_known_elr = leader, [leader], [], []
        self._emit({"type": "unclean_recovery", "topic": new.topic, "partition": new.partition, "leader": leader,
                    "leader_epoch": new.leader_epoch, "strategy": strategy,
                    "candidates": {str(b): list(v) for b, v in sorted(candidates.items())}})
        self._event("unclean_recovery", topic=new.topic, partition=new.partition, leader=leader, strategy=strategy,
                    candidates={str(b): list(v) for b, v in sorted(candidates.items())},
                    previous_isr=lost_isr, previous_elr=lost_elr, potential_data_loss=True)

    # --- unclean recovery (001 5.3) ----------------------------------------------------------
    def _recovery_candidates(self, p: PartitionState) -> list[int] | None:
        """Whose logs to inspect for a leaderless partition no clean election can serve, or None."""
        if p.leader != NO_LEADER or not self.config.elr_enabled:
            return None
        if self._choose_leader(p)[0] != NO_LEADER:
            return None
        strategy = self.config.unclean_recovery_strategy
        if strategy == "balanced" and not p.isr and not p.elr:
            # The LastKnownELR is the recovery quorum (001 5.3.2). It can only be empty if the
            # partition was leaderless before any ELR existed (min ISR 1 at creation): ask all.
            return list(p.last_known_elr) or list(p.replicas)
        if strategy == "proactive":
            return list(p.replicas)  # fenced ISR/ELR members are not waited for (001 5.3.1)
        if strategy == "manual" and not p.isr and not p.elr and (p.topic, p.partition) not in self._manual_noted:
            self._manual_noted.add((p.topic, p.partition))
            self._event("unclean_recovery_needed", topic=p.topic, partition=p.partition,
                        last_known_elr=p.last_known_elr,
                        action="waiting for an operator: python -m kafkaesque_harness.clusters.broker admin elect")
        return None

    def _plan_recoveries(self, now_ms: int) -> None:
        for key, p in sorted(self.image.partitions.items()):
            candidates = self._recovery_candidates(p)
            if candidates is None:
                if self.recoveries.pop(key, None) is not None:
                    self._event("unclean_recovery_abandoned", topic=key[0], partition=key[1],
                                reason="a clean election became possible")
                continue
            rec = self.recoveries.get(key)
            if rec is None or rec.candidates != candidates:
                self.recoveries[key] = UncleanRecovery(self.config.unclean_recovery_strategy, candidates, now_ms)
                self._event("unclean_recovery_started", topic=key[0], partition=key[1],
                            strategy=self.config.unclean_recovery_strategy, candidates=candidates)

    def log_info_requests(self) -> list[tuple[tuple[str, int], int, str, int]]:
        """GetReplicaLogInfo requests the shell should send now: (partition, broker, host, port)."""
        out = []
        for key, rec in sorted(self.recoveries.items()):
            for bid in rec.candidates:
                b = self.image.brokers.get(bid)
                if bid not in rec.replies and b is not None:
                    out.append((key, bid, b.host, b.port))
        return out

    def on_replica_log_info(self, key: tuple[str, int], bid: int, reply: dict[str, Any], now_ms: int) -> None:
        """A GetReplicaLogInfo reply; only one from the broker's current registration counts."""
        rec = self.recoveries.get(key)
        b = self.image.brokers.get(bid)
        if rec is None or b is None or reply.get("error") != rpc.NONE:
            return
        if int(reply.get("broker_epoch", -1)) != b.broker_epoch:
            return  # an answer from an earlier incarnation of the broker
        rec.replies[bid] = (int(reply["last_epoch"]), int(reply["log_end_offset"]))
        self._maybe_finish_recovery(key, now_ms)

    def _maybe_finish_recovery(self, key: tuple[str, int], now_ms: int) -> None:
        """Balanced: every candidate answered, elect the highest (last epoch, LEO), once it can
        lead. Proactive: everyone answered or the timeout passed: the best live reply."""
        rec, p = self.recoveries.get(key), self.image.partitions.get(key)
        if rec is None or p is None or not rec.replies:
            return
        everyone = set(rec.replies) >= set(rec.candidates)
        if rec.strategy == "balanced":
            if not everyone:
                return
            best = max(rec.replies, key=lambda b: (rec.replies[b], -p.replicas.index(b)))
            if not self._eligible(best):
                return  # the best log's broker is not unfenced yet: wait for it, not for a worse log
        else:
            if not everyone and now_ms - rec.started_ms < self.config.unclean_recovery_timeout_ms:
                return
            live = [b for b in rec.replies if self._eligible(b)]
            if not live:
                return
            best = max(live, key=lambda b: (rec.replies[b], -p.replicas.index(b)))
        del self.recoveries[key]
        self._elect_unclean(p, best, rec.strategy, rec.replies)

    def _elect_unclean(self, p: PartitionState, leader: int, strategy: str,
                       candidates: dict[int, tuple[int, int]]) -> None:
        new = copy.deepcopy(p)
        new.leader_epoch += 1
        new.partition_epoch += 1
        self._elected(p, leader, new.leader_epoch, f"recovery:{strategy}")
        self._record_unclean_leader(new, leader, strategy, candidates)
        self._write_partition(p, new, f"unclean recovery ({strategy})")

    def _handle_elect_leader(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """The operator's recourse under `manual` (001 5.3.1): make this replica the leader of a
        partition no clean election can serve. Refused while a clean election is possible."""
        key = (str(body["topic"]), int(body["partition"]))
        p = self.image.partitions.get(key)
        bid = int(body["broker_id"])
        if p is None:
            return {"error": rpc.UNKNOWN_TOPIC_OR_PARTITION}
        if bid not in p.replicas or not self._eligible(bid):
            return {"error": rpc.INELIGIBLE_REPLICA, "message": f"broker {bid} is not a live replica of {key}"}
        if p.leader != NO_LEADER or self._choose_leader(p)[0] != NO_LEADER:
            return {"error": rpc.INVALID_REQUEST,
                    "message": "the partition has a leader or a clean election is possible; nothing to recover"}
        self.recoveries.pop(key, None)
        self._manual_noted.discard(key)
        self._elect_unclean(p, bid, "manual", {})
        return {"error": rpc.NONE, "partition": self.image.partitions[key].to_record()}

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
        self._update_elr(p, new)
        new.partition_epoch += 1
        self._write_partition(p, new, f"AlterPartition from leader {bid}")
        # PROTOCOL.md 7: the catch-up step and the completion may share one request.
        self._maybe_complete_reassignment(key)
        return {"error": rpc.NONE, "partition": self.image.partitions[key].to_record()}

    # --- reassignment and preferred leaders (PROTOCOL.md 7) ---------------------------------
    def _handle_alter_partition_reassignments(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """Start (replicas: [ids]) or cancel (replicas: null) reassignments, one result each.
        A partition already being reassigned refuses a new target (REASSIGNMENT_IN_PROGRESS):
        cancel it first. Kafka would replace the target; refusing keeps `adding` exact (a
        replica still catching up for the old target is never counted as caught up)."""
        items = body.get("reassignments")
        if not isinstance(items, list):
            return {"error": rpc.INVALID_REQUEST, "message": "reassignments must be a list", "results": []}
        results = []
        for item in items:
            topic, partition = str(item["topic"]), int(item["partition"])
            target = item.get("replicas")
            if target is None:
                err, msg = self._cancel_reassignment(topic, partition)
            else:
                err, msg = self._start_reassignment(topic, partition, [int(r) for r in target])
            results.append({"topic": topic, "partition": partition, "error": err, "message": msg})
        return {"error": rpc.NONE, "results": results}

    def _start_reassignment(self, topic: str, partition: int, target: list[int]) -> tuple[int, str | None]:
        p = self.image.partitions.get((topic, partition))
        where = f"{topic}-{partition}"
        if p is None:
            return rpc.UNKNOWN_TOPIC_OR_PARTITION, f"partition {where} does not exist"
        if not target:
            return rpc.INVALID_REPLICA_ASSIGNMENT, f"the target replica list for {where} is empty"
        if len(set(target)) != len(target):
            return rpc.INVALID_REPLICA_ASSIGNMENT, f"the target replicas {target} for {where} contain duplicates"
        unknown = [r for r in target if r not in self.image.brokers]
        if unknown:
            return rpc.INVALID_REPLICA_ASSIGNMENT, f"brokers {unknown} in the target for {where} are not registered"
        if len(target) < self._min_isr(p):
            return (rpc.INVALID_REPLICA_ASSIGNMENT, f"the target {target} for {where} has fewer replicas than "
                    f"min.insync.replicas={self._min_isr(p)}, so it could never complete")
        if p.adding or p.removing:
            return (rpc.REASSIGNMENT_IN_PROGRESS, f"{where} is already being reassigned to "
                    f"{_target(p)}; cancel that first")
        adding = [r for r in target if r not in p.replicas]
        removing = [r for r in p.replicas if r not in target]
        new = copy.deepcopy(p)
        # Grow: current ∪ target, target order first, so replicas[0] is the target's preferred leader.
        new.replicas = target + removing
        new.adding, new.removing = adding, removing
        new.partition_epoch += 1
        self._event("reassignment_started", topic=topic, partition=partition, **{"from": p.replicas},
                    to=target, adding=adding, removing=removing)
        self._write_partition(p, new, f"reassignment to {target} started")
        self._maybe_complete_reassignment((topic, partition))  # removal-only (or reorder) at once
        return rpc.NONE, None

    def _maybe_complete_reassignment(self, key: tuple[str, int]) -> bool:
        """PROTOCOL.md 7.3: once every adding replica is in the ISR and |ISR−removing| >= min ISR."""
        p = self.image.partitions.get(key)
        if p is None or not (p.adding or p.removing):
            return False
        if not set(p.adding) <= set(p.isr):
            return False
        remaining_isr = [r for r in p.isr if r not in p.removing]
        if len(remaining_isr) < self._min_isr(p):
            return False
        removing = set(p.removing)
        new = copy.deepcopy(p)
        new.replicas = _target(p)
        new.isr = [r for r in new.replicas if r in remaining_isr]
        new.elr = [r for r in p.elr if r not in removing]
        new.last_known_elr = [r for r in p.last_known_elr if r not in removing]
        new.adding, new.removing = [], []
        self._bump_epochs(new, leaving=removing)
        self._event("reassignment_completed", topic=key[0], partition=key[1], replicas=new.replicas,
                    removed=sorted(removing), leader=new.leader, leader_epoch=new.leader_epoch)
        self._write_partition(p, new, f"reassignment to {new.replicas} completed")
        return True

    def _cancel_reassignment(self, topic: str, partition: int) -> tuple[int, str | None]:
        """Revert to the original replicas (replicas − adding). Refused when no original replica is
        left in the ISR or ELR (the revert would need an unclean election) unless unclean
        election is enabled: Kafka's rule (PartitionReassignmentRevert.unclean)."""
        p = self.image.partitions.get((topic, partition))
        where = f"{topic}-{partition}"
        if p is None:
            return rpc.UNKNOWN_TOPIC_OR_PARTITION, f"partition {where} does not exist"
        if not p.adding and not p.removing:
            return rpc.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {where} is in progress"
        adding = set(p.adding)
        new = copy.deepcopy(p)
        new.replicas = [r for r in p.replicas if r not in adding]
        new.isr = [r for r in new.replicas if r in p.isr]
        new.elr = [r for r in p.elr if r not in adding]
        new.last_known_elr = [r for r in p.last_known_elr if r not in adding]
        if not new.isr and not new.elr and not self.config.unclean_election:
            return (rpc.INVALID_REPLICA_ASSIGNMENT, f"cannot cancel the reassignment of {where}: none of the "
                    f"original replicas {new.replicas} is in the ISR {p.isr}, so reverting would need an "
                    "unclean leader election")
        new.adding, new.removing = [], []
        self._bump_epochs(new, leaving=adding)
        self._event("reassignment_cancelled", topic=topic, partition=partition, replicas=new.replicas,
                    dropped=sorted(adding), leader=new.leader)
        self._write_partition(p, new, f"reassignment of {where} cancelled")
        return rpc.NONE, None

    def _bump_epochs(self, new: PartitionState, leaving: set[int]) -> None:
        """The end of a reassignment (completed or cancelled) bumps both epochs; a leader that left
        the replicas, or none at all, is replaced by an eligible ISR member in replica order."""
        if new.leader in leaving or new.leader == NO_LEADER:
            self._elect_into(new)  # bumps the leader epoch
        else:
            self._elected(new, new.leader, new.leader_epoch + 1, "reassignment")
            new.leader_epoch += 1
        new.partition_epoch += 1

    def _complete_reassignments(self) -> None:
        for key in sorted(self.image.partitions):
            p = self.image.partitions[key]
            if p.adding or p.removing:
                self._maybe_complete_reassignment(key)

    def reassignments(self) -> list[dict[str, Any]]:
        return [{"topic": p.topic, "partition": p.partition, "replicas": list(p.replicas), "target": _target(p),
                 "adding": list(p.adding), "removing": list(p.removing)}
                for _, p in sorted(self.image.partitions.items()) if p.adding or p.removing]

    def _handle_list_partition_reassignments(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        return {"error": rpc.NONE, "reassignments": self.reassignments()}

    def _handle_elect_preferred_leaders(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """Move leadership to replicas[0] where it is an eligible ISR member (checkLoadBalancing)."""
        wanted = body.get("partitions")
        keys = (sorted(self.image.partitions) if wanted is None
                else [(str(w["topic"]), int(w["partition"])) for w in wanted])
        results = []
        for key in keys:
            res: dict[str, Any] = {"topic": key[0], "partition": key[1], "error": rpc.NONE, "message": None}
            p = self.image.partitions.get(key)
            if p is None:
                res.update(error=rpc.UNKNOWN_TOPIC_OR_PARTITION, message=f"partition {key[0]}-{key[1]} does not exist")
            elif p.leader == p.replicas[0]:
                res.update(error=rpc.ELECTION_NOT_NEEDED, message=f"already led by its preferred replica {p.leader}",
                           leader=p.leader)
            elif p.replicas[0] not in p.isr or not self._eligible(p.replicas[0]):
                res.update(error=rpc.PREFERRED_LEADER_NOT_AVAILABLE, leader=p.leader,
                           message=f"preferred replica {p.replicas[0]} is not a live ISR member (ISR {p.isr})")
            else:
                new = copy.deepcopy(p)
                self._elected(p, p.replicas[0], p.leader_epoch + 1, "preferred")
                new.leader = p.replicas[0]
                new.leader_epoch += 1
                new.partition_epoch += 1
                self._event("preferred_leader_elected", topic=key[0], partition=key[1], **{"from": p.leader},
                            to=new.leader, leader_epoch=new.leader_epoch)
                self._write_partition(p, new, "preferred leader election")
                res["leader"] = new.leader
            results.append(res)
        return {"error": rpc.NONE, "results": results}

    def _handle_unregister_broker(self, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """Forget a decommissioned broker. Refused while a partition still lists it as a replica
        (reassign them away first) or while it is unfenced with a live session (stop it first)."""
        bid = int(body["broker_id"])
        b = self.image.brokers.get(bid)
        if b is None:
            return {"error": rpc.BROKER_ID_NOT_REGISTERED, "message": f"broker {bid} is not registered"}
        hosted = [f"{p.topic}-{p.partition}" for _, p in sorted(self.image.partitions.items()) if bid in p.replicas]
        if hosted:
            shown = ", ".join(hosted[:5]) + (" ..." if len(hosted) > 5 else "")
            return {"error": rpc.INVALID_REQUEST,
                    "message": f"broker {bid} is still a replica of {len(hosted)} partitions ({shown}); "
                               "reassign them away first"}
        if not b.fenced and not self._session_expired(bid, now_ms):
            return {"error": rpc.INVALID_REQUEST,
                    "message": f"broker {bid} is unfenced and its session is live; stop it first"}
        self._emit({"type": "broker_unregistered", "broker_id": bid})
        self.sessions.pop(bid, None)
        self._event("broker_unregistered", broker=bid, broker_epoch=b.broker_epoch)
        return {"error": rpc.NONE, "message": None}

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
            "reassignments": self.reassignments(),
            "config": {"unclean_leader_election": self.config.unclean_election,
                       "unclean_recovery_strategy": self.config.unclean_recovery_strategy,
                       "variants": sorted(self.config.variants)},
            # 001 5.3.2: every unclean recovery is reported as a potential data-loss event.
            "unclean_recoveries": list(self.image.unclean_recoveries),
            "recoveries_in_progress": [
                {"topic": k[0], "partition": k[1], "strategy": r.strategy, "candidates": r.candidates,
                 "replies": {str(b): list(v) for b, v in r.replies.items()}}
                for k, r in sorted(self.recoveries.items())],
        }


def _summary(p: PartitionState) -> dict[str, Any]:
    out = {"leader": p.leader, "isr": p.isr, "elr": p.elr, "last_known_elr": p.last_known_elr,
           "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch}
    if p.adding or p.removing:
        out.update(replicas=p.replicas, adding=p.adding, removing=p.removing)
    return out


def _target(p: PartitionState) -> list[int]:
    """A reassigning partition's target: its replicas without the ones being removed (in order)."""
    return [r for r in p.replicas if r not in p.removing]
