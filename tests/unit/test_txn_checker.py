"""The txn checker (Jepsen's Kafka analyses) on hand-built histories: for every analysis one history that
must be flagged and one that must pass; the allowed configuration both ways. Several histories follow the
cases of Jepsen's own tests (jepsen/test/jepsen/tests/kafka_test.clj), with int keys."""

import json
from pathlib import Path

import pytest

from kafkaesque_harness.checkers.txn import ANOMALY_TYPES, TxnChecker, TxnOptionError, check_txn
from kafkaesque_harness.history import Op


class H:
    """A history builder: ops get increasing times and indexes; send/poll values in the txn schema."""

    def __init__(self):
        self.ops: list[Op] = []

    def op(self, type_, f, p, value, **extra):
        self.ops.append(Op(type_, f, p, value, time=len(self.ops) * 1000, index=len(self.ops), extra=extra or None))
        return self

    def txn(self, p, done, outcome="ok", f="txn", invoke=None, **extra):
        """`done`: the completed micro-ops, sends as ("send", k, offset, v) (offset None: unknown) and polls
        as ("poll", {k: [(offset, v), ...]}); the invocation is derived from them."""
        inv, comp = [], []
        for m in done:
            if m[0] == "send":
                _, k, o, v = m
                inv.append(["send", k, v])
                comp.append(["send", k, [o, v]] if o is not None else ["send", k, v])
            else:
                inv.append(["poll"])
                comp.append(["poll", {str(k): [[o, v] for o, v in recs] for k, recs in m[1].items()}])
        final = {"final": True} if extra.pop("final", False) else {}
        self.op("invoke", f, p, invoke or inv, **final)
        return self.op(outcome, f, p, comp, **final, **extra)

    def send(self, p, k, o, v, outcome="ok"):
        return self.txn(p, [("send", k, o, v)], outcome, f="send")

    def poll(self, p, recs, outcome="ok", **extra):
        return self.txn(p, [("poll", recs)], outcome, f="poll", **extra)

    def assign(self, p, keys, f="assign", outcome="ok"):
        self.op("invoke", f, p, keys)
        return self.op(outcome, f, p, keys)


def names(result):
    return {a.name for a in result.anomalies}


def allowed_names(result):
    return {a["name"] for a in result.details.get("allowed", [])}


def example(result, name):
    return next(a for a in result.anomalies if a.name == name).examples[0]


def clean() -> H:
    """Two committed transactions, a reader that sees both in order, final reads of both keys."""
    return (H().txn(0, [("send", 0, 0, 1), ("send", 1, 0, 2)])
            .txn(1, [("send", 0, 1, 3), ("poll", {1: [(0, 2)]})])
            .poll(2, {0: [(0, 1), (1, 3)]})
            .poll(9, {0: [(0, 1), (1, 3)]}, final=True).poll(10, {1: [(0, 2)]}, final=True))


def test_a_clean_history_is_valid_with_no_anomaly_and_no_allowed_one():
    r = check_txn(clean().ops)
    assert r.valid is True, r.to_dict()
    assert r.anomalies == [] and "allowed" not in r.details
    assert r.stats["transactions"] == 5


# --- inconsistent-offsets, duplicate ------------------------------------------------------------------------

def test_inconsistent_offsets_flags_two_values_at_one_offset_once_the_info_sender_is_proven_committed():
    h = (H().txn(0, [("send", 0, 0, 1), ("send", 1, None, 1)], "info", f="send")
         .send(1, 0, 0, 2))
    assert "inconsistent-offsets" not in names(check_txn(h.ops))  # the info send may not have committed
    r = check_txn(h.poll(2, {1: [(5, 1)]}).ops)
    assert "inconsistent-offsets" in names(r)
    ex = example(r, "inconsistent-offsets")
    assert ex["key"] == 0 and ex["offset"] == 0 and set(ex["values"]) == {1, 2}


def test_duplicate_flags_one_value_at_two_offsets_and_passes_distinct_ones():
    h = H().send(0, 0, 1, 10).send(1, 0, None, 11, outcome="info").poll(2, {0: [(2, 11), (3, 10)]})
    r = check_txn(h.ops)
    assert "duplicate" in names(r)
    assert example(r, "duplicate")["offsets"] == [1, 3]
    assert "duplicate" not in names(check_txn(H().send(0, 0, 1, 10).poll(2, {0: [(1, 10)]}).ops))


