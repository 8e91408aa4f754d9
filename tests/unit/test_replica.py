"""Replica state machine (replica.py) with a controllable clock and real on-disk PartitionLogs.

Covers 002 2.2/2.6/2.7/2.9/2.10 and PROTOCOL.md 2-4: the HWM from the Maximal ISR gated on
min ISR, ISR shrink/expand conditions, fetch epoch errors without state change, divergence
truncation before the HWM (KAFKA-14704), role transitions and the epoch cache (KAFKA-7415).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.log import PartitionLog, build_batch, validate_batches
from kafkaesque_harness.clusters.broker.log.batch import build_control_batch
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, BrokerInfo, PartitionState
from kafkaesque_harness.clusters.broker.producer_state import ProducerStateTable
from kafkaesque_harness.clusters.broker.replica import (
    FOLLOWER,
    LEADER,
    OFFSET_NOT_AVAILABLE,
    Replica,
    ReplicaConfig,
)

LAG = 1000


def make_replica(tmp_path: Path, node: int, min_isr: int = 2, variants: frozenset[str] = frozenset(),
                 hwm: int = 0) -> Replica:
    d = tmp_path / f"n{node}" / "t-0"
    d.parent.mkdir(parents=True, exist_ok=True)
    log = PartitionLog(str(d), logger=lambda e: None, topic="t", partition=0)
    return Replica(node, "t", 0, log, hwm, min_isr, ReplicaConfig(replica_lag_time_max_ms=LAG, variants=variants))


def state(leader: int, epoch: int, isr: list[int], pepoch: int | None = None,
          replicas: list[int] | None = None) -> PartitionState:
    return PartitionState("t", 0, replicas or [1, 2, 3], isr, leader, epoch, epoch if pepoch is None else pepoch)


def produce(r: Replica, n: int, start: int = 0) -> tuple[int, int]:
    raw = build_batch([f"v{start + i}".encode() for i in range(n)])
    return r.append(raw, validate_batches(raw))


def fetch(leader: Replica, rid: int, fetch_offset: int, now: int, last_epoch: int | None = None,
          epoch: int | None = None, broker_epoch: int = 10) -> dict | None:
    return leader.record_follower_fetch({
        "replica_id": rid, "broker_epoch": broker_epoch, "topic": "t", "partition": 0, "fetch_offset": fetch_offset,
        "last_fetched_epoch": leader.leader_epoch if last_epoch is None else last_epoch,
        "current_leader_epoch": leader.leader_epoch if epoch is None else epoch}, now)


def replicate(leader: Replica, follower: Replica, now: int, broker_epoch: int = 10) -> None:
    """One pull round trip over the replica_fetch message shapes."""
    req = follower.fetch_request(broker_epoch, 1 << 20)
    resp = leader.record_follower_fetch(req, now) or leader.read_for_follower(req["fetch_offset"], 1 << 20)
    assert follower.on_fetch_response(req, resp) == rpc.NONE


def leader_and_follower(path: Path, follower_variants: frozenset[str] = frozenset()) -> tuple[Replica, Replica]:
    """Broker 1 leading and broker 2 following it, ISR [1, 2] in leader epoch 1, each on its own log under `path`."""
    a, b = make_replica(path, 1), make_replica(path, 2, variants=follower_variants)
    for r in (a, b):
        r.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
    return a, b


def brokers(fenced: set[int] = frozenset(), epochs: dict[int, int] | None = None) -> dict[int, BrokerInfo]:
    epochs = epochs or {}
    return {b: BrokerInfo(b, epochs.get(b, 10), "inc", "127.0.0.1", 9000 + b, fenced=b in fenced) for b in (1, 2, 3)}


@pytest.fixture
def leader(tmp_path):
    r = make_replica(tmp_path, 1)
    assert r.apply_partition_state(state(1, 1, [1, 2, 3]), now_ms=0) == "become-leader"
    return r


@pytest.fixture
def leader_without_3(tmp_path):
    """Broker 1 leads with ISR [1, 2]: 4 records, all fetched by 2, so the HWM is 4; 3 is out of the ISR."""
    r = make_replica(tmp_path, 1)
    r.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
    produce(r, 4)
    fetch(r, 2, 4, now=1)
    assert r.hwm == 4
    return r


# --- HWM (002 2.7, KIP-966) -----------------------------------------------------------------

def test_hwm_is_the_smallest_offset_reached_by_every_isr_member(leader):
    produce(leader, 10)
    assert leader.hwm == 0  # no follower has fetched: nothing is committed
    assert fetch(leader, 2, 10, now=1) is None
    assert leader.hwm == 0  # follower 3 has reached nothing yet
    fetch(leader, 3, 5, now=2)
    assert leader.hwm == 5
    fetch(leader, 3, 10, now=3)
    assert leader.hwm == 10


def test_hwm_does_not_advance_below_min_isr_unless_no_elr(tmp_path):
    for variants, expected in ((frozenset(), 0), (frozenset({"no-elr"}), 4)):
        r = make_replica(tmp_path / "-".join(variants or ["std"]), 1, min_isr=2, variants=variants)
        r.apply_partition_state(state(1, 1, [1]), now_ms=0)
        produce(r, 4)
        assert r.hwm == expected, variants
        assert r.below_min_isr() == (expected == 0)  # the shell then fails pending acks=all requests


def test_pending_shrink_keeps_the_removed_member_in_the_maximal_isr_until_committed(leader):
    produce(leader, 4)
    fetch(leader, 2, 4, now=1)
    fetch(leader, 3, 4, now=1)
    assert leader.hwm == 4
    produce(leader, 4, start=4)
    fetch(leader, 2, 8, now=LAG + 10)  # 3 stays silent past the lag time
    body = leader.wanted_isr_change(LAG + 10, brokers())
    assert body is not None and [m["broker_id"] for m in body["new_isr"]] == [1, 2]
    assert leader.maximal_isr == [1, 2, 3]  # 002 2.9.2: the union until the controller answers
    assert leader.maybe_advance_hwm() is False and leader.hwm == 4
    assert leader.wanted_isr_change(LAG + 11, brokers()) is None  # at most one in flight
    leader.on_alter_partition_response({"error": rpc.NONE, "partition": {
        "leader_epoch": 1, "partition_epoch": 2, "isr": [1, 2]}})
    assert leader.isr == [1, 2] and leader.maximal_isr == [1, 2]
    assert leader.hwm == 8


def test_pending_expand_counts_the_joining_member_before_commit(leader_without_3):
    r = leader_without_3
    fetch(r, 3, 4, now=1)
    assert r.hwm == 4
    body = r.wanted_isr_change(1, brokers(), fetched_by=3)  # decided on 3's fetch
    assert [m["broker_id"] for m in body["new_isr"]] == [1, 2, 3]
    assert r.maximal_isr == [1, 2, 3]
    produce(r, 2, start=4)
    fetch(r, 2, 6, now=3)
    assert r.hwm == 4  # 3 is in the Maximal ISR and has not reached 6
    # A rejected expand rolls back: the Maximal ISR returns to the ISR and the HWM moves.
    r.on_alter_partition_response({"error": rpc.INVALID_UPDATE_VERSION})
    assert r.maximal_isr == [1, 2] and r.hwm == 6


# --- ISR shrink and expand (002 2.9, PROTOCOL.md 4) ------------------------------------------

def test_shrink_only_after_the_lag_time(leader):
    produce(leader, 3)
    fetch(leader, 2, 3, now=100)
    fetch(leader, 3, 3, now=100)
    assert leader.wanted_isr_change(LAG, brokers()) is None  # everyone within the lag time
    fetch(leader, 2, 3, now=LAG + 50)
    body = leader.wanted_isr_change(LAG + 101, brokers())
    assert [m["broker_id"] for m in body["new_isr"]] == [1, 2]


def test_a_follower_that_fetches_but_never_catches_up_is_shrunk(leader):
    # Fetching is not enough: it must reach the leader's LEO of its previous fetch.
    for t in range(0, 3 * LAG, 100):
        produce(leader, 5, start=t)
        fetch(leader, 2, leader.leo, now=t)
        fetch(leader, 3, 0, now=t)
    body = leader.wanted_isr_change(3 * LAG, brokers())
    assert [m["broker_id"] for m in body["new_isr"]] == [1, 2]


@pytest.mark.parametrize("why,setup,expand", [
    ("all conditions hold", lambda r: fetch(r, 3, 4, now=5), True),
    ("behind the HWM", lambda r: fetch(r, 3, 2, now=5), False),
    ("not fetched in this leader epoch", lambda r: None, False),
    ("broker fenced", lambda r: fetch(r, 3, 4, now=5), "fenced"),
    ("broker epoch is not the registered one", lambda r: fetch(r, 3, 4, now=5, broker_epoch=7), False),
])
def test_expand_conditions(leader_without_3, why, setup, expand):
    r = leader_without_3
    setup(r)
    body = r.wanted_isr_change(6, brokers(fenced={3} if expand == "fenced" else set()), fetched_by=3)
    if expand is True:
        assert body is not None and [m["broker_id"] for m in body["new_isr"]] == [1, 2, 3], why
        assert body["new_isr"][2]["broker_epoch"] == 10
    else:
        assert body is None, why


def test_expand_needs_the_leader_epoch_start_offset(tmp_path):
    # A new leader whose HWM lags its LESO: a follower at the HWM but below the LESO stays out.
    r = make_replica(tmp_path, 1)
    r.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
    produce(r, 6)
    r.apply_partition_state(state(1, 2, [1, 2]), now_ms=10)  # re-elected: LESO = 6, HWM = 0
    assert r.leso == 6 and r.hwm == 0
    fetch(r, 3, 3, now=11)
    assert r.wanted_isr_change(11, brokers(), fetched_by=3) is None
    fetch(r, 3, 6, now=13, last_epoch=1)
    assert [m["broker_id"] for m in r.wanted_isr_change(13, brokers(), fetched_by=3)["new_isr"]] == [1, 2, 3]


# --- no ISR flapping: expansion is decided on a fetch (PROTOCOL.md 4 Expand; Kafka maybeExpandIsr) ---

TICK = 100  # the broker's housekeeping period (server.py HOUSEKEEPING_S)


def answer_as_controller(r: Replica, body: dict) -> None:
    """The controller accepts the proposal: one more partition epoch, the proposed ISR."""
    r.on_alter_partition_response({"error": rpc.NONE, "partition": {
        "leader_epoch": r.leader_epoch, "partition_epoch": r.partition_epoch + 1,
        "isr": [m["broker_id"] for m in body["new_isr"]]}})


@pytest.mark.parametrize("writes", [False, True], ids=["idle", "writes"])
def test_a_follower_that_stops_fetching_is_shrunk_once_and_not_re_added_until_it_fetches(leader, writes):
    # Leader 1, followers 2 and 3 in the ISR; 3 is cut off at CUT. The housekeeping tick asks for
    # an ISR change every TICK ms; the controller accepts every proposal at once. Before the fix,
    # on an idle partition the tick re-added 3 on its last fetch (its LEO still equal to the
    # unchanged HWM) right after the lag shrink removed it: [1,2,3] -> [1,2] -> [1,2,3] -> ...
    produce(leader, 4)
    cut = 5 * TICK
    proposals = []
    for t in range(0, cut + 5 * LAG, TICK):
        if writes and t % (2 * TICK) == 0:
            produce(leader, 1, start=t)
        assert fetch(leader, 2, leader.leo, now=t) is None
        if t < cut:
            assert fetch(leader, 3, leader.leo, now=t) is None
        body = leader.wanted_isr_change(t, brokers())
        if body is not None:
            proposals.append((t, [m["broker_id"] for m in body["new_isr"]]))
            answer_as_controller(leader, body)
    assert proposals == [(proposals[0][0], [1, 2])], proposals  # shrunk exactly once, never re-added
    assert LAG < proposals[0][0] - (cut - TICK) <= LAG + TICK  # the lag time after its last fetch, at a tick
    assert leader.isr == [1, 2]
    # Not even on a later tick: only a fetch from 3 can bring it back.
    t = cut + 5 * LAG
    assert leader.wanted_isr_change(t, brokers()) is None
    # A fetch below the HWM: not yet (PROTOCOL.md 4: leo >= HWM).
    if writes:
        assert fetch(leader, 3, leader.hwm - 1, now=t, last_epoch=1) is None
        assert leader.wanted_isr_change(t, brokers(), fetched_by=3) is None
    # A fetch at the HWM in the current epoch with the registered broker epoch: proposed back.
    assert fetch(leader, 3, leader.hwm, now=t + 1) is None
    body = leader.wanted_isr_change(t + 1, brokers(), fetched_by=3)
    assert body is not None and [m["broker_id"] for m in body["new_isr"]] == [1, 2, 3]
    assert body["new_isr"][2]["broker_epoch"] == 10


def test_an_out_of_sync_follower_is_judged_on_its_own_fetch_not_on_a_tick_or_anothers_fetch(leader_without_3):
    r = leader_without_3
    fetch(r, 3, 4, now=2)
    assert r.hwm == 4
    assert r.wanted_isr_change(3, brokers()) is None  # the housekeeping tick never expands
    assert r.wanted_isr_change(3, brokers(), fetched_by=2) is None  # nor does another follower's fetch
    assert [m["broker_id"] for m in r.wanted_isr_change(3, brokers(), fetched_by=3)["new_isr"]] == [1, 2, 3]


def test_an_idle_partition_keeps_a_follower_that_keeps_fetching(leader):
    # Caught up is lastCaughtUpTimeMs: a fetch at the leader's LEO, however old the LEO is.
    produce(leader, 4)
    for t in range(0, 5 * LAG, TICK):
        fetch(leader, 2, 4, now=t)
        fetch(leader, 3, 4, now=t)
        assert leader.wanted_isr_change(t, brokers()) is None, t
    assert leader.isr == [1, 2, 3]


# --- fetch errors (PROTOCOL.md 2, KIP-320) --------------------------------------------------

@pytest.mark.parametrize("epoch,error", [(0, rpc.FENCED_LEADER_EPOCH), (2, rpc.UNKNOWN_LEADER_EPOCH)])
def test_fetch_epoch_errors_change_no_state(leader, epoch, error):
    produce(leader, 3)
    fetch(leader, 2, 3, now=1)
    before = (leader.followers[3].leo, leader.followers[3].fetched_this_epoch, leader.hwm)
    assert fetch(leader, 3, 3, now=2, epoch=epoch)["error"] == error
    assert (leader.followers[3].leo, leader.followers[3].fetched_this_epoch, leader.hwm) == before


def test_a_follower_answers_fetches_with_not_leader(tmp_path):
    r = make_replica(tmp_path, 2)
    r.apply_partition_state(state(1, 1, [1, 2, 3]), now_ms=0)
    assert r.role == FOLLOWER
    assert r.check_fetch_epoch(1) == rpc.NOT_LEADER_OR_FOLLOWER
    assert r.check_produce(-1) == rpc.NOT_LEADER_OR_FOLLOWER


# --- replication and divergence (PROTOCOL.md 2, 004) ----------------------------------------

def test_follower_copies_the_leader_and_takes_min_of_leader_hwm_and_its_leo(tmp_path):
    lead, f2, f3 = (make_replica(tmp_path, n) for n in (1, 2, 3))
    for r in (lead, f2, f3):
        r.apply_partition_state(state(1, 1, [1, 2, 3]), now_ms=0)
    produce(lead, 5)
    replicate(lead, f2, now=1)
    assert f2.leo == 5 and f2.hwm == 0
    replicate(lead, f3, now=1)
    assert lead.hwm == 0  # the leader learns a follower's position from its next fetch
    replicate(lead, f2, now=2)
    assert lead.hwm == 0 and f2.hwm == 0  # 3 has not been heard at 5 yet
    replicate(lead, f3, now=3)
    assert lead.hwm == 5 and f3.hwm == 5
    replicate(lead, f2, now=4)
    assert f2.hwm == 5
    assert [tuple(x) for x in f2.log.physical_log()] == [tuple(x) for x in lead.log.physical_log()]


def test_divergent_suffix_is_truncated_before_any_hwm_is_applied(tmp_path):
    a, b = leader_and_follower(tmp_path)
    produce(a, 3)
    replicate(a, b, now=1)
    replicate(a, b, now=2)
    assert a.hwm == 3 and b.hwm == 3
    produce(a, 2, start=3)  # offsets 3-4 in epoch 1 only on broker 1 (it then dies)
    # Broker 2 becomes leader in epoch 2 and appends its own 3-5.
    b.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=10)
    assert b.log.epoch_cache.entries[-1].epoch == 2 and b.log.epoch_cache.entries[-1].start_offset == 3  # KAFKA-7415
    produce(b, 3, start=100)
    # Broker 1 returns as a follower: its fetch (offset 5, epoch 1) gets a diverging epoch.
    a.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=20)
    a.hwm = 5  # as if it had checkpointed a higher HWM: the divergence reply must not apply any
    req = a.fetch_request(10, 1 << 20)
    resp = b.record_follower_fetch(req, 21)
    assert resp["diverging_epoch"] == {"epoch": 1, "end_offset": 3}
    assert a.on_fetch_response(req, resp) == rpc.NONE
    assert a.leo == 3 and a.hwm == 3
    replicate(b, a, now=22)
    assert [tuple(x) for x in a.log.physical_log()] == [tuple(x) for x in b.log.physical_log()]
    assert [x.leader_epoch for x in a.log.physical_log()] == [1, 1, 1, 2, 2, 2]


def test_a_reply_for_an_older_epoch_is_dropped(tmp_path):
    a, b = leader_and_follower(tmp_path)
    produce(a, 3)
    req = b.fetch_request(10, 1 << 20)
    resp = a.record_follower_fetch(req, 1) or a.read_for_follower(0, 1 << 20)
    b.apply_partition_state(state(3, 2, [1, 2, 3]), now_ms=2)  # new leader before the reply lands
    assert b.on_fetch_response(req, resp) == rpc.NONE and b.leo == 0


# --- role transitions (002 2.10) ----------------------------------------------------------

def test_role_transitions_and_stale_states(tmp_path):
    r = make_replica(tmp_path, 2)
    assert r.apply_partition_state(state(1, 2, [1, 2, 3]), now_ms=0) == "become-follower"
    assert r.apply_partition_state(state(2, 1, [2]), now_ms=1) is None  # older leader epoch: ignored
    assert r.role == FOLLOWER and r.leader == 1
    assert r.apply_partition_state(state(1, 2, [1, 2], pepoch=3), now_ms=2) is None  # ISR change only
    assert r.isr == [1, 2] and r.partition_epoch == 3
    assert r.apply_partition_state(state(2, 3, [1, 2], pepoch=4), now_ms=3) == "become-leader"
    assert r.role == LEADER and set(r.followers) == {1, 3}
    assert r.log.epoch_cache.entries[-1].epoch == 3
    assert r.apply_partition_state(state(NO_LEADER, 4, [2], pepoch=5), now_ms=4) == "become-follower"
    assert r.role == "none" and r.followers == {}


def test_losing_leadership_clears_follower_state_and_a_new_epoch_resets_it(leader):
    produce(leader, 3)
    fetch(leader, 2, 3, now=1)
    assert leader.followers[2].fetched_this_epoch
    leader.apply_partition_state(state(1, 2, [1, 2, 3]), now_ms=5)
    assert not leader.followers[2].fetched_this_epoch and leader.followers[2].leo == -1


# --- produce admission and ListOffsets (002 2.6, PROTOCOL.md 3) ------------------------------

def test_acks_all_rejected_below_min_isr_acks_1_accepted(tmp_path):
    r = make_replica(tmp_path, 1, min_isr=2)
    r.apply_partition_state(state(1, 1, [1]), now_ms=0)
    assert r.check_produce(-1) == rpc.NOT_ENOUGH_REPLICAS
    assert r.check_produce(1) == rpc.NONE
    assert r.check_produce(0) == rpc.NONE
    r.apply_partition_state(state(1, 1, [1, 2], pepoch=2), now_ms=1)
    assert r.check_produce(-1) == rpc.NONE


def test_list_offsets_latest_is_unknown_until_the_hwm_reaches_the_leso(tmp_path):
    r = make_replica(tmp_path, 1)
    r.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
    produce(r, 4)
    r.apply_partition_state(state(1, 2, [1, 2], pepoch=2), now_ms=1)
    assert r.list_offset_latest() == (OFFSET_NOT_AVAILABLE, -1)
    fetch(r, 2, 4, now=2, last_epoch=1)
    assert r.hwm == 4 and r.list_offset_latest() == (rpc.NONE, 4)


def test_producer_state_is_rebuilt_from_the_log_on_becoming_leader(tmp_path):
    a = make_replica(tmp_path, 1)
    a.apply_partition_state(state(2, 1, [1, 2]), now_ms=0)
    # one timestamp for both: build_batch stamps the clock otherwise, and a millisecond between them changes the CRC
    ts = 1_700_000_000_000
    raw = build_batch([b"x", b"y"], producer_id=77, producer_epoch=0, base_sequence=0, timestamp_ms=ts)
    a.log.append_as_follower(build_batch([b"x", b"y"], producer_id=77, producer_epoch=0, base_sequence=0,
                                         leader_epoch=1, timestamp_ms=ts))
    a.apply_partition_state(state(1, 2, [1, 2]), now_ms=1)
    h = validate_batches(raw)[0]
    assert a.producers.check(h) == (rpc.NONE, (0, 1, h.crc))  # a retry: original offsets, the same bytes
    # other records under the same sequence: answered as the retry Kafka takes them for, its CRC telling them apart
    reused = validate_batches(build_batch([b"p", b"q"], producer_id=77, producer_epoch=0, base_sequence=0))[0]
    assert a.producers.check(reused) == (rpc.NONE, (0, 1, h.crc)) and reused.crc != h.crc


def _table(t: ProducerStateTable) -> tuple:
    return ({pid: (e.epoch, e.last_sequence, list(e.recent), e.coordinator_epoch) for pid, e in t.producers.items()},
            dict(t.ongoing), list(t.aborted))


def _txn_traffic(lead: Replica) -> None:
    """Transactions as the txn workload makes them: two producers' batches, an abort, a commit, one left open."""
    def txn(pid: int, seq: int) -> None:
        raw = build_batch([b"v", b"w"], producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True)
        lead.append(raw, validate_batches(raw))

    def end(pid: int, commit: bool) -> None:
        raw = build_control_batch(pid, 0, commit, coordinator_epoch=3)
        lead.append(raw, validate_batches(raw))

    txn(7, 0), txn(8, 0), txn(7, 2), end(7, False), end(8, True), txn(7, 4), txn(8, 2), end(8, True), txn(7, 6)


