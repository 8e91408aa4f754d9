"""The queue checker on hand-built histories: one per anomaly type, each failing as it should."""

import pytest

from checkers.queue import check_queue
from history import Op


class H:
    """A tiny history builder: ops get increasing times and indexes."""

    def __init__(self):
        self.ops: list[Op] = []

    def _add(self, type_, f, process, value):
        self.ops.append(Op(type_, f, process, value, time=len(self.ops) * 1000, index=len(self.ops)))

    def send(self, p, key, value, offset=None, outcome="ok"):
        self._add("invoke", "send", p, [key, value])
        self._add(outcome, "send", p, [key, [offset, value]] if outcome == "ok" else [key, value])
        return self

    def poll(self, p, records_by_key):
        self._add("invoke", "poll", p, None)
        self._add("ok", "poll", p, {str(k): v for k, v in records_by_key.items()})
        return self

    def final(self, p, key, hwm, records):
        self._add("invoke", "final-poll", p, [key])
        self._add("ok", "final-poll", p, [key, hwm, records])
        return self


def names(result):
    return {a.name for a in result.anomalies}


def clean() -> H:
    return (H().send(0, 0, 10, 0).send(1, 0, 11, 1).send(0, 1, 20, 0)
            .poll(2, {0: [[0, 10], [1, 11]], 1: [[0, 20]]})
            .final(3, 0, 2, [[0, 10], [1, 11]]).final(3, 1, 1, [[0, 20]]))


def test_clean_history_is_valid():
    r = check_queue(clean().ops)
    assert r.valid is True and not r.anomalies
    assert r.stats["acked-sends"] == 3


def test_lost_write_acked_but_missing_from_final_reads():
    h = H().send(0, 0, 10, 0).send(1, 0, 11, 1).final(3, 0, 1, [[0, 10]])
    r = check_queue(h.ops)
    assert r.valid is False and names(r) == {"lost-write"}
    (a,) = r.anomalies
    assert a.count == 1 and a.examples[0]["value"] == 11 and a.examples[0]["offset"] == 1


def test_lost_write_overwritten_at_its_offset_is_lost_and_inconsistent():
    h = H().send(0, 0, 10, 0).poll(1, {0: [[0, 10]]}).send(2, 0, 99, 1).final(3, 0, 1, [[0, 12]])
    r = check_queue(h.ops)
    assert {"lost-write", "inconsistent-offsets", "unexpected"} <= names(r)


def test_unexpected_value_never_sent():
    h = clean().poll(4, {0: [[2, 777]]})
    r = check_queue(h.ops)
    assert r.valid is False and "unexpected" in names(r)


def test_duplicate_value_at_two_offsets():
    h = H().send(0, 0, 10, 0).final(1, 0, 2, [[0, 10], [1, 10]])
    r = check_queue(h.ops)
    assert "duplicate" in names(r)
    dup = next(a for a in r.anomalies if a.name == "duplicate")
    assert dup.examples[0]["offsets"] == [0, 1]


def test_inconsistent_offsets_two_reads_disagree():
    h = H().send(0, 0, 10, 0).send(0, 0, 11, outcome="info").poll(1, {0: [[0, 10]]}).final(2, 0, 1, [[0, 11]])
    r = check_queue(h.ops)
    assert "inconsistent-offsets" in names(r)


def test_nonmonotonic_poll_within_a_consumer():
    h = clean().poll(2, {0: [[0, 10]]})  # process 2 had read offset 1 already
    r = check_queue(h.ops)
    assert names(r) == {"nonmonotonic-poll"}


def test_poll_skip_within_a_consumer():
    h = (H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2)
         .poll(5, {0: [[0, 10]]}).poll(5, {0: [[2, 12]]}).final(6, 0, 3, [[0, 10], [1, 11], [2, 12]]))
    r = check_queue(h.ops)
    assert names(r) == {"poll-skip"}
    (ex,) = r.anomalies[0].examples
    assert (ex["from"], ex["to"], ex["skipped_existing"]) == (0, 2, [1])