# --- lost-write, unseen ---------------------------------------------------------------------------------------

def lost_history(read_all: bool) -> H:
    # Jepsen's lost-write "consistent" case: a@0, b@1 (d@3) ok, c@2 info; a read of c at 2 means a and b
    # should have been read.
    h = (H().send(0, 0, 0, 100).txn(0, [("send", 0, 1, 101), ("send", 0, 3, 103)], f="send")
         .send(1, 0, None, 102, outcome="info"))
    return h.poll(2, {0: [(0, 100), (1, 101), (2, 102)] if read_all else [(2, 102)]})


def test_lost_write_flags_committed_sends_below_the_highest_read_offset_that_nobody_read():
    r = check_txn(lost_history(read_all=False).ops)
    assert "lost-write" in names(r)
    assert sorted(ex["value"] for ex in next(a for a in r.anomalies if a.name == "lost-write").examples) == [100, 101]
    assert "lost-write" not in names(check_txn(lost_history(read_all=True).ops))


def test_unseen_flags_a_committed_send_no_committed_read_returned():
    r = check_txn(lost_history(read_all=True).ops)
    assert "unseen" in names(r) and example(r, "unseen")["value"] == 103
    assert "unseen" not in names(check_txn(lost_history(read_all=True).poll(3, {0: [(3, 103)]}).ops))


# --- G1a, precommitted-read ------------------------------------------------------------------------------------

def test_g1a_flags_a_committed_read_of_a_failed_send():
    h = H().txn(0, [("send", 0, None, 2), ("send", 1, None, 3)], "fail", f="send").poll(1, {0: [(0, 2)]})
    r = check_txn(h.ops)
    assert "G1a" in names(r) and example(r, "G1a")["op_indexes"] == [3, 1]
    assert "G1a" not in names(check_txn(H().send(0, 0, 0, 2).poll(1, {0: [(0, 2)]}).ops))


def test_precommitted_read_flags_a_transaction_polling_its_own_send():
    r = check_txn(H().txn(0, [("send", 0, 0, 1), ("poll", {0: [(0, 1)]})]).ops)
    assert "precommitted-read" in names(r)
    other = H().send(1, 0, 0, 1).txn(0, [("send", 0, 1, 2), ("poll", {0: [(0, 1)]})])
    assert "precommitted-read" not in names(check_txn(other.ops))


# --- within one transaction ------------------------------------------------------------------------------------

def three_sends() -> H:
    return H().txn(1, [("send", 0, None, "a"), ("send", 0, None, "b"), ("send", 0, None, "d")], "info", f="send")


def test_int_poll_skip_flags_a_poll_passing_over_a_value_that_exists():
    # Jepsen's case: one op reads offsets 1 and 4 (in one poll, then in two); another reads 2.
    h = (three_sends().poll(0, {0: [(1, "a"), (4, "d")]})
         .txn(0, [("poll", {0: [(1, "a")]}), ("poll", {0: [(4, "d")]})]).poll(0, {0: [(2, "b")]}))
    r = check_txn(h.ops)
    skips = next(a for a in r.anomalies if a.name == "int-poll-skip")
    assert skips.count == 2 and skips.examples[0]["skipped"] == ["b"]
    assert "int-poll-skip" not in names(check_txn(three_sends().poll(0, {0: [(1, "a"), (2, "b"), (4, "d")]}).ops))


def test_int_poll_skip_is_excused_for_a_key_rebalanced_during_the_op():
    h = three_sends().poll(0, {0: [(1, "a"), (4, "d")]}, rebalance_log=[{"keys": [0], "type": "assigned"}])
    assert "int-poll-skip" not in names(check_txn(h.poll(0, {0: [(2, "b")]}).ops))


def test_int_nonmonotonic_poll_flags_reads_going_back_or_repeating():
    h = (H().txn(0, [("send", 0, None, "a"), ("send", 0, None, "b"), ("send", 0, None, "c")], "info", f="send")
         .poll(0, {0: [(3, "c"), (1, "a")]})
         .txn(0, [("poll", {0: [(2, "b"), (3, "c")]}), ("poll", {0: [(3, "c")]})]))
    r = check_txn(h.ops)
    found = next(a for a in r.anomalies if a.name == "int-nonmonotonic-poll")
    assert [ex["delta"] for ex in found.examples] == [-2, 0]
    assert "int-nonmonotonic-poll" not in names(check_txn(H().send(0, 0, 1, "a").send(0, 0, 3, "c")
                                                          .poll(1, {0: [(1, "a"), (3, "c")]}).ops))