def test_a_follower_keeps_producer_state_as_it_copies_so_becoming_leader_reads_no_log(tmp_path, monkeypatch):
    # detection-txn-default-faults/20261126T042005: a broker taking over 14 partitions rebuilt each one's
    # producer table from every batch header of its log (1,000-1,700 batches behind the lossy FUSE file
    # system: 0.3-1.3 s a partition), all in one turn of its event loop; it sent no heartbeat for longer than
    # the 3 s session timeout, was fenced, and the leaderships flapped between the two live brokers while
    # the power-cut third copied nothing for 19 s. Kafka's followers update the producer state as they append
    # (UnifiedLog.appendAsFollower), so makeLeader rebuilds nothing.
    lead, f = leader_and_follower(tmp_path)
    _txn_traffic(lead)
    replicate(lead, f, now=1)
    assert f.leo == lead.leo == 15

    def no_scan():
        raise AssertionError("becoming leader scanned the whole log")
    monkeypatch.setattr(f.log, "batch_headers", no_scan)
    assert f.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=2) == "become-leader"
    monkeypatch.undo()
    assert _table(f.producers) == _table(lead.producers)
    assert _table(f.producers) == _table(ProducerStateTable.from_headers(f.log.batch_headers(), f._read_batch))
    assert f.producers.ongoing == {7: 8} and f.last_stable_offset() == 0  # the HWM is still 0 here
    retry = build_batch([b"v", b"w"], producer_id=8, producer_epoch=0, base_sequence=2, transactional=True)
    err, dup = f.producers.check(validate_batches(retry)[0])
    assert (err, dup[:2]) == (rpc.NONE, (10, 11))  # a retry: its offsets