def test_a_jump_over_offsets_nothing_proves_exist_is_a_gap_not_an_anomaly():
    # offset 1 holds no record a client can see (a transaction marker): no send got it, no read returned it
    h = (H().send(0, 0, 10, 0).send(0, 0, 12, 2)
         .poll(5, {0: [[0, 10]]}).poll(5, {0: [[2, 12]]}).final(6, 0, 3, [[0, 10], [2, 12]]))
    r = check_queue(h.ops)
    assert r.valid is True and not r.anomalies
    assert r.stats["poll-gap-count"] == 2 and r.stats["poll-skip-count"] == 0  # the consumer's and the final read's
    assert [(g["process"], g["from"], g["to"]) for g in r.details["poll_gaps"]["examples"]] == [(5, 0, 2), (6, 0, 2)]


def _skip_over_offset_1(proof: str) -> H:
    """Process 5 reads offset 0, then offset 2; offset 1 holds 11, which only `proof` shows."""
    acked = proof == "an acknowledged send"  # and then lost: no read ever returns it
    h = H().send(0, 0, 10, 0).send(1, 0, 11, 1 if acked else None, outcome="ok" if acked else "info")
    h.send(0, 0, 12, 2)
    if proof == "another consumer's poll":
        h.poll(7, {0: [[0, 10], [1, 11]]})
    h.poll(5, {0: [[0, 10]]}).poll(5, {0: [[2, 12]]})
    if proof == "a later final read":
        return h.final(6, 0, 3, [[0, 10], [1, 11], [2, 12]])
    return h.final(6, 0, 3, [[0, 10], [2, 12]])


@pytest.mark.parametrize("proof, proof_f", [("an acknowledged send", "send"), ("another consumer's poll", "poll"),
                                            ("a later final read", "final-poll")])
def test_a_jump_over_an_offset_some_op_proves_exists_is_a_poll_skip(proof, proof_f):
    r = check_queue(_skip_over_offset_1(proof).ops)
    assert r.valid is False and "poll-skip" in names(r)
    skips = next(a for a in r.anomalies if a.name == "poll-skip").examples
    assert [(ex["skipped_existing"], ex["proof"]["f"]) for ex in skips if ex["process"] == 5] == [([1], proof_f)]


def test_an_offset_proven_only_before_a_power_cut_beyond_the_budget_does_not_prove_a_later_jump_a_skip():
    # offset 1 was acknowledged before every ISR member lost power; the log after the cut may lack it
    h = power_cut(H().send(0, 0, 10, 0).send(1, 0, 11, 1), beyond=True).send(0, 0, 12, 2)
    h = h.poll(5, {0: [[0, 10]]}).poll(5, {0: [[2, 12]]}).final(6, 0, 3, [[0, 10], [2, 12]])
    r = check_queue(h.ops)
    assert r.stats["poll-skip-count"] == 0 and r.stats["poll-gap-count"] == 2


def test_missing_final_read_makes_the_verdict_unknown():
    h = H().send(0, 0, 10, 0).send(0, 1, 20, 0).final(1, 0, 1, [[0, 10]])
    r = check_queue(h.ops)
    assert r.valid == "unknown" and r.stats["keys-without-final-read"] == [1]


def test_info_sends_later_read_are_counted_and_failed_sends_are_not_lost():
    h = (H().send(0, 0, 10, outcome="info").send(1, 0, 11, outcome="fail").send(2, 0, 12, 1)
         .final(3, 0, 2, [[0, 10], [1, 12]]))
    r = check_queue(h.ops)
    assert r.valid is True
    assert r.stats["info-sends-later-read"] == 1 and r.stats["send-fail"] == 1


def test_unmatched_invocation_counts_as_info():
    h = H().send(2, 0, 11, 0)
    h._add("invoke", "send", 0, [0, 10])
    h.final(1, 0, 1, [[0, 11]])
    r = check_queue(h.ops)
    assert r.valid is True and r.stats["send-info"] == 1