def test_int_send_skip_is_found_but_allowed_as_in_jepsen():
    # Jepsen's case: a@1 and c (offset unknown) sent by one op, b between them, a poll gives c at 3.
    h = (H().txn(0, [("send", 0, 1, "a"), ("send", 0, None, "c")], f="send").send(1, 0, None, "b", outcome="info")
         .poll(2, {0: [(2, "b"), (3, "c")]}))
    r = check_txn(h.ops, allowed=())
    assert "int-send-skip" in allowed_names(r) and "int-send-skip" not in names(r)
    adjacent = H().txn(0, [("send", 0, 1, "a"), ("send", 0, 2, "c")], f="send").poll(2, {0: [(1, "a"), (2, "c")]})
    assert "int-send-skip" not in allowed_names(check_txn(adjacent.ops))


def test_int_nonmonotonic_send_flags_a_later_send_landing_before_an_earlier_one():
    r = check_txn(H().txn(0, [("send", 0, 3, "c"), ("send", 0, 1, "a")], f="send").ops)
    assert "int-nonmonotonic-send" in names(r) and example(r, "int-nonmonotonic-send")["delta"] == -1
    assert "int-nonmonotonic-send" not in names(check_txn(H().txn(0, [("send", 0, 1, "a"), ("send", 0, 3, "c")],
                                                                 f="send").ops))


# --- between one process's transactions ------------------------------------------------------------------------

def poll_skip_history(between=None) -> H:
    # Jepsen's poll-skip case: process 0 reads 1-2, then 4 (3 exists), then 7 (6 exists).
    h = H().poll(0, {0: [(1, "a"), (2, "b")]}).poll(1, {0: [(3, "c")]})
    if between:
        h.assign(0, between[0], f=between[1])
    h.poll(0, {0: [(4, "d")]}).send(2, 0, 6, "f").poll(0, {0: [(7, "g")]})
    return h.txn(3, [("send", 0, None, v) for v in "abcdg"], "info", f="send")


def test_poll_skip_flags_a_process_starting_past_values_that_exist():
    r = check_txn(poll_skip_history().ops)
    skips = next(a for a in r.anomalies if a.name == "poll-skip")
    assert skips.count == 2 and [ex["skipped"] for ex in skips.examples] == [["c"], ["f"]]


def test_poll_skip_resets_when_an_assign_or_subscribe_drops_the_key_and_not_when_it_keeps_it():
    assert [ex["skipped"] for ex in next(a for a in check_txn(poll_skip_history(([1], "assign")).ops).anomalies
                                          if a.name == "poll-skip").examples] == [["f"]]
    assert "poll-skip" in names(check_txn(poll_skip_history(([0, 1], "assign")).ops))


def test_poll_skip_and_nonmonotonic_poll_are_allowed_under_subscribe_and_not_under_assign():
    h = poll_skip_history()
    assert "poll-skip" in names(check_txn(h.ops, subscribe=False))
    r = check_txn(h.ops, subscribe=True)
    assert "poll-skip" not in names(r) and "poll-skip" in allowed_names(r)
    # The test's options decide: Jepsen's sub_via, our subscribe_p, else whether the history subscribes.
    # (send f is also a lost write here, as in Jepsen's case: only poll-skip is in question)
    assert "poll-skip" not in names(TxnChecker().check({"workload_options": {"sub_via": ["subscribe"]}}, h.ops))
    assert "poll-skip" in names(TxnChecker().check({"workload_options": {"subscribe_p": 0}}, h.ops))
    assert "poll-skip" not in names(TxnChecker().check({}, poll_skip_history(([0], "subscribe")).ops))
    assert "poll-skip" in names(TxnChecker().check({}, poll_skip_history(([0], "assign")).ops))


def nonmonotonic_poll_history() -> H:
    return (H().txn(0, [("send", 0, None, v) for v in "abcd"], "info", f="send")
            .poll(0, {0: [(1, "a"), (2, "b"), (3, "c")]}).poll(0, {0: [(2, "b"), (3, "c"), (4, "d")]}))