def test_a_truncated_follower_rebuilds_its_producer_state_on_becoming_leader(tmp_path):
    a, b = leader_and_follower(tmp_path)
    produce(a, 3)
    replicate(a, b, now=1)
    raw = build_batch([b"x"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    a.append(raw, validate_batches(raw))  # offset 3 in epoch 1 on broker 1 only, an open transaction
    b.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=10)
    produce(b, 2, start=100)
    a.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=20)
    req = a.fetch_request(10, 1 << 20)
    assert a.on_fetch_response(req, b.record_follower_fetch(req, 21)) == rpc.NONE
    assert a.leo == 3  # the divergent transactional batch is gone
    replicate(b, a, now=22)
    a.apply_partition_state(state(1, 3, [1, 2], pepoch=4), now_ms=30)
    assert a.producers.ongoing == {} and 9 not in a.producers.producers and a.last_stable_offset() == a.hwm


# --- historic flaws as variants (issue 4; 004 scenarios) ------------------------------------

def test_truncate_to_hw_variant_cuts_a_restarted_follower_to_its_checkpointed_hw(tmp_path):
    """004 scenario 1: a restarting follower truncates to its HW checkpoint (the default keeps its log
    and lets the leader's epochs say where it diverges)."""
    for variants, kept in ((frozenset(), 5), (frozenset({"truncate-to-hw"}), 2)):
        d = tmp_path / ("flawed" if variants else "default")
        leader = make_replica(d, 1, variants=variants)
        leader.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
        for i in range(5):
            produce(leader, 1, start=i)  # one batch per record: truncation is per batch
        follower = make_replica(d, 2, variants=variants)
        follower.log.append_as_follower(leader.log.read(0, 1 << 20))
        follower.hwm = 2  # as if restarted with HW 2 on file
        follower.apply_partition_state(state(1, 1, [1, 2]), now_ms=1)
        assert follower.leo == kept


