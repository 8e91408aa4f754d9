"""The queue checker on hand-built histories: one per anomaly type, each failing as it should."""

import pytest

from kafkaesque_harness.checkers.queue import check_queue
from kafkaesque_harness.history import Op


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
    from kafkaesque_harness.checkers.log_order import check_log_order

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
    from kafkaesque_harness.checkers.queue import QUEUE_VALUES as v
    from kafkaesque_harness.workloads.registry import value_reader

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
def group_poll(h: H, p, records_by_key, assigned=(), committed=None, commit_error=None, commit_offsets=None,
               invoke=True, complete=True) -> H:
    """A subscribe-mode poll: its completion carries the partitions the rebalance assigned during it, and the
    commit the workload made of what it read. invoke/complete: add only one half (to interleave ops)."""
    if invoke:
        h._add("invoke", "poll", p, None)
    if complete:
        extra = {}
        if assigned:
            extra["rebalance_log"] = [{"keys": sorted(assigned), "type": "assigned"}]
        if committed is not None:
            extra["committed"] = {str(k): o for k, o in committed.items()}
        if commit_error is not None:
            extra["commit_error"] = commit_error
            if commit_offsets is not None:
                extra["commit_offsets"] = {str(k): o for k, o in commit_offsets.items()}
        h.ops.append(Op("ok", "poll", p, {str(k): v for k, v in records_by_key.items()}, time=len(h.ops) * 1000,
                        index=len(h.ops), extra=extra or None))
    return h


def group_history() -> H:
    """Process 1 reads offsets 0-1 and crashes; process 6 (its worker's next process) resumes at the
    group's committed offset 2; process 2 took partition 1 in a rebalance and read it from 0."""
    h = H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3).send(0, 1, 20, 0)
    group_poll(h, 1, {0: [[0, 10], [1, 11]]}, assigned=[0])
    group_poll(h, 6, {0: [[2, 12], [3, 13]]}, assigned=[0])
    group_poll(h, 2, {1: [[0, 20]]}, assigned=[1])
    return h.final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]]).final(9, 1, 1, [[0, 20]])


def test_a_group_whose_members_together_read_every_offset_is_valid():
    r = check_queue(group_history().ops, subscribe=True)
    assert r.valid is True and not r.anomalies


def test_a_restarted_consumer_reading_again_from_its_committed_offset_is_allowed():
    # process 6 crashed before its commit of offset 4: process 11 reads 2-3 again (at-least-once) and goes back
    h = group_poll(group_history(), 11, {0: [[2, 12], [3, 13]]}, assigned=[0])
    h = h.poll(6, {0: [[1, 11]]})
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is True and not r.anomalies
    assert r.stats["subscribe-rewinds"] == 1


def test_a_restarted_consumer_that_resumes_past_the_committed_offset_is_a_group_skip():
    # process 1 read 0-1 and committed 2; its successor resumed at 3: nobody in the group ever read offset 2
    h = H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3)
    group_poll(h, 1, {0: [[0, 10], [1, 11]]}, assigned=[0], committed={0: 2})
    group_poll(h, 6, {0: [[3, 13]]}, assigned=[0]).final(9, 0, 4, [[0, 10], [1, 11], [2, 12], [3, 13]])
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is False and names(r) == {"group-skip"}
    (ex,) = r.anomalies[0].examples
    assert (ex["key"], ex["offset"], ex["group_read_up_to"]) == (0, 2, 3)


def test_offsets_past_everything_the_group_read_are_not_a_skip():
    h = group_poll(H().send(0, 0, 10, 0).send(0, 0, 11, 1), 1, {0: [[0, 10]]}, assigned=[0])
    assert check_queue(h.final(9, 0, 2, [[0, 10], [1, 11]]).ops, subscribe=True).valid is True