def test_nonmonotonic_poll_flags_a_process_going_back():
    r = check_txn(nonmonotonic_poll_history().ops)
    assert "nonmonotonic-poll" in names(r) and example(r, "nonmonotonic-poll")["values"] == ["c", "b"]
    assert r.valid is False
    forward = (H().txn(0, [("send", 0, None, v) for v in "abcd"], "info", f="send")
               .poll(0, {0: [(1, "a"), (2, "b")]}).poll(0, {0: [(3, "c"), (4, "d")]}))
    assert "nonmonotonic-poll" not in names(check_txn(forward.ops))
    assert check_txn(nonmonotonic_poll_history().ops, subscribe=True).valid is True


def test_nonmonotonic_send_flags_a_process_send_landing_before_its_previous_one():
    h = (H().txn(0, [("send", 0, 3, "c"), ("send", 0, 4, "d")], f="send")
         .txn(0, [("send", 0, 1, "a"), ("send", 0, 2, "b")], f="send"))
    r = check_txn(h.ops)
    assert "nonmonotonic-send" in names(r) and example(r, "nonmonotonic-send")["delta"] == -3
    assert "nonmonotonic-send" not in names(check_txn(H().txn(0, [("send", 0, 1, "a")], f="send")
                                                     .txn(0, [("send", 0, 2, "b")], f="send").ops))
    dropped = H().txn(0, [("send", 0, 3, "c")], f="send").assign(0, [1]).txn(0, [("send", 0, 1, "a")], f="send")
    assert "nonmonotonic-send" not in names(check_txn(dropped.ops))


# --- torn transactions -----------------------------------------------------------------------------------------

def test_torn_transaction_flags_a_committed_transaction_the_final_reads_hold_only_part_of():
    h = (H().txn(0, [("send", 0, 0, 1), ("send", 1, 0, 2)])
         .poll(9, {0: [(0, 1)]}, final=True).poll(10, {1: []}, final=True))
    r = check_txn(h.ops)
    assert "torn-transaction" in names(r) and example(r, "torn-transaction")["kind"] == "final-reads"
    assert "torn-transaction" not in names(check_txn(clean().ops))


def test_torn_transaction_flags_a_read_that_saw_one_send_of_a_transaction_and_passed_over_another():
    h = (H().send(1, 1, 0, 20).txn(0, [("send", 0, 0, 1), ("send", 1, 1, 2)]).send(1, 1, 2, 22)
         .poll(2, {1: [(1, 2)]})
         .poll(3, {0: [(0, 1)], 1: [(0, 20), (2, 22)]}))
    r = check_txn(h.ops)
    assert "torn-transaction" in names(r)
    ex = example(r, "torn-transaction")
    assert ex["kind"] == "read" and ex["seen"] == [0, 1] and ex["missing"] == [1, 2]
    whole = H().send(1, 1, 0, 20).txn(0, [("send", 0, 0, 1), ("send", 1, 1, 2)]).poll(3, {0: [(0, 1)],
                                                                                          1: [(0, 20), (1, 2)]})
    assert "torn-transaction" not in names(check_txn(whole.ops))


# --- cycles ----------------------------------------------------------------------------------------------------

def wr_cycle(complete_first=False) -> H:
    """Jepsen's g1c-pure-wr case: T1 and T2 each read the other's send."""
    h = H()
    h.op("invoke", "txn", 0, [["send", 0, 1], ["poll"]]).op("invoke", "txn", 1, [["send", 1, 2], ["poll"]])
    h.op("ok", "txn", 0, [["send", 0, [0, 1]], ["poll", {"1": [[0, 2]]}]])
    return h.op("ok", "txn", 1, [["send", 1, [0, 2]], ["poll", {"0": [[0, 1]]}]])


def test_g1c_flags_a_write_read_cycle_and_explains_it_in_words():
    r = check_txn(wr_cycle().ops)
    assert "G1c" in names(r) and r.valid is False
    ex = example(r, "G1c")
    assert len(ex["steps"]) == 2 and all("(wr)" in s for s in ex["steps"])
    # the same steps as data, for the report's drawing: [from, to, kind] along the closed cycle
    assert ex["edges"] == [[a, b, "wr"] for a, b in zip(ex["cycle"], ex["cycle"][1:], strict=False)]
    assert "sent 1 to key 0 (offset 0), which T1 polled" in ex["summary"] or "which T0 polled" in ex["summary"]
    assert r.details["cycles_text"] and sorted(ex["op_indexes"]) == [2, 3]
    one_way = H().txn(0, [("send", 0, 0, 1)]).txn(1, [("send", 1, 0, 2), ("poll", {0: [(0, 1)]})])
    assert not {"G1c", "G1c-realtime", "G1c-process"} & names(check_txn(one_way.ops))