def test_truncate_to_hw_variant_sends_no_epoch_so_a_divergent_suffix_survives(tmp_path):
    """004 scenario 2 without leader epochs: the follower's stale record at an offset the new leader
    rewrote is never found (the default finds and truncates it)."""
    outcomes = {}
    for variants in (frozenset(), frozenset({"truncate-to-hw"})):
        d = tmp_path / ("flawed" if variants else "default")
        a, b = make_replica(d, 1, variants=variants), make_replica(d, 2, variants=variants)
        a.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
        produce(a, 1)                                   # m1, m2 in epoch 1 on A
        produce(a, 1, start=1)
        b.log.append_as_follower(a.log.read(0, 1 << 20))
        b.log.truncate_to(1)                            # B lost m2 in the power cut
        b.apply_partition_state(state(2, 2, [2], pepoch=2), now_ms=1)
        produce(b, 1, start=100)                        # m3 at offset 1 in epoch 2
        a.hwm = 2                                       # A's HW covered m2
        a.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=2)
        replicate(b, a, now=3)
        replicate(b, a, now=4)
        outcomes[bool(variants)] = ([x.value_digest for x in a.log.physical_log()],
                                    [x.value_digest for x in b.log.physical_log()])
    a_log, b_log = outcomes[False]
    assert a_log == b_log                               # converged: m2 truncated
    a_log, b_log = outcomes[True]
    assert len(a_log) == len(b_log) == 2 and a_log[1] != b_log[1]  # diverged at offset 1 for good