def test_a_jump_over_a_marker_offset_is_no_group_skip():
    h = group_poll(H().send(0, 0, 10, 0).send(0, 0, 12, 2), 1, {0: [[0, 10]]}, assigned=[0])
    h = group_poll(h, 6, {0: [[2, 12]]}, assigned=[0]).final(9, 0, 3, [[0, 10], [2, 12]])
    assert check_queue(h.ops, subscribe=True).valid is True


def test_outside_subscribe_mode_the_same_jump_is_a_poll_skip_of_one_consumer():
    h = (H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2)
         .poll(1, {0: [[0, 10]]}).poll(1, {0: [[2, 12]]}).final(9, 0, 3, [[0, 10], [1, 11], [2, 12]]))
    assert names(check_queue(h.ops)) == {"poll-skip"}
    h.ops[5].extra = {"rebalance_log": [{"keys": [0], "type": "assigned"}]}
    assert names(check_queue(h.ops, subscribe=True)) == {"group-skip"}


def test_a_group_history_without_assignments_on_record_cannot_be_judged_for_lost_commits():
    # a history from before the workload logged rebalances: no lost-commit can be proven or ruled out
    h = H().send(0, 0, 10, 0).send(0, 0, 11, 1).poll(1, {0: [[0, 10], [1, 11]]}).final(9, 0, 2, [[0, 10], [1, 11]])
    r = check_queue(h.ops, subscribe=True)
    assert r.valid == "unknown" and not r.anomalies
    assert "no assignment of them on record" in r.unknown_reasons[0]
    assert r.stats["takeups-without-assignment"] == 1


# --- lost-commit: the group resumes below every commit it could hold (offsets-commit-acks-1's fail-over) ----
def four_records() -> H:
    return H().send(0, 0, 10, 0).send(0, 0, 11, 1).send(0, 0, 12, 2).send(0, 0, 13, 3)


FINAL = [[0, 10], [1, 11], [2, 12], [3, 13]]