def power_cut(h: H, beyond: bool) -> H:
    value = {"lossy-crash": "broker-2", "dropped": {}}
    if beyond:
        value["beyond_fault_budget"] = True
    h._add("invoke", "scenario-lossy-crash", "nemesis", {"node": "broker-2"})
    h._add("info", "scenario-lossy-crash", "nemesis", value)
    return h


def test_loss_of_writes_acked_before_a_power_cut_beyond_the_budget_is_counted_apart_not_an_anomaly():
    h = power_cut(H().send(0, 0, 10, 0).send(1, 0, 11, 1), beyond=True).final(3, 0, 1, [[0, 10]])
    r = check_queue(h.ops)
    assert r.valid is True and not r.anomalies
    assert r.stats["lost-beyond-fault-budget"] == 1
    lost = r.details["lost_beyond_fault_budget"]
    assert lost["by_key"] == {"0": 1} and lost["examples"] == [{"key": 0, "offset": 1, "value": 11}]


def test_a_power_cut_within_the_budget_excuses_nothing():
    h = power_cut(H().send(0, 0, 10, 0).send(1, 0, 11, 1), beyond=False).final(3, 0, 1, [[0, 10]])
    r = check_queue(h.ops)
    assert r.valid is False and names(r) == {"lost-write"} and "lost-beyond-fault-budget" not in r.stats


def test_writes_acked_after_the_power_cut_beyond_the_budget_must_still_survive():
    h = power_cut(H().send(0, 0, 10, 0), beyond=True).send(1, 0, 11, 1).final(3, 0, 1, [[0, 10]])
    r = check_queue(h.ops)
    assert r.valid is False and names(r) == {"lost-write"}
    assert r.anomalies[0].examples[0]["value"] == 11 and r.stats["lost-beyond-fault-budget"] == 0


def test_reads_on_either_side_of_a_power_cut_beyond_the_budget_are_not_compared():
    # Offset 1 held 11 before every ISR member lost power, and 12 after: the loss took offset 1
    # back and a new send reused it. Within the contract that is no anomaly; the same two reads
    # without the cut are an inconsistent offset and a consumer going backwards.
    def history(beyond):
        h = H().send(0, 0, 10, 0).send(1, 0, 11, 1).poll(2, {0: [[0, 10], [1, 11]]})
        power_cut(h, beyond)
        return (h.send(1, 0, 12, 1).poll(2, {0: [[1, 12]]}).poll(4, {0: [[0, 10], [1, 12]]})
                .final(3, 0, 2, [[0, 10], [1, 12]]))

    r = check_queue(history(beyond=True).ops)
    assert r.valid is True and r.stats["lost-beyond-fault-budget"] == 1
    r = check_queue(history(beyond=False).ops)
    assert {"inconsistent-offsets", "nonmonotonic-poll", "lost-write"} <= names(r)


def test_disagreements_within_one_side_of_the_power_cut_still_count():
    h = power_cut(H().send(0, 0, 10, 0), beyond=True)
    h = h.send(1, 0, 11, 1).poll(2, {0: [[1, 11]]}).poll(4, {0: [[1, 99]]}).final(3, 0, 2, [[0, 10], [1, 11]])
    assert {"inconsistent-offsets", "unexpected"} <= names(check_queue(h.ops))


def test_the_log_order_checker_compares_observations_within_each_side_of_the_cut_only():
    from checkers.log_order import check_log_order

    def history(beyond):
        h = H().send(0, 0, 10, 0).send(1, 0, 11, 1).poll(2, {0: [[0, 10], [1, 11]]})
        power_cut(h, beyond)
        return h.send(1, 0, 12, 1).poll(4, {0: [[0, 10], [1, 12]]}).final(3, 0, 2, [[0, 10], [1, 12]])

    r = check_log_order(history(beyond=True).ops)
    assert r.valid is True and r.stats["eras"] == 2
    broken = {a.name for a in check_log_order(history(beyond=False).ops).anomalies}
    assert "inconsistent-offsets" in broken
    h = power_cut(H().send(0, 0, 10, 0), beyond=True)
    h = h.send(1, 0, 11, 1).poll(2, {0: [[1, 11]]}).poll(4, {0: [[1, 99]]}).final(3, 0, 2, [[0, 10], [1, 11]])
    assert {"inconsistent-offsets", "unexpected"} <= {a.name for a in check_log_order(h.ops).anomalies}