def test_truncate_to_hw_variant_cuts_back_to_the_leaders_leo_when_ahead(tmp_path):
    a, b = make_replica(tmp_path, 1, variants=frozenset({"truncate-to-hw"})), make_replica(tmp_path, 2)
    b.apply_partition_state(state(2, 2, [2]), now_ms=0)
    produce(b, 1)
    for i in range(3):
        a.log.append_as_follower(build_batch_at(i, 1))
    a.hwm = 3
    a.apply_partition_state(state(2, 2, [2], pepoch=3), now_ms=1)
    req = a.fetch_request(10, 1 << 20)
    resp = b.record_follower_fetch(req, 2)
    assert resp["error"] == rpc.OFFSET_OUT_OF_RANGE
    assert a.on_fetch_response(req, resp) == rpc.NONE and a.leo == 1


def build_batch_at(base: int, n: int) -> bytes:
    return build_batch([f"x{i}".encode() for i in range(n)], base_offset=base)


def test_no_epoch_fencing_variant_applies_a_reply_from_the_leader_of_an_older_epoch(tmp_path):
    for variants, applied in ((frozenset(), 0), (frozenset({"no-epoch-fencing"}), 3)):
        d = tmp_path / ("flawed" if variants else "default")
        a, b = leader_and_follower(d, follower_variants=variants)
        produce(a, 3)
        req = b.fetch_request(10, 1 << 20)
        b.apply_partition_state(state(3, 2, [2, 3]), now_ms=1)  # deposed before its reply arrives
        a_still_thinks_it_leads = a.record_follower_fetch(req, 2) or a.read_for_follower(0, 1 << 20)
        assert b.on_fetch_response(req, a_still_thinks_it_leads) == rpc.NONE
        assert b.leo == applied