def test_g1c_realtime_flags_a_read_of_a_transaction_that_began_after_the_reader_completed():
    h = H().txn(0, [("poll", {0: [(0, 1)]})]).txn(1, [("send", 0, 0, 1)])
    r = check_txn(h.ops)
    assert "G1c-realtime" in names(r)
    assert any("(realtime)" in s for s in example(r, "G1c-realtime")["steps"])
    assert check_txn(H().txn(1, [("send", 0, 0, 1)]).txn(0, [("poll", {0: [(0, 1)]})]).ops).valid is True  # all read


def test_g1c_process_flags_a_process_reading_what_its_own_later_transaction_sends():
    # Process order alone (equal times: no real-time order between them).
    h = H()
    for op in H().txn(0, [("poll", {0: [(0, 1)]})]).txn(0, [("send", 0, 0, 1)]).ops:
        op.time = 0
        h.ops.append(op)
    r = check_txn(h.ops)
    assert "G1c-process" in names(r) and "G1c-realtime" not in names(r)


def g0_history() -> H:
    """Jepsen's g0 case: two transactions' sends to keys 0 and 1 land in opposite orders."""
    h = H()
    h.op("invoke", "send", 0, [["send", 0, "a"], ["send", 1, "a"]]).op("invoke", "send", 1, [["send", 0, "b"],
                                                                                              ["send", 1, "b"]])
    h.op("ok", "send", 0, [["send", 0, [0, "a"]], ["send", 1, [1, "a"]]])
    return h.op("ok", "send", 1, [["send", 0, [1, "b"]], ["send", 1, [0, "b"]]])


def test_g0_needs_ww_deps_and_is_allowed_as_kafka_never_isolates_writes():
    assert "G0" not in allowed_names(check_txn(g0_history().ops))
    r = check_txn(g0_history().ops, ww_deps=True)
    assert "G0" not in names(r) and "G0" in allowed_names(r)
    assert "(ww)" in next(a for a in r.details["allowed"] if a["name"] == "G0")["examples"][0]["steps"][0]


def test_g1c_with_ww_deps_is_allowed_and_without_it_is_not():
    # Jepsen's g1c-ww-wr case: T2 reads T1's send to 0, T2's send to 1 lands before T1's.
    h = H()
    h.op("invoke", "txn", 0, [["send", 0, "a"], ["send", 1, "c"]]).op("invoke", "txn", 1, [["poll"], ["send", 1, "b"]])
    h.op("ok", "txn", 0, [["send", 0, [0, "a"]], ["send", 1, [2, "c"]]])
    h.op("ok", "txn", 1, [["poll", {"0": [[0, "a"]]}], ["send", 1, [1, "b"]]])
    assert "G1c" in allowed_names(check_txn(h.ops, ww_deps=True))
    r = check_txn(h.ops)  # without ww edges there is no cycle at all
    assert not [n for n in names(r) | allowed_names(r) if n.startswith("G")]


def test_rw_deps_finds_g_single_and_allows_it_as_polls_are_no_snapshot():
    # T0 read key 0 only up to offset 0, not T1's send at offset 1 (rw), yet read T1's send to key 1 (wr).
    h = H().send(2, 0, 0, 6)
    h.op("invoke", "txn", 0, [["poll"]]).op("invoke", "txn", 1, [["send", 0, 7], ["send", 1, 5]])
    h.op("ok", "txn", 0, [["poll", {"0": [[0, 6]], "1": [[0, 5]]}]])
    h.op("ok", "txn", 1, [["send", 0, [1, 7]], ["send", 1, [0, 5]]])
    r = check_txn(h.ops, rw_deps=True)
    assert "G-single" not in names(r) and "G-single" in allowed_names(r)
    assert any("(rw)" in s for s in next(a for a in r.details["allowed"] if a["name"] == "G-single")["examples"][0]
               ["steps"])
    assert "G-single" not in allowed_names(check_txn(h.ops))


