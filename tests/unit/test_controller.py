"""The controller's rules, with a controllable clock and no sockets (002 2.8, 2.9; PROTOCOL.md 4-5)."""

import pytest

from kafkaesque_harness.clusters.broker import rpc
from kafkaesque_harness.clusters.broker.controller import Controller, ControllerConfig, place_replicas
from kafkaesque_harness.clusters.broker.metadata import NO_LEADER, MetadataImage

TIMEOUT = 1000


def new_controller(**kw) -> Controller:
    c = Controller(ControllerConfig(session_timeout_ms=TIMEOUT, **kw))
    c.start(0)
    return c


def register(c: Controller, bid: int, now: int = 0, previous: int = -1, incarnation: str | None = None) -> int:
    r = c.handle("broker_registration", {"broker_id": bid, "incarnation_id": incarnation or f"inc-{bid}-{now}",
                                          "host": "127.0.0.1", "port": 9000 + bid,
                                          "previous_broker_epoch": previous}, now)
    assert r["error"] == rpc.NONE, r
    return r["broker_epoch"]


def heartbeat(c: Controller, bid: int, epoch: int, now: int, want_fence=False, want_shutdown=False) -> dict:
    return c.handle("broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch, "want_fence": want_fence,
                                         "want_shutdown": want_shutdown, "metadata_offset": c.end_offset}, now)


def cluster(n=3, **kw):
    c = new_controller(**kw)
    epochs = {b: register(c, b) for b in range(1, n + 1)}
    for b, e in epochs.items():
        assert heartbeat(c, b, e, 10)["is_fenced"] is False
    return c, epochs


def create(c, topic="t", partitions=1, rf=3, min_isr=2):
    r = c.handle("create_topic", {"topic": topic, "partitions": partitions, "replication_factor": rf,
                                  "configs": {"min.insync.replicas": min_isr}}, 20)
    assert r["error"] == rpc.NONE, r
    return c.image.partitions[(topic, 0)]


def alter(c, epochs, isr, leader=1, le=None, pe=None, member_epochs=None, broker_epoch=None):
    p = c.image.partitions[("t", 0)]
    return c.handle("alter_partition", {
        "broker_id": leader, "broker_epoch": epochs[leader] if broker_epoch is None else broker_epoch,
        "topic": "t", "partition": 0,
        "leader_epoch": p.leader_epoch if le is None else le,
        "partition_epoch": p.partition_epoch if pe is None else pe,
        "new_isr": [{"broker_id": r, "broker_epoch": (member_epochs or {}).get(r, -1)} for r in isr]}, 30)


def test_placement_follows_003_and_replicas_are_distinct():
    assert place_replicas([1, 2, 3], 6, 3) == [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]]
    for reps in place_replicas([1, 2, 3, 4, 5], 15, 3):
        assert len(set(reps)) == 3
    with pytest.raises(ValueError):
        place_replicas([1, 2], 1, 3)


def test_broker_epochs_are_registration_offsets_and_survive_a_controller_restart():
    c, epochs = cluster()
    assert sorted(epochs.values()) == list(epochs.values())
    records = c.take_pending()
    image = MetadataImage()
    for o, r in enumerate(records):
        image.apply(o, r)
    restarted = Controller(ControllerConfig(session_timeout_ms=TIMEOUT), image)
    restarted.start(1000)
    again = register(restarted, 2, now=5000)  # the old session has expired
    assert again > max(epochs.values())


def test_new_broker_starts_fenced_and_unfences_only_when_caught_up():
    c = new_controller()
    e = register(c, 1)
    r = c.handle("broker_heartbeat", {"broker_id": 1, "broker_epoch": e, "want_fence": False,
                                      "metadata_offset": e - 1}, 5)
    assert r["is_fenced"] is True
    assert heartbeat(c, 1, e, 6)["is_fenced"] is False


def test_silent_broker_is_fenced_and_its_leaderships_move_to_the_isr():
    c, epochs = cluster()
    p = create(c)
    assert p.leader == 1
    for t in (500, 1000, 1400):
        heartbeat(c, 2, epochs[2], t)
        heartbeat(c, 3, epochs[3], t)
    c.tick(1500)
    p2 = c.image.partitions[("t", 0)]
    assert c.image.brokers[1].fenced
    assert p2.leader == 2 and p2.isr == [2, 3]
    assert p2.leader_epoch == p.leader_epoch + 1 and p2.partition_epoch > p.partition_epoch