def test_no_epoch_fencing_variant_is_not_fenced_by_a_leader_of_another_epoch(tmp_path):
    a, b = make_replica(tmp_path, 1), make_replica(tmp_path, 2, variants=frozenset({"no-epoch-fencing"}))
    a.apply_partition_state(state(1, 1, [1, 2]), now_ms=0)
    b.apply_partition_state(state(1, 5, [1, 2]), now_ms=0)  # b already knows a newer epoch
    assert a.record_follower_fetch(b.fetch_request(10, 1 << 20), 1) is None  # served, not fenced
    plain = make_replica(tmp_path / "plain", 2)
    plain.apply_partition_state(state(1, 5, [1, 2]), now_ms=0)
    assert a.record_follower_fetch(plain.fetch_request(10, 1 << 20), 1)["error"] == rpc.UNKNOWN_LEADER_EPOCH


def test_no_epoch_fencing_variant_lets_a_zombie_follower_keep_a_stale_suffix_for_good(tmp_path):
    """KAFKA-6880: Z, cut off from the controller, misses two leader changes and keeps fetching from
    A by offset. By default A fences its stale epoch, and once Z hears of the new epoch its first
    fetch finds the divergence and truncates; the Kafka 1.1-2.6 follower of the variant checks its
    log once per leader epoch, then splices A's later records after its stale ones."""
    outcomes = {}
    for variants in (frozenset(), frozenset({"no-epoch-fencing"})):
        d = tmp_path / ("flawed" if variants else "default")
        a, b = make_replica(d, 1, variants=variants), make_replica(d, 2, variants=variants)
        z = make_replica(d, 3, variants=variants)
        for r in (a, b, z):
            r.apply_partition_state(state(1, 1, [1, 2, 3]), now_ms=0)
        for i in range(5):
            produce(a, 1, start=i)
        replicate(a, b, now=1)
        replicate(a, z, now=1)
        produce(a, 1, start=5)                          # A's suffix: Z copies it, B never does
        produce(a, 1, start=6)
        replicate(a, z, now=2)
        assert z.leo == 7
        b.apply_partition_state(state(2, 2, [2, 1], pepoch=2), now_ms=3)  # A deposed (Z is not told)
        for i in range(3):
            produce(b, 1, start=100 + i)                # offsets 5..7 in epoch 2
        a.apply_partition_state(state(2, 2, [2, 1], pepoch=2), now_ms=3)
        replicate(b, a, now=4)                          # divergence: A truncates to 5
        replicate(b, a, now=5)
        assert [x.value_digest for x in a.log.physical_log()] == [x.value_digest for x in b.log.physical_log()]
        a.apply_partition_state(state(1, 3, [1, 2], pepoch=3), now_ms=6)  # A leads again
        produce(a, 2, start=200)
        req = z.fetch_request(10, 1 << 20)              # Z still thinks epoch 1, fetches at offset 7
        resp = a.record_follower_fetch(req, 7) or a.read_for_follower(req["fetch_offset"], 1 << 20)
        z.on_fetch_response(req, resp)
        z.apply_partition_state(state(1, 3, [1, 2], pepoch=3), now_ms=8)  # the cut heals
        for now in range(9, 12):
            replicate(a, z, now=now)
        outcomes[bool(variants)] = ([x.value_digest for x in a.log.physical_log()],
                                    [x.value_digest for x in z.log.physical_log()])
    a_log, z_log = outcomes[False]
    assert z_log == a_log                               # fenced, then truncated and caught up
    a_log, z_log = outcomes[True]
    assert len(z_log) == len(a_log) and z_log[5:7] != a_log[5:7] and z_log[7:] == a_log[7:]