def test_a_member_resuming_below_an_acknowledged_commit_is_a_lost_commit():
    # process 1 read 0-2 and its commit of 3 was acknowledged; its successor, assigned after, was given offset 1
    h = group_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    h = group_poll(h, 6, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is False and names(r) == {"lost-commit"}
    (ex,) = r.anomalies[0].examples
    assert (ex["key"], ex["offset"], ex["committed"], ex["process"]) == (0, 1, 3, 6)
    assert [op["index"] for op in ex["reads"]] == [9, 11, 11]  # the commit's poll, the assignment's, the read


def test_a_member_reassigned_its_own_partition_and_reading_on_below_the_group_commit_is_a_lost_commit():
    # process 1 read 0, process 2 took the partition and committed 3; process 1 got it back and read on at 1:
    # its next offset, but the group's was 3
    h = group_poll(four_records(), 1, {0: [[0, 10]]}, assigned=[0], committed={0: 1})
    h = group_poll(h, 2, {0: [[1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    h = group_poll(h, 1, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    assert names(check_queue(h.ops, subscribe=True)) == {"lost-commit"}


def test_resuming_at_the_committed_offset_or_below_an_unacknowledged_commit_is_at_least_once():
    at = group_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    at = group_poll(at, 6, {0: [[3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    assert check_queue(at.ops, subscribe=True).valid is True
    # the commit was refused (no "committed" on the completion): reading 1-3 again is the at-least-once redelivery
    unacked = group_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0],
                         commit_error="CommitFailedError: the group has already rebalanced")
    unacked = group_poll(unacked, 6, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    assert check_queue(unacked.ops, subscribe=True).valid is True


def test_a_commit_acknowledged_after_the_assignment_began_does_not_bind_the_new_owner():
    # The false lost-commit of run detection-txn-group-default/20261126T085044: process 2 was assigned the
    # partition (and fetched the group's offset, 1) in a poll that began before process 1's commit of 3 was
    # acknowledged; the classic protocol lets a member commit a partition it no longer owns.
    h = group_poll(four_records(), 1, {0: [[0, 10]]}, assigned=[0], committed={0: 1})
    group_poll(h, 1, {0: [[1, 11], [2, 12]]}, complete=False)
    group_poll(h, 2, {}, assigned=[0], complete=False)
    group_poll(h, 1, {0: [[1, 11], [2, 12]]}, committed={0: 3}, invoke=False)
    group_poll(h, 2, {}, assigned=[0], invoke=False)
    h = group_poll(h, 2, {0: [[1, 11], [2, 12], [3, 13]]}).final(9, 0, 4, FINAL)
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is True and not r.anomalies
    assert r.stats["takeups-judged-against-commits"] == 1  # process 1's commit of 1 bound process 2
    # the same commit acknowledged before the assignment's poll began binds it
    h = group_poll(four_records(), 1, {0: [[0, 10]]}, assigned=[0], committed={0: 1})
    group_poll(h, 1, {0: [[1, 11], [2, 12]]}, committed={0: 3})
    h = group_poll(h, 2, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    assert names(check_queue(h.ops, subscribe=True)) == {"lost-commit"}


def test_a_later_lower_commit_is_the_group_offset_and_no_lost_commit():
    # process 1 committed 3; process 2, assigned before that commit, re-read 1 and committed 2 after it: the
    # group's offset is 2, and process 6 (assigned after both) starting at 2 loses nothing
    h = group_poll(four_records(), 2, {}, assigned=[0])
    group_poll(h, 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    group_poll(h, 2, {0: [[1, 11]]}, committed={0: 2})
    h = group_poll(h, 6, {0: [[2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    r = check_queue(h.ops, subscribe=True)
    assert r.valid is True and not r.anomalies
    # starting below the lower commit too is a lost-commit
    h = group_poll(four_records(), 2, {}, assigned=[0])
    group_poll(h, 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    group_poll(h, 2, {0: [[1, 11]]}, committed={0: 2})
    h = group_poll(h, 6, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    (a,) = check_queue(h.ops, subscribe=True).anomalies
    assert a.name == "lost-commit" and a.examples[0]["committed"] == 2


def test_a_commit_that_failed_without_a_definite_answer_may_be_the_group_offset():
    # process 1's commit of 3 was acknowledged; process 2 (assigned the partition before it) then read offset 0
    # again and its commit of 1 timed out: it may have been applied
    def history(error):
        h = group_poll(four_records(), 2, {}, assigned=[0])
        group_poll(h, 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
        group_poll(h, 2, {0: [[0, 10]]}, commit_error=error, commit_offsets={0: 1})
        return group_poll(h, 6, {0: [[1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    assert check_queue(history("KafkaException: KafkaError{code=_TIMED_OUT}").ops, subscribe=True).valid is True
    # refused with a definite error, it was never applied: the group's offset was 3
    assert names(check_queue(history("partition 0: KafkaError{code=ILLEGAL_GENERATION}").ops,
                             subscribe=True)) == {"lost-commit"}


def test_a_commit_in_flight_when_the_assignment_began_may_be_the_group_offset():
    # process 2 (assigned before process 1's commit of 3) re-read offset 0; its commit of 1 began before
    # process 6's assignment and was acknowledged after: either commit may be the group's offset when process 6
    # fetched it
    h = group_poll(four_records(), 2, {}, assigned=[0])
    group_poll(h, 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    group_poll(h, 2, {0: [[0, 10]]}, complete=False)
    group_poll(h, 6, {}, assigned=[0], complete=False)
    group_poll(h, 2, {0: [[0, 10]]}, committed={0: 1}, invoke=False)
    group_poll(h, 6, {}, assigned=[0], invoke=False)
    h = group_poll(h, 6, {0: [[1, 11], [2, 12], [3, 13]]}).final(9, 0, 4, FINAL)
    assert check_queue(h.ops, subscribe=True).valid is True
    # had it begun after the assignment's poll, the group's offset was 3
    h = group_poll(four_records(), 2, {}, assigned=[0])
    group_poll(h, 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0], committed={0: 3})
    group_poll(h, 6, {}, assigned=[0], complete=False)
    group_poll(h, 2, {0: [[0, 10]]}, complete=False)
    group_poll(h, 6, {}, assigned=[0], invoke=False)
    group_poll(h, 2, {0: [[0, 10]]}, committed={0: 1}, invoke=False)
    h = group_poll(h, 6, {0: [[1, 11], [2, 12], [3, 13]]}).final(9, 0, 4, FINAL)
    assert names(check_queue(h.ops, subscribe=True)) == {"lost-commit"}


def test_a_member_reading_on_from_its_own_position_is_no_lost_commit():
    # process 1 keeps its partition and reads on; another process's later commit changes nothing for it
    h = group_poll(four_records(), 1, {0: [[0, 10], [1, 11]]}, assigned=[0], committed={0: 2})
    h = h.poll(1, {0: [[2, 12], [3, 13]]}).final(9, 0, 4, FINAL)
    assert check_queue(h.ops, subscribe=True).valid is True


def test_commit_errors_are_definite_only_when_every_partition_was_refused():
    from kafkaesque_harness.checkers.queue import commit_error_is_definite

    assert commit_error_is_definite("CommitFailedError: Commit cannot be completed since the group has already rebalanced")
    assert commit_error_is_definite("partition 1: KafkaError{code=ILLEGAL_GENERATION}; "
                                    "partition 2: KafkaError{code=UNKNOWN_MEMBER_ID}")
    assert not commit_error_is_definite("partition 1: KafkaError{code=ILLEGAL_GENERATION}; "
                                        "partition 2: KafkaError{code=REQUEST_TIMED_OUT}")
    # a coordinator answers NOT_COORDINATOR to a commit it appended and lost the leadership of
    assert not commit_error_is_definite("KafkaException: KafkaError{code=NOT_COORDINATOR}")
    assert not commit_error_is_definite("")


def resent_send(h: H, p, key, value, offset, requests=2, outcome="ok"):
    """A send the client sent in `requests` produce requests (librdkafka re-sends a batch answered
    NOT_LEADER_OR_FOLLOWER whatever its retries; workloads/queue.py records it on the completion)."""
    h.send(p, key, value, offset, outcome=outcome)
    h.ops[-1].extra = {"resent": {"requests": requests, "errors": ["Broker: Not leader for partition"]}}
    return h


def test_copies_of_a_value_the_client_resent_are_counted_not_a_duplicate():
    """The detection run's shape: the first request appended at 0 and was answered NOT_LEADER_OR_FOLLOWER,
    the re-sent one was acknowledged at 1. Both copies are the client's own appends."""
    from kafkaesque_harness.checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, 1).poll(1, {0: [[0, 10], [1, 10]]}).final(2, 0, 2, [[0, 10], [1, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert r.valid is True and not r.anomalies, r.anomalies
        assert r.stats["resent-duplicate-count"] == 1
    assert check_queue(h.ops).details["resent_duplicates"]["examples"][0]["offsets"] == [0, 1]


def test_more_copies_than_the_client_sent_requests_are_still_a_duplicate():
    from kafkaesque_harness.checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, 2).final(2, 0, 3, [[0, 10], [1, 10], [2, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert "duplicate" in names(r)


def test_a_resent_send_that_failed_may_still_have_been_appended():
    from kafkaesque_harness.checkers.log_order import check_log_order

    h = resent_send(H(), 0, 0, 10, None, outcome="info").final(2, 0, 2, [[0, 10], [1, 10]])
    for r in (check_queue(h.ops), check_log_order(h.ops)):
        assert not r.anomalies, r.anomalies


# --- the log fast path's offset-gap on offsets far from 0 ---------------------------------------------------
def test_a_log_whose_offsets_start_at_2_to_the_33_checks_at_once_and_names_the_gap_below():
    """_unfilled used to walk every offset below the end (range(2**33)): hours. Offsets that far up turn the
    columns into a dict; only the offsets observations name are counted now."""
    from kafkaesque_harness.checkers.log_order import check_log_order

    base = 1 << 33
    h = H().send(0, 0, 10, base).send(0, 0, 11, base + 1).poll(1, {0: [[base, 10], [base + 1, 11]]})
    r = check_log_order(h.final(9, 0, base + 2, [[base, 10], [base + 1, 11]]).ops)
    (gap,) = [a for a in r.anomalies if a.name == "offset-gap"]
    assert f"{base} offset(s) below {base + 2} were never observed" in gap.examples[0]["summary"]
    # the same log from offset 0 has no gap: the count is of offsets, not of the dict's size
    h = H().send(0, 0, 10, 0).send(0, 0, 11, 1).poll(1, {0: [[0, 10], [1, 11]]})
    assert check_log_order(h.final(9, 0, 2, [[0, 10], [1, 11]]).ops).valid is True


def test_a_group_with_no_commit_acknowledged_yet_may_hold_none_and_a_member_may_start_at_the_reset_offset():
    # The false lost-commit of campaign claim1-queue-subscribe-kafka-python (run 20261127T234312, kill): the
    # partition's first commit ever (process 29's, of 337) timed out; process 24, assigned the partition after,
    # started at offset 0 where auto.offset.reset=earliest puts a partition without a committed offset. An
    # indefinite commit may not have been applied, and nothing had been acknowledged: the group may have held
    # no offset at all.
    def history(first_commit_acked: bool):
        h = group_poll(four_records(), 1, {0: [[0, 10], [1, 11], [2, 12]]}, assigned=[0],
                       **({"committed": {0: 3}} if first_commit_acked else
                          {"commit_error": "KafkaTimeoutError: KafkaTimeoutError: None", "commit_offsets": {0: 3}}))
        return group_poll(h, 6, {0: [[0, 10], [1, 11], [2, 12], [3, 13]]}, assigned=[0]).final(9, 0, 4, FINAL)
    r = check_queue(history(first_commit_acked=False).ops, subscribe=True)
    assert r.valid is True and not r.anomalies
    # had that commit been acknowledged before the assignment, starting at 0 loses it
    assert names(check_queue(history(first_commit_acked=True).ops, subscribe=True)) == {"lost-commit"}


def test_a_send_acknowledged_without_an_offset_is_judged_by_its_value():
    """kafka-python takes a DUPLICATE_SEQUENCE_NUMBER answer for success with offset -1 (tansu gives -1): the
    value survived if a final read holds it at any offset, and is lost if none does; it proves no offset."""
    from kafkaesque_harness.checkers.log_order import check_log_order
    from kafkaesque_harness.checkers.queue import ACK_WITHOUT_OFFSET as NONE

    # two values acknowledged without an offset, both read at offsets of their own
    kept = (H().send(0, 0, 10, 0).send(1, 0, 11, NONE).send(2, 0, 12, NONE)
            .final(3, 0, 3, [[0, 10], [1, 11], [2, 12]]))
    for check in (check_queue, check_log_order):
        r = check(kept.ops)
        assert r.valid is True and not r.anomalies, (check, r.anomalies)
    # the same, but the record of 11 was never written: a lost write, named at the offset the client was given
    lost = H().send(0, 0, 10, 0).send(1, 0, 11, NONE).final(3, 0, 1, [[0, 10]])
    r = check_queue(lost.ops)
    assert r.valid is False and names(r) == {"lost-write"}
    assert r.anomalies[0].examples[0]["value"] == 11 and r.anomalies[0].examples[0]["offset"] == NONE
    assert r.stats.get("acked-beyond-final-hwm", 0) == 0
    # an offset acknowledged nowhere else proves nothing: a consumer's jump over offset 1 is a gap, not a skip
    gap = H().send(0, 0, 10, 0).send(1, 0, 11, NONE).poll(2, {0: [[0, 10], [2, 11]]}).final(3, 0, 3, [[0, 10], [2, 11]])
    r = check_queue(gap.ops)
    assert r.valid is True and r.stats["poll-gap-count"] == 2  # the poll and the final read