NO_ELR = frozenset({"no-elr"})


def test_no_elr_variant_keeps_the_last_isr_member_and_the_partition_goes_leaderless():
    """3.5's rule (the `no-elr` variant): the ISR never becomes empty (002 2.8)."""
    c, epochs = cluster(variants=NO_ELR)
    create(c)
    c.tick(5000)  # everyone silent
    p = c.image.partitions[("t", 0)]
    assert p.leader == NO_LEADER and len(p.isr) == 1


def test_no_elr_variant_gives_the_last_isr_member_back_its_leadership_even_after_an_unclean_restart():
    """The Last Replica Standing (PROTOCOL.md 9.4): under 3.5's rules the last ISR member leads again
    whatever it lost, since nothing else may."""
    c, epochs = cluster(variants=NO_ELR)
    create(c)
    c.tick(5000)
    last = c.image.partitions[("t", 0)].isr[0]
    again = register(c, last, now=5100, previous=-1)  # kill -9: no clean-shutdown epoch on file
    assert heartbeat(c, last, again, 5200)["is_fenced"] is False
    p = c.image.partitions[("t", 0)]
    assert p.leader == last and p.isr == [last] and p.elr == []


def test_alter_partition_accepted_bumps_partition_epoch_only():
    c, epochs = cluster()
    p = create(c)
    r = alter(c, epochs, [1, 2])
    assert r["error"] == rpc.NONE
    q = c.image.partitions[("t", 0)]
    assert q.isr == [1, 2] and q.partition_epoch == p.partition_epoch + 1 and q.leader_epoch == p.leader_epoch


@pytest.mark.parametrize("kw,err", [
    ({"pe": -5}, rpc.INVALID_UPDATE_VERSION),
    ({"le": -1}, rpc.FENCED_LEADER_EPOCH),
    ({"le": 99}, rpc.UNKNOWN_LEADER_EPOCH),
    ({"broker_epoch": 12345}, rpc.STALE_BROKER_EPOCH),
    ({"leader": 2}, rpc.NOT_LEADER_OR_FOLLOWER),
])
def test_alter_partition_rejects_stale_fields(kw, err):
    c, epochs = cluster()
    create(c)
    isr = [2, 3] if kw.get("leader") == 2 else [1, 2]
    assert alter(c, epochs, isr, **kw)["error"] == err


def test_alter_partition_rejects_adding_a_fenced_or_restarted_replica():
    c, epochs = cluster()
    create(c)
    assert alter(c, epochs, [1, 2])["error"] == rpc.NONE
    # replica 3 with the broker epoch of an earlier incarnation (KIP-903)
    assert alter(c, epochs, [1, 2, 3], member_epochs={3: epochs[3] - 1})["error"] == rpc.INELIGIBLE_REPLICA
    for t in (500, 1000, 1400):
        heartbeat(c, 1, epochs[1], t)
        heartbeat(c, 2, epochs[2], t)
    c.tick(1500)  # 3 fenced
    assert alter(c, epochs, [1, 2, 3])["error"] == rpc.INELIGIBLE_REPLICA


def test_controlled_shutdown_moves_leadership_then_allows_shutdown():
    c, epochs = cluster()
    create(c)
    r = heartbeat(c, 1, epochs[1], 100, want_shutdown=True)
    p = c.image.partitions[("t", 0)]
    assert p.leader == 2 and 1 not in p.isr
    assert r["should_shutdown"] is True


def test_unclean_restart_is_recorded():
    c, epochs = cluster()
    c.tick(5000)
    e = register(c, 1, now=5000, previous=-1)
    assert c.image.brokers[1].clean is False and e > epochs[1]
    e2 = register(c, 2, now=5000, previous=epochs[2])
    assert c.image.brokers[2].clean is True and e2 > e


def test_create_topic_errors():
    c, epochs = cluster()
    create(c)
    r = c.handle("create_topic", {"topic": "t", "partitions": 1, "replication_factor": 3}, 30)
    assert r["error"] == rpc.TOPIC_ALREADY_EXISTS
    r = c.handle("create_topic", {"topic": "u", "partitions": 1, "replication_factor": 4}, 30)
    assert r["error"] == rpc.INVALID_REPLICATION_FACTOR