def test_a_follower_that_led_an_empty_epoch_drops_it_and_catches_up(tmp_path):
    """C led epoch 2 without appending anything (its cache still says epoch 2 starts at its LEO), then
    follows B, which never had epoch 2. B's divergence reply truncates C to where it already is; the
    empty epoch must go with it, or every later fetch names epoch 2 again and C never catches up
    (found by the protocol nemesis: a follower looping on the same divergence, 226k times in one run)."""
    b, c = make_replica(tmp_path, 2), make_replica(tmp_path, 3)
    for r in (b, c):
        r.apply_partition_state(state(2, 1, [2, 3]), now_ms=0)
    produce(b, 3)
    replicate(b, c, now=1)
    c.apply_partition_state(state(3, 2, [3], pepoch=2), now_ms=2)      # C leads epoch 2, appends nothing
    assert c.log.epoch_cache.entries[-1].epoch == 2 and c.log.epoch_cache.entries[-1].start_offset == c.leo == 3
    b.apply_partition_state(state(2, 3, [2], pepoch=3), now_ms=3)      # B leads epoch 3, never knew epoch 2
    produce(b, 2, start=10)
    c.apply_partition_state(state(2, 3, [2], pepoch=3), now_ms=4)
    for now in range(5, 9):
        replicate(b, c, now=now)
    assert [e.epoch for e in c.log.epoch_cache.entries] == [1, 3]
    assert [x.value_digest for x in c.log.physical_log()] == [x.value_digest for x in b.log.physical_log()]