def test_the_queue_values_read_every_shape_of_the_schema_once():
    from checkers.queue import QUEUE_VALUES as v
    from workloads.registry import value_reader

    assert value_reader("queue") is v  # what the report and the pipeline read a queue history with
    h = clean().send(4, 2, 30, outcome="info").ops
    send, acked, poll, final_inv, final = h[0], h[1], h[7], h[8], h[9]
    assert (v.key(send), v.written(send), list(v.records(send)), v.drained(send)) == (0, (0, None, 10), [], None)
    assert v.written(acked) == (0, 0, 10) and v.written(h[-1]) == (2, None, 30)  # an info send echoes its value
    assert v.key(poll) is None and list(v.records(poll)) == [(0, 0, 10), (0, 1, 11), (1, 0, 20)]
    assert (v.key(final_inv), v.drained(final_inv)) == (0, None)
    assert (v.key(final), v.drained(final), list(v.records(final))) == (0, (0, 2), [(0, 0, 10), (0, 1, 11)])
    assert set(v.op_names) == {"send", "poll", "final-poll"}


# --- subscribe mode: the consumers are one group (workloads/queue.py queue_mode "subscribe") -------------
def group_history() -> H:
    """Process 1 reads offsets 0-1 and crashes; process 6 (its worker's next process) resumes at the
    group's committed offset 2; process 2 took partition 1 in a rebalance and read it from 0."""
    return (H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3).send(0, 1, 20, 0)
            .poll(1, {0: [[0, 10], [1, 11]]}).poll(6, {0: [[2, 12], [3, 13]]}).poll(2, {1: [[0, 20]]})
            .final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]]).final(9, 1, 1, [[0, 20]]))


def test_a_group_whose_members_together_read_every_offset_is_valid():
    r = check_queue(group_history().ops, subscribe=True)
    assert r.valid is True and not r.anomalies


def test_a_restarted_consumer_reading_again_from_its_committed_offset_is_allowed():
    # process 6 crashed before its commit of offset 4: process 11 reads 2-3 again (at-least-once) and goes back
    h = group_history().poll(11, {0: [[2, 12], [3, 13]]}).poll(6, {0: [[1, 11]]})
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is True and not r.anomalies
    assert r.stats["subscribe-rewinds"] == 1


def test_a_restarted_consumer_that_resumes_past_the_committed_offset_is_a_group_skip():
    # process 1 read 0-1 and committed 2; its successor resumed at 3: nobody in the group ever read offset 2
    h = (H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3)
         .poll(1, {0: [[0, 10], [1, 11]]}).poll(6, {0: [[3, 13]]})
         .final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]]))
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is False and names(r) == {"group-skip"}
    (ex,) = r.anomalies[0].examples
    assert (ex["key"], ex["offset"], ex["group_read_up_to"]) == (0, 2, 3)


def test_offsets_past_everything_the_group_read_are_not_a_skip():
    h = (H().send(0, 0, 10, 0).send(0, 0, 11, 1).poll(1, {0: [[0, 10]]})
         .final(9, 0, 2, [[0, 10], [1, 11]]))
    assert check_queue(h.ops, subscribe=True).valid is True


def test_a_jump_over_a_marker_offset_is_no_group_skip():
    h = (H().send(0, 0, 10, 0).send(0, 0, 12, 2).poll(1, {0: [[0, 10]]}).poll(6, {0: [[2, 12]]})
         .final(9, 0, 3, [[0, 10], [2, 12]]))
    assert check_queue(h.ops, subscribe=True).valid is True