# --- the allowed configuration ---------------------------------------------------------------------------------

def test_the_tests_allowed_option_turns_an_anomaly_into_an_allowed_one_and_nothing_else():
    h = lost_history(read_all=False)
    assert TxnChecker().check({}, h.ops).valid is False
    r = TxnChecker().check({"workload_options": {"allowed": ["lost-write", "unseen"]}}, h.ops)
    assert r.valid is True and {"lost-write", "unseen"} <= allowed_names(r)
    r = TxnChecker().check({"workload_options": {"allowed": ["unseen"]}}, h.ops)
    assert r.valid is False and names(r) == {"lost-write"}


def test_an_unknown_allowed_name_is_one_sentence_naming_it_and_the_known_names():
    with pytest.raises(TxnOptionError, match=r"'lost-writes'.*lost-write"):
        TxnChecker().check({"workload_options": {"allowed": ["lost-writes"]}}, clean().ops)


def test_a_malformed_micro_op_is_one_sentence_naming_the_op_and_the_schema():
    h = H().op("invoke", "txn", 0, [["append", 0, 1]]).op("ok", "txn", 0, [["append", 0, 1]])
    with pytest.raises(ValueError, match=r"op #1 .*append.*checkers/txn.py"):
        check_txn(h.ops)


def test_a_history_with_no_completed_transaction_is_unknown():
    r = check_txn(H().assign(0, [0]).send(0, 0, None, 1, outcome="info").ops)
    assert r.valid == "unknown" and r.unknown_reasons


def test_every_named_analysis_has_an_explanation():
    from kafkaesque_harness.checkers.txn import EXPLANATIONS

    assert set(ANOMALY_TYPES) <= set(EXPLANATIONS)


# --- Jepsen's EDN ----------------------------------------------------------------------------------------------

KAFKA_EDN = Path(__file__).resolve().parent.parent / "data" / "kafka"
MANIFEST = json.loads((KAFKA_EDN / "MANIFEST.json").read_text())["histories"]
JEPSEN_NAMES = set(ANOMALY_TYPES) - {"torn-transaction"}  # torn-transaction is ours: Jepsen has no such analysis


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_a_jepsen_kafka_history_gets_the_verdict_jepsen_gives(name):
    from kafkaesque_harness.checkers.formats.edn import parse_kafka_edn_history

    want = MANIFEST[name]
    r = TxnChecker().check({"workload_options": want["options"]}, parse_kafka_edn_history(KAFKA_EDN / name))
    assert sorted(set(r.stats["error-types"]) & JEPSEN_NAMES) == sorted(want["error_types"])
    assert sorted(set(r.stats["bad-error-types"]) & JEPSEN_NAMES) == sorted(want["bad_error_types"])
    assert r.valid is want["valid"]


def test_the_kafka_edn_reader_maps_jepsen_ops_to_the_txn_schema():
    from kafkaesque_harness.checkers.formats.edn import parse_kafka_edn_history

    ops = parse_kafka_edn_history(KAFKA_EDN / "valid.edn")
    polled = ops[9]
    assert polled.f == "txn" and polled.type == "ok" and polled.process == 1
    assert polled.value == [["poll", {"0": [[0, 1], [2, 3]], "1": [[0, 2]]}], ["send", 1, [2, 4]]]
    assert ops[19].extra["rebalance_log"] == [{"keys": [0], "type": "revoked"}, {"keys": [0], "type": "assigned"}]
    assert ops[11].type == "fail" and ops[11].error == "aborted"
    assert (ops[16].f, ops[17].type) == ("crash", "info")


def test_a_txn_history_exported_to_edn_reads_back_with_the_same_verdict(tmp_path):
    from kafkaesque_harness.checkers.formats.edn import export_edn, parse_kafka_edn_history

    for h in (clean(), lost_history(read_all=False), wr_cycle(),
              three_sends().poll(0, {0: [(1, "a"), (4, "d")]}, rebalance_log=[{"keys": [0], "type": "assigned"}])):
        export_edn(h.ops, tmp_path / "h.edn")
        back = parse_kafka_edn_history(tmp_path / "h.edn")
        before, after = check_txn(h.ops).to_dict(), check_txn(back).to_dict()
        assert (after["valid"], after["anomaly_types"]) == (before["valid"], before["anomaly_types"])


