"""One partition replica's state machine: roles, the HWM from the Maximal ISR, ISR changes, divergence.

Implements 002 sections 2.2 (fetch), 2.6 (min ISR), 2.7 (HWM), 2.9 (ISR changes) and 2.10
(role transitions), with the rules and traps of PROTOCOL.md sections 2-4. No sockets and no
clock: every method that needs time takes `now_ms`; the only I/O is the PartitionLog, which
unit tests run on a temporary directory. The asyncio shell (server.py) moves requests in
and out, keeps the acks=all purgatory, and sends the AlterPartition requests this object
asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import (
    BatchHeader,
    NonContiguousAppendError,
    PartitionLog,
    follower_truncation_offset,
    iter_batch_headers,
    leader_divergence,
    validate_batches,
)
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, BrokerInfo, PartitionState
from kafkaesque_harness.clusters.broker.producer_state import ProducerStateTable

OFFSET_NOT_AVAILABLE = 78
LEADER = "leader"
FOLLOWER = "follower"
NONE_ROLE = "none"


@dataclass
class ReplicaConfig:
    replica_lag_time_max_ms: int = 10_000
    variants: frozenset[str] = field(default_factory=frozenset)


@dataclass
class FollowerState:
    """What the leader knows of one follower (PROTOCOL.md 1); reset on every epoch change."""

    leo: int = -1                 # unknown until it fetches in this epoch
    broker_epoch: int = -1
    fetched_this_epoch: bool = False
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = 0
    fetch_epoch: int = -1         # the leader epoch its last fetch was recorded in (the trace's fact)


class Replica:
    def __init__(self, node_id: int, topic: str, partition: int, log: PartitionLog, hwm: int, min_isr: int,
                 config: ReplicaConfig | None = None, event_log: Callable[[dict[str, Any]], None] | None = None):
        self.node_id = node_id
        self.topic, self.partition = topic, partition
        self.log = log
        self.hwm = min(hwm, log.log_end_offset)
        self.min_isr = min_isr
        self.config = config or ReplicaConfig()
        self._event_log = event_log or (lambda e: None)
        self.role = NONE_ROLE
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.maximal_isr: list[int] = []
        self.leso = 0  # leader epoch start offset: the LEO when this replica became leader
        self.followers: dict[int, FollowerState] = {}
        self.alter_in_flight: list[int] | None = None
        self.producers = ProducerStateTable()
        # The log end offset the producer table is built up to: a follower keeps it as it copies (Kafka's
        # UnifiedLog.appendAsFollower updates the producer state), so becoming leader reads no log; None when
        # the table does not describe the log (a restart's recovered log, a truncation) and is rebuilt.
        self._producers_end: int | None = self.leo if self.leo == log.log_start_offset else None
        self._first_transition = True  # for the truncate-to-hw variant (pre-KIP-101 restart)
        # For the no-epoch-fencing variant: has this follower checked its log against its leader's
        # since it became a follower in this leader epoch (a fetch carrying its last epoch answered
        # without a divergence)?
        self._epoch_validated = False

    # --- helpers -------------------------------------------------------------------------
    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    def _event(self, event: str, **fields: Any) -> None:
        self._event_log({"event": event, "topic": self.topic, "partition": self.partition,
                         "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch, **fields})

    def epoch_cache(self) -> list[list[int]]:
        return [[e.epoch, e.start_offset] for e in self.log.epoch_cache.entries]

    def _member_facts(self, members: list[int]) -> dict[str, dict[str, int]]:
        """What the leader knew of each member when it decided (clusters/broker/trace.py)."""
        out = {}
        for r in members:
            if r == self.node_id:
                out[str(r)] = {"leo": self.leo, "fetch_epoch": self.leader_epoch}
            else:
                f = self.followers.get(r, FollowerState())
                out[str(r)] = {"leo": f.leo, "fetch_epoch": f.fetch_epoch}
        return out

    # --- metadata: role transitions (002 2.10) -------------------------------------------
    def apply_partition_state(self, p: PartitionState, now_ms: int) -> str | None:
        """Act on the controller's view of this partition; returns the transition made, if any."""
        if p.leader_epoch < self.leader_epoch or (
            p.leader_epoch == self.leader_epoch and p.partition_epoch <= self.partition_epoch
        ):
            return None  # stale (PROTOCOL.md 1: apply only newer partition epochs)
        self.replicas = list(p.replicas)
        if p.leader == self.node_id:
            if self.role != LEADER or p.leader_epoch > self.leader_epoch:
                self._become_leader(p, now_ms)
                return "become-leader"
            self._update_isr(p)  # 002 2.10.2: same epoch, the ISR changed
            return None
        if self.role != FOLLOWER or p.leader_epoch > self.leader_epoch or p.leader != self.leader:
            self._become_follower(p)
            return "become-follower"
        self._update_isr(p)
        return None

    def _update_isr(self, p: PartitionState) -> None:
        old = list(self.isr)
        self.isr = list(p.isr)
        self.partition_epoch = p.partition_epoch
        self.maximal_isr = _union(self.isr, self.alter_in_flight or [], self.replicas)
        if self.role == LEADER:
            # A reassignment changes the replica set within a leader epoch (PROTOCOL.md 7): serve
            # the replicas being added (they catch up and join the ISR like any follower) and
            # refuse fetches from replicas no longer in the set.
            for r in self.replicas:
                if r != self.node_id and r not in self.followers:
                    self.followers[r] = FollowerState()
            for r in [r for r in self.followers if r not in self.replicas]:
                del self.followers[r]
        if old != self.isr:
            self._event("isr_updated", **{"from": old, "to": self.isr})

    def _become_leader(self, p: PartitionState, now_ms: int) -> None:
        old_role, old_epoch = self.role, self.leader_epoch
        self.role, self.leader = LEADER, self.node_id
        self.leader_epoch, self.partition_epoch = p.leader_epoch, p.partition_epoch
        self.isr = list(p.isr)
        self.maximal_isr = list(p.isr)
        self.alter_in_flight = None
        self.leso = self.leo
        # KAFKA-7415: the new epoch goes into the cache at once, so a divergence lookup for
        # an older epoch ends where this leader's own epoch starts.
        self.log.assign_epoch(self.leader_epoch)
        # 002 2.9 / PROTOCOL.md 4: follower state is cleared on every epoch change; ISR
        # members get a full lag timeout of grace before they can be shrunk away.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in self.replicas if r != self.node_id}
        if self._producers_end != self.leo:
            self._rebuild_producers()
        self._first_transition = False
        self._event("become_leader", **{"from": f"{old_role}@{old_epoch}", "to": f"leader@{self.leader_epoch}"},
                    isr=self.isr, replicas=self.replicas, leso=self.leso, leo=self.leo, hwm=self.hwm,
                    min_isr=self.min_isr, epoch_cache=self.epoch_cache(),
                    followers={str(r): f.fetch_epoch for r, f in self.followers.items()})

    def _become_follower(self, p: PartitionState) -> None:
        old_role, old_epoch = self.role, self.leader_epoch
        if self._first_transition and "truncate-to-hw" in self.config.variants:
            # The pre-KIP-101 flaw (004, scenario 1): a restarted follower truncates to its
            # checkpointed HW instead of asking the leader where the logs diverge.
            before = self.leo
            cut = self.log.truncate_to(self.hwm)
            self._producers_truncated()
            self._event("truncate_to_hw_variant", truncated_to=cut, reason="truncate-to-hw variant: restart",
                        hwm=self.hwm, epoch_cache=self.epoch_cache(), **{"from": before, "to": cut})
        self._first_transition = False
        self.role = FOLLOWER if p.leader != NO_LEADER else NONE_ROLE
        self.leader = p.leader
        self.leader_epoch, self.partition_epoch = p.leader_epoch, p.partition_epoch
        self.isr = list(p.isr)
        self.maximal_isr = []
        self.alter_in_flight = None
        self.followers = {}
        self._epoch_validated = False
        self._event("become_follower", **{"from": f"{old_role}@{old_epoch}",
                                         "to": f"{self.role}@{self.leader_epoch}"}, leader=self.leader,
                    leo=self.leo, hwm=self.hwm, epoch_cache=self.epoch_cache())

    # --- leader: produce (002 2.5, 2.6) ----------------------------------------------------
    def check_produce(self, acks: int) -> int:
        if self.role != LEADER:
            return rpc.NOT_LEADER_OR_FOLLOWER
        if acks == -1 and len(self.isr) < self.min_isr:
            return rpc.NOT_ENOUGH_REPLICAS  # rejected before the append: definitely not written
        return rpc.NONE

    def append(self, raw: bytes, headers: list[BatchHeader]) -> tuple[int, int]:
        first, last = self.log.append_as_leader(raw, self.leader_epoch, headers)
        self._producers_appended(headers, first, raw)
        self.maybe_advance_hwm()
        return first, last

    # --- producer state (KIP-98): kept as the log grows, rebuilt only when it cannot be ----------------
    def _producers_appended(self, headers: list[BatchHeader], first: int, raw: bytes) -> None:
        """The table follows an append that starts where it ends; else it is left to a rebuild."""
        if self._producers_end == first:
            self.producers.record(headers, first, raw)
            self._producers_end = self.leo
        else:
            self._producers_end = None

    def _producers_truncated(self) -> None:
        """A truncation below what the table saw leaves entries of removed batches: rebuild it when needed
        (Kafka's UnifiedLog.truncateTo reloads the producer state)."""
        if self._producers_end is not None and self.leo < self._producers_end:
            self._producers_end = None

    def _rebuild_producers(self) -> None:
        """From every batch header of the log (and the bytes of each control batch): a read of the whole log."""
        self.producers = ProducerStateTable.from_headers(self.log.batch_headers(), self._read_batch)
        self._producers_end = self.leo

    def _read_batch(self, h: BatchHeader) -> bytes:
        return self.log.read(h.base_offset, h.size)[:h.size]

    def last_stable_offset(self) -> int:
        return self.producers.last_stable_offset(self.hwm)

    # --- leader: the HWM (002 2.7, KIP-966) ---------------------------------------------
    def below_min_isr(self) -> bool:
        """True when the HWM cannot advance because the committed ISR is below min ISR (KIP-966):
        pending acks=all requests then end with NOT_ENOUGH_REPLICAS_AFTER_APPEND (002 2.6)."""
        return (self.role == LEADER and len(self.isr) < self.min_isr
                and "no-elr" not in self.config.variants)

    def maybe_advance_hwm(self) -> bool:
        """HWM = the largest offset every Maximal ISR member has reached, applied only when the
        committed ISR meets min ISR (KIP-966; the `no-elr` variant restores the old rule, under
        which a lone leader advances it: the last replica standing of 002 2.4.2)."""
        if self.role != LEADER:
            return False
        if self.below_min_isr():
            return False
        reached = [self.leo if r == self.node_id else self.followers.get(r, FollowerState()).leo
                   for r in self.maximal_isr]
        new = min(reached) if reached else self.leo
        if new > self.hwm:
            self._event("hwm_advanced", **{"from": self.hwm, "to": new}, isr=self.isr, maximal_isr=self.maximal_isr,
                        min_isr=self.min_isr, members=self._member_facts(self.maximal_isr))
            self.hwm = new
            return True
        return False

    # --- leader: follower fetches (PROTOCOL.md 2) -----------------------------------------
    def check_fetch_epoch(self, current_leader_epoch: int) -> int:
        """KIP-320: a request from an older epoch is fenced, from a newer one unknown."""
        if self.role != LEADER:
            return rpc.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return rpc.FENCED_LEADER_EPOCH
            if current_leader_epoch > self.leader_epoch:
                return rpc.UNKNOWN_LEADER_EPOCH
        return rpc.NONE

    def record_follower_fetch(self, req: dict[str, Any], now_ms: int) -> dict[str, Any] | None:
        """Validate a follower's fetch and learn its position. Returns an immediate reply (an
        error or a diverging epoch, changing no state) or None when records may be read."""
        err = self.check_fetch_epoch(int(req["current_leader_epoch"]))
        rid = int(req["replica_id"])
        if err == rpc.NONE and rid not in self.followers:
            err = rpc.NOT_LEADER_OR_FOLLOWER  # not a replica of this partition
        if err != rpc.NONE:
            return {"error": err, "high_watermark": -1}
        fetch_offset, last_epoch = int(req["fetch_offset"]), int(req["last_fetched_epoch"])
        div = leader_divergence(self.log.epoch_cache, self.leo, self.leader_epoch, fetch_offset, last_epoch)
        if div is not None:
            return {"error": rpc.NONE, "high_watermark": self.hwm, "log_start_offset": self.log.log_start_offset,
                    "diverging_epoch": {"epoch": div[0], "end_offset": div[1]}, "records": ""}
        if fetch_offset > self.leo:
            return {"error": rpc.OFFSET_OUT_OF_RANGE, "high_watermark": self.hwm, "log_end_offset": self.leo}
        f = self.followers[rid]
        # Caught up: it reached the LEO we had at its previous fetch (Kafka's lastCaughtUpTime).
        if fetch_offset >= self.leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.leader_leo_at_last_fetch and f.last_fetch_ms:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.leo = fetch_offset
        f.broker_epoch = int(req["broker_epoch"])
        f.fetched_this_epoch = True
        f.fetch_epoch = self.leader_epoch
        f.last_fetch_ms = now_ms
        f.leader_leo_at_last_fetch = self.leo
        self.maybe_advance_hwm()
        return None

    def read_for_follower(self, fetch_offset: int, max_bytes: int) -> dict[str, Any]:
        raw = self.log.read(fetch_offset, max_bytes) if fetch_offset < self.leo else b""
        return {"error": rpc.NONE, "high_watermark": self.hwm, "log_start_offset": self.log.log_start_offset,
                "diverging_epoch": None, "records": rpc.b64(raw)}

    # --- leader: ISR changes through AlterPartition (002 2.9.2) ----------------------------
    def wanted_isr_change(self, now_ms: int, brokers: dict[int, BrokerInfo],
                          fetched_by: int | None = None) -> dict[str, Any] | None:
        """The AlterPartition request to send now, if the ISR should change and none is in flight.

        Shrink, on any call (the housekeeping tick or a fetch): a member that has not caught up
        within replica.lag.time.max.ms (PROTOCOL.md 4 Shrink; 002 2.9 latency rules). Caught up
        means Kafka's lastCaughtUpTimeMs (record_follower_fetch), so a member that keeps fetching
        at the LEO of an idle partition stays in.

        Expand, only on a fetch: `fetched_by` is the follower whose fetch record_follower_fetch
        has just recorded, and it joins if that fetch reached the HWM and the LESO in this leader
        epoch, from an unfenced broker not shutting down (KIP-841), with the registered broker
        epoch (KIP-903) (PROTOCOL.md 4 Expand; 002 2.9 consistency rules). As in Kafka
        (updateFollowerFetchState -> maybeExpandIsr), a call without it never expands: judged
        on a tick, the last fetch of a follower cut off from an idle partition still looks
        caught up (its LEO is the unchanged HWM), and the lag shrink and the re-add alternated
        every tick. A fetch that finds an AlterPartition in flight is not judged; the next one is.
        """
        if self.role != LEADER or self.alter_in_flight is not None:
            return None
        lag = self.config.replica_lag_time_max_ms
        keep = [r for r in self.isr
                if r == self.node_id or now_ms - self.followers.get(r, FollowerState()).last_caught_up_ms <= lag]
        add = []
        if fetched_by is not None and fetched_by in self.followers and fetched_by not in self.isr:
            r, f = fetched_by, self.followers[fetched_by]
            b = brokers.get(r)
            if (f.fetched_this_epoch and f.leo >= self.hwm and f.leo >= self.leso and b is not None
                    and not b.fenced and not b.in_controlled_shutdown and f.broker_epoch == b.broker_epoch):
                add.append(r)
        proposed = [r for r in self.replicas if r in keep or r in add]
        if proposed == self.isr or self.node_id not in proposed:
            return None
        self.alter_in_flight = proposed
        self.maximal_isr = _union(self.isr, proposed, self.replicas)  # 002 2.9.2: before the reply
        added = {str(r): {"leo": self.followers[r].leo, "fetch_epoch": self.followers[r].fetch_epoch,
                          "broker_epoch": self.followers[r].broker_epoch,
                          # the leader's metadata: the epoch the fetch's must equal (KIP-903)
                          "registered_broker_epoch": brokers[r].broker_epoch if r in brokers else None}
                 for r in proposed if r not in self.isr}
        removed = {str(r): {"leo": self.followers.get(r, FollowerState()).leo,
                            "lag_ms": now_ms - self.followers.get(r, FollowerState()).last_caught_up_ms,
                            "reason": "not caught up within replica.lag.time.max.ms"}
                   for r in self.isr if r not in proposed}
        self._event("alter_partition_sent", **{"from": self.isr, "to": proposed}, hwm=self.hwm, leso=self.leso,
                    added=added, removed=removed)
        return {"topic": self.topic, "partition": self.partition, "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch,
                "new_isr": [{"broker_id": r, "broker_epoch": -1 if r in self.isr or r == self.node_id
                             else self.followers[r].broker_epoch} for r in proposed]}

    def on_alter_partition_response(self, response: dict[str, Any]) -> None:
        """Commit or roll back; either way the Maximal ISR goes back to the ISR (PROTOCOL.md 3)."""
        proposed = self.alter_in_flight
        self.alter_in_flight = None
        rec = response.get("partition")
        if response.get("error") == rpc.NONE and rec is not None and self.role == LEADER:
            # Ignore a success that is not newer, or from another leader epoch (a completed
            # reassignment): metadata will tell.
            if rec["leader_epoch"] == self.leader_epoch and rec["partition_epoch"] > self.partition_epoch:
                old = self.isr
                self.isr, self.partition_epoch = list(rec["isr"]), rec["partition_epoch"]
                self._event("isr_committed", **{"from": old, "to": self.isr})
        else:
            self._event("alter_partition_failed", proposed=proposed, error=response.get("error"))
        self.maximal_isr = list(self.isr)
        self.maybe_advance_hwm()

    # --- follower: fetching from the leader ----------------------------------------------
    def fetch_request(self, broker_epoch: int, max_bytes: int) -> dict[str, Any]:
        variants = self.config.variants
        if "truncate-to-hw" in variants:
            # A pre-KIP-101 follower sends no epoch, so the leader never finds a divergence and
            # the follower keeps whatever its HW left it.
            last_fetched_epoch = -1
        elif "no-epoch-fencing" in variants and self._epoch_validated:
            # A Kafka 1.1-2.6 follower (KIP-101/279, before KIP-320 and Fetch v12) checks its log
            # against the leader's once, when it becomes a follower (OffsetsForLeaderEpoch), and
            # then fetches by offset alone: a follower that misses leader changes (KAFKA-6880)
            # never checks again.
            last_fetched_epoch = -1
        else:
            last_fetched_epoch = self.log.last_epoch
        return {"replica_id": self.node_id, "broker_epoch": broker_epoch, "topic": self.topic,
                "partition": self.partition, "fetch_offset": self.leo, "last_fetched_epoch": last_fetched_epoch,
                # `no-epoch-fencing`: a pre-KIP-320 follower sends no current epoch, so a leader
                # of an older (or newer) epoch serves it instead of fencing it.
                "current_leader_epoch": -1 if "no-epoch-fencing" in variants else self.leader_epoch,
                "sent_in_epoch": self.leader_epoch, "max_bytes": max_bytes}

    def on_fetch_response(self, req: dict[str, Any], resp: dict[str, Any]) -> int:
        """Apply a leader's reply; returns its error code (NONE when applied or ignored)."""
        if self.role != FOLLOWER:
            return rpc.NONE
        if req["sent_in_epoch"] != self.leader_epoch and "no-epoch-fencing" not in self.config.variants:
            return rpc.NONE  # a reply from the leader of an older epoch: drop it (the variant keeps it)
        if req["fetch_offset"] != self.leo:
            return rpc.NONE  # the log moved under this request (a truncation); fetch again
        err = int(resp.get("error", rpc.UNKNOWN_SERVER_ERROR))
        if err == rpc.OFFSET_OUT_OF_RANGE and "truncate-to-hw" in self.config.variants and "log_end_offset" in resp:
            # Pre-KIP-101 handleOffsetOutOfRange: a follower ahead of its leader cuts back to the
            # leader's LEO, whatever its records there were.
            before, hwm_before = self.leo, self.hwm
            self.log.truncate_to(int(resp["log_end_offset"]))
            self._producers_truncated()
            self.hwm = min(self.hwm, self.leo)
            self._event("truncated_to_leader_leo_variant", **{"from": before, "to": self.leo}, hwm=self.hwm,
                        hwm_before=hwm_before,
                        reason="truncate-to-hw variant: the leader's LEO is below ours",
                        epoch_cache=self.epoch_cache())
            return rpc.NONE
        if err != rpc.NONE:
            return err
        div = resp.get("diverging_epoch")
        if div:
            # Truncate first; apply no HWM from this reply (KAFKA-14704).
            target = follower_truncation_offset(self.log.epoch_cache, self.leo, int(div["epoch"]),
                                                int(div["end_offset"]))
            before, hwm_before = self.leo, self.hwm
            self.log.truncate_to(target)
            self._producers_truncated()
            self.hwm = min(self.hwm, self.leo)
            self._event("truncated_on_divergence", diverging_epoch=div, **{"from": before, "to": self.leo},
                        hwm=self.hwm, hwm_before=hwm_before, reason="the leader answered a diverging epoch",
                        epoch_cache=self.epoch_cache())
            return rpc.NONE
        if req["last_fetched_epoch"] >= 0 and req["sent_in_epoch"] == self.leader_epoch:
            self._epoch_validated = True  # the leader found no divergence (only the variant reads this)
        raw = rpc.unb64(resp.get("records") or "")
        if raw:
            raw = _from_offset(raw, self.leo)
            if raw:
                last_epoch = self.log.last_epoch
                headers = validate_batches(raw)  # read once: for the append and for the producers' state
                first, _ = self.log.append_as_follower(raw, headers)
                self._producers_appended(headers, first, raw)
                if self.log.last_epoch != last_epoch:
                    # Once per leader epoch the follower copies: where its cache starts that epoch (log matching).
                    self._event("follower_epoch_appended", leo=self.leo, epoch_cache=self.epoch_cache())
        # 002 2.7: a follower's HWM is the leader's, bounded by its own LEO (it can go down).
        self.hwm = min(int(resp["high_watermark"]), self.leo)
        return rpc.NONE

    # --- consumers ---------------------------------------------------------------------------
    def check_consumer_fetch(self, current_leader_epoch: int, fetch_offset: int,
                             last_fetched_epoch: int) -> tuple[int, dict[str, int] | None]:
        """A consumer's Fetch, before any record is read: (error, diverging epoch), as a Kafka leader
        decides (Partition.fetchRecords and readRecords).

        1. The epoch fence (KIP-320): not the leader, an older or a newer current leader epoch.
        2. Fetch v12+ carries the epoch of the last record the consumer read (-1: none). Its end offset
           here (epoch_cache.client_end_offset_for_entries) unknown: OFFSET_OUT_OF_RANGE, which is what a
           deposed leader answers a consumer that read a newer leader's records. Ending below the fetch
           offset, or at an older epoch: no records, and the diverging epoch, for the consumer to
           validate its position with OffsetForLeaderEpoch (its log was truncated under it).
        3. An offset outside [log start, LEO]: OFFSET_OUT_OF_RANGE."""
        err = self.check_fetch_epoch(current_leader_epoch)
        if err != rpc.NONE:
            return err, None
        start = self.log.log_start_offset
        if last_fetched_epoch >= 0:
            epoch, end = self.log.client_end_offset_for_epoch(last_fetched_epoch)
            if epoch < 0 or end < 0 or fetch_offset < start:
                return rpc.OFFSET_OUT_OF_RANGE, None
            if epoch < last_fetched_epoch or end < fetch_offset:
                return rpc.NONE, {"epoch": epoch, "end_offset": end}
        if fetch_offset < start or fetch_offset > self.leo:
            return rpc.OFFSET_OUT_OF_RANGE, None
        return rpc.NONE, None

    def offset_for_leader_epoch(self, current_leader_epoch: int, epoch: int) -> tuple[int, int, int]:
        """A consumer's OffsetForLeaderEpoch (KIP-320; PROTOCOL.md 2, "Consumers ... re-validate it after
        a leader change"): (error, epoch*, end offset). Only the leader answers, behind the epoch fence
        (Kafka's lastOffsetForLeaderEpoch with fetchOnlyFromLeader); an end offset it cannot tell is
        (-1, -1) with no error, and the consumer treats it as a truncation."""
        err = self.check_fetch_epoch(current_leader_epoch)
        if err != rpc.NONE:
            return err, -1, -1
        found_epoch, end = self.log.client_end_offset_for_epoch(epoch)
        return rpc.NONE, found_epoch, end

    def list_offset_latest(self) -> tuple[int, int]:
        """(error, offset): the HWM, unknown until it reached the LESO (KIP-207, PROTOCOL.md 3)."""
        if self.role != LEADER:
            return rpc.NOT_LEADER_OR_FOLLOWER, -1
        if self.hwm < self.leso:
            return OFFSET_NOT_AVAILABLE, -1
        return rpc.NONE, self.hwm

    def dump(self, include_log: bool) -> dict[str, Any]:
        d: dict[str, Any] = {
            "topic": self.topic, "partition": self.partition, "role": self.role, "leader": self.leader,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch, "replicas": self.replicas,
            "isr": self.isr, "maximal_isr": self.maximal_isr, "leo": self.leo, "hwm": self.hwm,
            "log_start": self.log.log_start_offset, "leso": self.leso, "flushed_offset": self.log.flushed_offset,
            "epoch_cache": [[e.epoch, e.start_offset] for e in self.log.epoch_cache.entries],
        }
        if self.role == LEADER:
            d["followers"] = {str(r): {"leo": f.leo, "broker_epoch": f.broker_epoch,
                                       "fetched_this_epoch": f.fetched_this_epoch} for r, f in self.followers.items()}
        if include_log:
            d["log"] = [[r.offset, r.leader_epoch, r.value_digest] for r in self.log.physical_log()]
            d["corrupt_batches"] = self.log.crc_failures()
        return d


def _union(a: list[int], b: list[int], order: list[int]) -> list[int]:
    s = set(a) | set(b)
    return [r for r in order if r in s] + sorted(s - set(order))


def _from_offset(raw: bytes, offset: int) -> bytes:
    """Drop whole batches that end before `offset` (a leader may start at the batch holding it)."""
    pos = 0
    for start, h in iter_batch_headers(raw, check_crc=False):
        if h.last_offset >= offset:
            if h.base_offset > offset:
                raise NonContiguousAppendError(f"leader sent offset {h.base_offset}, expected {offset}")
            return raw[start:]
        pos = start + h.size
    return raw[pos:]