def test_outside_subscribe_mode_the_same_jump_is_a_poll_skip_of_one_consumer():
    h = (H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2)
         .poll(1, {0: [[0, 10]]}).poll(1, {0: [[2, 12]]}).final(9, 0, 3, [[0, 10], [1, 11], [2, 12]]))
    assert names(check_queue(h.ops)) == {"poll-skip"}
    assert names(check_queue(h.ops, subscribe=True)) == {"group-skip"}


# --- lost-commit: the group resumes below an acknowledged commit (offsets-commit-acks-1's fail-over) --------
def committed_poll(h: H, p, records_by_key, committed) -> H:
    """A subscribe-mode poll whose completion carries the commit the workload made of what it read."""
    h._add("invoke", "poll", p, None)
    h.ops.append(Op("ok", "poll", p, {str(k): v for k, v in records_by_key.items()}, time=len(h.ops) * 1000,
                    index=len(h.ops), extra={"committed": {str(k): o for k, o in committed.items()}}))
    return h


def four_records() -> H:
    return H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3)


def test_a_member_resuming_below_an_acknowledged_commit_is_a_lost_commit():
    # process 1 read 0-2 and its commit of 3 was acknowledged; its successor was given offset 1 by the group
    h = committed_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, {0: 3})
    h = h.poll(6, {0: [[1, 11], [2, 12], [3, 13]]}).final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]])
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is False and names(r) == {"lost-commit"}
    (ex,) = r.anomalies[0].examples
    assert (ex["key"], ex["offset"], ex["committed"], ex["process"]) == (0, 1, 3, 6)


def test_resuming_at_the_committed_offset_or_below_an_unacknowledged_commit_is_at_least_once():
    at = committed_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, {0: 3})
    at = at.poll(6, {0: [[3, 13]]}).final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]])
    assert check_queue(at.ops, subscribe=True).valid is True
    # the commit failed (no "committed" on the completion): reading 1-3 again is the at-least-once redelivery
    unacked = four_records().poll(1, {0: [[0, 10], [1, 11], [2, 12]]}).poll(6, {0: [[1, 11], [2, 12], [3, 13]]})
    assert check_queue(unacked.final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]]).ops, subscribe=True).valid is True


def test_a_member_reading_on_from_its_own_position_is_no_lost_commit():
    # process 1 keeps its partition and reads on; another process's later commit changes nothing for it
    h = committed_poll(four_records(), 1, {0: [[0, 10], [1, 11]]}, {0: 2})
    h = h.poll(1, {0: [[2, 12], [3, 13]]}).final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]])
    assert check_queue(h.ops, subscribe=True).valid is True


def resent_send(h: H, p, key, value, offset, requests=2, outcome="ok"):
    """A send the client sent in `requests` produce requests (librdkafka re-sends a batch answered
    NOT_LEADER_OR_FOLLOWER whatever its retries; workloads/queue.py records it on the completion)."""
    h.send(p, key, value, offset, outcome=outcome)
    h.ops[-1].extra = {"resent": {"requests": requests, "errors": ["Broker: Not leader for partition"]}}
    return h


def test_copies_of_a_value_the_client_resent_are_counted_not_a_duplicate():
    """The detection run's shape: the first request appended at 0 and was answered NOT_LEADER_OR_FOLLOWER,
    the re-sent one was acknowledged at 1. Both copies are the client's own appends."""
    from checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, 1).poll(1, {0: [[0, 10], [1, 10]]}).final(2, 0, 2, [[0, 10], [1, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert r.valid is True and not r.anomalies, r.anomalies
        assert r.stats["resent-duplicate-count"] == 1
    assert check_queue(h.ops).details["resent_duplicates"]["examples"][0]["offsets"] == [0, 1]


def test_more_copies_than_the_client_sent_requests_are_still_a_duplicate():
    from checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, 2).final(2, 0, 3, [[0, 10], [1, 10], [2, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert "duplicate" in names(r)


def test_a_resent_send_that_failed_may_still_have_been_appended():
    from checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, None, outcome="info").final(2, 0, 2, [[0, 10], [1, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert not r.anomalies, r.anomalies