def test_kafkaesque_check_judges_a_jepsen_kafka_history_with_the_tests_options(capsys):
    from kafkaesque_harness.harness.check_cli import EXIT_BAD_INPUT, check_command

    path = str(KAFKA_EDN / "poll-skip-subscribe.edn")
    assert check_command(path, "edn", "txn", 10.0) == 0
    assert check_command(path, "edn", "txn", 10.0, options=['sub_via=["assign"]']) == 1
    assert check_command(path, "edn", "txn", 10.0, options=['allowed=["bogus"]']) == EXIT_BAD_INPUT
    assert "bogus" in capsys.readouterr().err


def test_real_time_through_barrier_nodes_gives_the_same_cyclic_components_as_direct_edges():
    """The component search's barrier nodes (3 edges a transaction) stand for exactly the direct real-time
    edges of the explanation pass: on random concurrent histories whose reads make cycles, both find the
    same transactions in cycles."""
    import random

    from kafkaesque_harness.checkers.graph import nontrivial_sccs
    from kafkaesque_harness.checkers.txn import (
        _Analysis,
        _dependency_edges,
        _realtime_barriers,
        _realtime_frontier,
    )

    rng, cyclic = random.Random(7), 0
    for _ in range(200):
        h, open_ops, value = H(), {}, 0
        for _ in range(rng.randint(2, 14)):
            p = rng.randrange(4)
            if p in open_ops:
                mops = open_ops.pop(p)
                h.op(rng.choice(["ok", "ok", "ok", "info"]), "txn", p, mops)
            else:
                value += 1
                # reads of any value, sent before or later: later ones make cycles with real-time order
                reads = {"0": [[v, v] for v in sorted(rng.sample(range(1, 9), rng.randint(0, 2)))]}
                mops = [["send", 0, [value, value]], ["poll", reads]]
                open_ops[p] = mops
                h.op("invoke", "txn", p, [["send", 0, value], ["poll"]])
        step = rng.choice([1, 2, 3])
        for op in h.ops:
            op.time = op.index // step * 1000  # some equal times: "before" is strict
        a = _Analysis(h.ops)
        graph = [t for t in a.txns if t.type != "fail"]
        found = []
        for realtime in (_realtime_barriers(len(a.txns)), _realtime_frontier):
            succ = {}
            _dependency_edges(a, graph, False, False, lambda x, y, *_, s=succ: s.setdefault(x, []).append(y), realtime)
            found.append({x for scc in nontrivial_sccs(succ) for x in scc if x < len(a.txns)})
        assert found[0] == found[1]
        cyclic += bool(found[0])
    assert cyclic > 20  # the property was tested on histories with cycles, not only on acyclic ones


def test_checking_leaves_the_history_as_it_was():
    import copy

    h = three_sends().txn(0, [("poll", {0: [(1, "a")]}), ("poll", {0: [(2, "b"), (4, "d")]})])
    before = copy.deepcopy([op.to_dict() for op in h.ops])
    check_txn(h.ops)
    assert [op.to_dict() for op in h.ops] == before


def test_with_final_reads_a_key_whose_final_read_did_not_complete_is_unknown_not_unseen():
    h = H().send(0, 0, 0, 1).send(0, 1, 0, 2).poll(9, {0: [(0, 1)]}, final=True)
    h.op("invoke", "poll", 10, [["poll"]], final=True).op("info", "poll", 10, None, final=True)
    r = check_txn(h.ops)
    assert r.valid == "unknown" and "unseen" not in names(r)
    assert any("partitions [1]" in reason for reason in r.unknown_reasons)
    r = check_txn(h.ops[:-2] + [Op("invoke", "poll", 10, [["poll"]], index=90, extra={"final": True}),
                                Op("ok", "poll", 10, [["poll", {"1": []}]], index=91, time=1, extra={"final": True})])
    assert r.valid is False and example(r, "unseen")["value"] == 2


def test_a_cycle_search_out_of_budget_is_unknown_and_says_so():
    r = check_txn(wr_cycle().ops, cycle_budget_s=0)
    assert r.valid == "unknown" and "G1c" not in names(r)
    assert any("budget" in reason for reason in r.unknown_reasons)
    assert r.details["cycle_search_timeout"]["count"] == 1
