"""The queue checker and the log fast path give the same results, counts and examples on a history read as a
stream from its file (kafkaesque check) as on the same history in memory (the runner), on valid histories and
on histories with each anomaly injected; and the pieces the stream stands on keep pair_ops's and
read_history's rules."""

import json
import random

import pytest

from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.log_order import LogOrderChecker
from kafkaesque_harness.checkers.queue import QueueChecker, _Acked
from kafkaesque_harness.checkers.stream import IntColumn, IntSet, OffsetValues, file_pairs
from kafkaesque_harness.history import HistoryFile, Op, pair_ops, pair_stream, read_history
from tests.unit.queue_histories import ANOMALIES, generate


def write(path, ops: list[Op]) -> None:
    path.write_text("".join(json.dumps(op.to_dict()) + "\n" for op in ops))


def both_ways(tmp_path, ops: list[Op], subscribe: bool = False) -> tuple[dict, dict]:
    """The composite results of the queue and log-order checkers on `ops` in memory, and on its file."""
    path = tmp_path / "history.jsonl"
    write(path, ops)
    checkers = [QueueChecker(subscribe=subscribe), LogOrderChecker()]
    return run_checkers(checkers, {}, read_history(path)), run_checkers(checkers, {}, HistoryFile(path))


CASES = [(seed, anomaly) for anomaly in (None, *ANOMALIES) for seed in range(6)]


@pytest.mark.parametrize(("seed", "anomaly"), CASES)
def test_a_history_file_checks_as_the_same_history_in_memory(tmp_path, seed, anomaly):
    rng = random.Random(seed)
    subscribe = anomaly == "committed-rewind" or seed % 3 == 0
    ops = generate(seed, n_ops=rng.randrange(20, 150), keys=rng.randrange(1, 4), processes=rng.randrange(1, 6),
                   anomalies=(anomaly,) if anomaly else (), subscribe=subscribe)
    in_memory, streamed = both_ways(tmp_path, ops, subscribe)
    assert streamed == in_memory


def resent_send(ops: list[Op]) -> tuple[Op, int]:
    """The send the generator made re-sent, and how many offsets of the final read hold its value."""
    s = next(op for op in ops if op.f == "send" and op.extra and "resent" in op.extra)
    key, value = s.value[0], s.value[1][1] if s.type == "ok" else s.value[1]
    final = next(op for op in ops if op.f == "final-poll" and op.type == "ok" and op.value[0] == key)
    return s, sum(1 for _, v in final.value[2] if v == value)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("anomaly", ["resent", "resent-over"])
def test_copies_of_a_resent_value_are_the_clients_up_to_its_requests_both_ways(tmp_path, seed, anomaly):
    """A value sent once and re-sent n times by the client (requests n + 1) may appear up to n + 1 times and
    is no duplicate, counted in resent-duplicate-count; at n + 2 times it is a duplicate. In memory and
    streamed from the file alike."""
    ops = generate(seed, n_ops=80, keys=2, processes=3, anomalies=(anomaly,))
    s, copies = resent_send(ops)
    requests = s.extra["resent"]["requests"]
    in_memory, streamed = both_ways(tmp_path, ops)
    assert streamed == in_memory
    # the same history without the re-sent copies (the generator injects after drawing it); its anomalies
    # (its failed polls may have moved a consumer on: poll-skip) are the ones the copies must leave alone
    before = run_checkers([QueueChecker(), LogOrderChecker()], {}, generate(seed, n_ops=80, keys=2, processes=3))
    for name in ("queue", "log-order"):
        r, base = in_memory["checkers"][name], before["checkers"][name]
        assert "duplicate" not in base["anomaly_types"]
        if anomaly == "resent":
            assert 2 <= copies <= requests
            assert r["anomaly_types"] == base["anomaly_types"], r
            assert r["stats"]["resent-duplicate-count"] == 1
        else:
            assert copies == requests + 1
            assert set(r["anomaly_types"]) == {*base["anomaly_types"], "duplicate"}
            assert r["anomalies"][r["anomaly_types"].index("duplicate")]["count"] == 1
            assert "resent-duplicate-count" not in r["stats"]
    if anomaly == "resent":
        example = in_memory["checkers"]["queue"]["details"]["resent_duplicates"]["examples"][0]
        assert example["requests"] == requests and len(example["offsets"]) == copies


def test_the_generated_histories_hold_every_anomaly_both_checkers_look_for(tmp_path):
    """The differential test above is only as good as what it compares: every anomaly occurs somewhere."""
    seen: set[str] = set()
    for seed, anomaly in CASES:
        rng = random.Random(seed)
        subscribe = anomaly == "committed-rewind" or seed % 3 == 0
        ops = generate(seed, n_ops=rng.randrange(20, 150), keys=rng.randrange(1, 4), processes=rng.randrange(1, 6),
                       anomalies=(anomaly,) if anomaly else (), subscribe=subscribe)
        results = run_checkers([QueueChecker(subscribe=subscribe), LogOrderChecker()], {}, ops)
        for r in results["checkers"].values():
            seen.update(r["anomaly_types"])
            seen.update(k for k in ("poll_gaps", "lost_beyond_fault_budget", "resent_duplicates")
                        if k in r.get("details", {}))
            seen.update(k for k in ("resent-duplicate-count",) if k in r.get("stats", {}))
    assert seen >= {"lost-write", "unexpected", "duplicate", "inconsistent-offsets", "nonmonotonic-poll",
                    "poll-skip", "group-skip", "lost-commit", "realtime-order", "stale-read", "future-read",
                    "offset-gap", "poll_gaps", "lost_beyond_fault_budget", "resent_duplicates",
                    "resent-duplicate-count"}


def test_a_bad_line_in_the_middle_of_a_streamed_file_names_its_line(tmp_path):
    path = tmp_path / "history.jsonl"
    write(path, generate(1, n_ops=30))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]) + "{not json\n" + "".join(lines[5:]))
    with pytest.raises(ValueError, match="line 6: not valid JSON"):
        run_checkers([QueueChecker(), LogOrderChecker()], {}, HistoryFile(path))


def test_pair_stream_pairs_as_pair_ops_does():
    rng = random.Random(7)
    for _ in range(200):
        ops = []
        for _ in range(rng.randrange(30)):
            p = rng.randrange(4)
            ops.append(Op(rng.choice(("invoke", "invoke", "ok", "info", "fail")), "send", p, len(ops)))
        assert list(pair_stream((op.type, op.process, op) for op in ops)) == pair_ops(ops)


def test_a_history_file_reads_back_any_op_as_read_history_holds_it(tmp_path):
    path = tmp_path / "history.jsonl"
    ops = generate(3, n_ops=1500, keys=3)
    text = "".join(json.dumps({k: v for k, v in op.to_dict().items() if k != "index" or op.index % 7})
                   + "\n" + ("\n" if op.index % 11 == 0 else "") for op in ops)  # some lack an index; blank lines
    path.write_text(text)
    history, streamed = read_history(path), HistoryFile(path)
    assert len(streamed) == len(history)
    for pos in (0, 1, 1023, 1024, 1025, len(history) - 1, *random.Random(1).sample(range(len(history)), 50)):
        assert streamed.op(pos).to_dict() == history[pos].to_dict()


def test_the_columns_take_values_as_a_dict_would():
    values = IntSet()
    for v in (3, 10**30, "7", 2.5, True, -4):
        values.add(v)
    assert 1 in values and 1.0 in values and 3.0 in values and 10**30 in values and "7" in values
    assert 7 not in values and -4 in values and 2.5 in values and 4 not in values
    seen = OffsetValues()
    assert seen.observe(5, 50, 1) is True and seen.observe(5, 50, 2) is False
    assert seen.observe(5, 51, 3) == (50, 1) and seen.observe(5, 51, 4) is False
    assert seen.observe(6, "text", 5) is True  # not an int64: the columns become a dict, and keep what they had
    assert seen.values_at(5) == {50: 1, 51: 3} and seen.values_at(6) == {"text": 5} and seen.offsets() == [5, 6]


# The pieces the fast paths stand on (issue 26 item 2): each against the record-by-record rule it shortcuts.

def observe_all(seen: OffsetValues, recs: list, seq: int) -> list:
    """What OffsetValues.observe says of each record, in order (the rule `follow` must agree with)."""
    out = []
    for off, val in recs:
        out.append(seen.observe(off, val, seq))
        seq += 1
    return out


def state(seen: OffsetValues) -> tuple:
    return seen.offsets(), [seen.values_at(o) for o in seen.offsets()]


@pytest.mark.parametrize("seed", range(40))
def test_follow_notes_a_read_as_observe_does_or_changes_nothing(seed):
    rng = random.Random(seed)
    fast, slow = OffsetValues(), OffsetValues()
    log = [rng.randrange(10**6) for _ in range(300)]
    seq = 0
    for _ in range(200):
        o0, n = rng.randrange(0, 280), rng.randrange(1, 20)
        recs = [[o, log[o]] for o in range(o0, min(o0 + n, len(log)))]
        kind = rng.random()
        if kind < 0.1:  # a divergent read: another value at one offset
            recs[rng.randrange(len(recs))][1] = -rng.randrange(1, 10**6)
        elif kind < 0.15 and len(recs) > 1:  # not following on: a skipped offset
            del recs[rng.randrange(1, len(recs))]
        elif kind < 0.18:  # not a record: the record loop says what it is
            recs[rng.randrange(len(recs))] = [recs[0][0], 1, 2]
        before = state(fast)
        new = fast.follow(recs, len(recs), seq)
        if new < 0:
            assert state(fast) == before  # nothing changed: the record loop decides
        else:
            results = observe_all(slow, recs, seq)
            assert results == [False] * (len(recs) - new) + [True] * new
            assert state(fast) == state(slow)
            assert all(fast.first_seq(o) == slow.first_seq(o) for o in fast.offsets())
            assert fast.holds_firsts(recs, len(recs))
        if new < 0 and all(len(r) == 2 for r in recs):  # keep the two alike: the record loop's way
            assert observe_all(fast, recs, seq) == observe_all(slow, recs, seq)
        seq += len(recs)


def test_holds_firsts_is_false_for_a_value_other_than_the_first_seen_or_an_offset_never_seen():
    seen = OffsetValues()
    assert observe_all(seen, [[0, 10], [1, 11], [3, 0]], 0) == [True, True, True]
    assert seen.holds_firsts([[0, 10], [1, 11]], 2)
    assert not seen.holds_firsts([[0, 10], [1, 12]], 2)   # inconsistent-offsets, to the record loop
    assert not seen.holds_firsts([[1, 11], [2, 0]], 2)    # offset 2 never seen (its column holds 0)
    assert not seen.holds_firsts([[0, 10], [2, 0]], 2)    # does not follow on
    assert not seen.holds_firsts([[0, 10, 1], [1, 11]], 2)
    assert seen.follow([[1, 11], [2, 5]], 2, 100) == 1 and seen.values_at(2) == {5: 101}
    assert seen.follow([[2, 6]], 1, 200) == -1 and seen.values_at(2) == {5: 101}


def test_columns_widen_from_32_to_64_bits_to_any_value():
    col = IntColumn()
    for v in (1, -(1 << 31), (1 << 31) - 1):
        col.append(v)
    assert col.items.typecode == "i"
    col.append(1 << 40)
    assert col.items.typecode == "q" and list(col) == [1, -(1 << 31), (1 << 31) - 1, 1 << 40]
    col.append(1 << 70)
    col.append("x")
    assert list(col) == [1, -(1 << 31), (1 << 31) - 1, 1 << 40, 1 << 70, "x"]
    acked = _Acked()
    acked.append(5, 50, 1, 2, 0)
    acked.append(1 << 33, 51, 3, 1 << 32, 0)  # an offset and a position beyond 32 bits
    acked.append(7, 52, 5, 6, 1)
    assert list(acked.offsets) == [5, 1 << 33, 7] and list(acked.completions) == [2, 1 << 32, 6]
    assert list(acked.invokes) == [1, 3, 5] and list(acked.eras) == [0, 0, 1] and len(acked) == 3


def big_history(lose: bool, duplicate: bool) -> list[Op]:
    """Two keys, values beyond 32 bits (the value columns widen), each value read by two consumers
    and the final reads; `lose` drops an acknowledged value from the final read, `duplicate` shows one value
    at a second offset."""
    base, ops, t = 1 << 33, [], 0
    logs: dict[int, list] = {0: [], 1: []}

    def op(type_, f, p, value):
        nonlocal t
        t += 1000
        ops.append(Op(type_, f, p, value, time=t, index=len(ops)))

    for i in range(40):
        key, value = i % 2, base + 3 * i
        off = i // 2
        op("invoke", "send", 0, [key, value])
        op("ok", "send", 0, [key, [off, value]])
        logs[key].append([off, value])
        if i % 5 == 4:
            for consumer in (1, 2):
                op("invoke", "poll", consumer, None)
                op("ok", "poll", consumer, {str(k): [list(r) for r in recs] for k, recs in logs.items()})
                # the next poll of this consumer follows on from here
            for recs in logs.values():
                recs.clear()
    final = {k: [[o, base + 3 * (2 * o + k)] for o in range(20)] for k in (0, 1)}
    if lose:
        final[1] = final[1][:-1]
    if duplicate:
        final[0].append([20, final[0][3][1]])
    for k in (0, 1):
        op("invoke", "final-poll", 3 + k, [k])
        op("ok", "final-poll", 3 + k, [k, final[k][-1][0] + 1, final[k]])
    return ops


@pytest.mark.parametrize(("lose", "duplicate"), [(False, False), (True, False), (False, True)])
def test_a_history_beyond_32_bits_checks_alike_and_finds_its_anomalies(tmp_path, lose, duplicate):
    ops = big_history(lose, duplicate)
    in_memory, streamed = both_ways(tmp_path, ops)
    assert streamed == in_memory
    queue = in_memory["checkers"]["queue"]
    expected = {"lost-write"} if lose else {"duplicate"} if duplicate else set()
    assert set(queue["anomaly_types"]) == expected
    assert queue["valid"] is (not expected)
    if lose:
        assert queue["anomalies"][0]["examples"][0]["offset"] == 19
    if duplicate:
        assert "duplicate" in in_memory["checkers"]["log-order"]["anomaly_types"]


@pytest.mark.parametrize("seed", range(30))
def test_a_files_pairs_are_pair_ops_pairs(tmp_path, seed):
    """file_pairs pairs a file's rows as pair_ops pairs its ops: the same pairs, in the same order, with
    blank lines, superseded invocations and completions without one."""
    rng = random.Random(seed)
    ops = []
    for _ in range(rng.randrange(60)):
        ops.append(Op(rng.choice(("invoke", "invoke", "ok", "info", "fail")), "send", rng.randrange(4),
                      [0, len(ops)], time=len(ops), index=len(ops)))
    path = tmp_path / "h.jsonl"
    path.write_text("".join(json.dumps(op.to_dict()) + "\n" + ("\n" if rng.random() < 0.1 else "") for op in ops))
    got = [(inv[0], comp[0] if comp is not None else None) for inv, comp in file_pairs(HistoryFile(path))]
    want = [(inv.index, comp.index if comp is not None else None) for inv, comp in pair_ops(ops)]
    assert got == want


def test_a_partitions_read_columns_widen_as_they_must():
    from kafkaesque_harness.checkers.log_order import LogOrderCheck
    from kafkaesque_harness.checkers.stream import InMemory
    p = LogOrderCheck(None, InMemory([])).eras[0].partition(0)
    p.add_read(3, 5)
    p.add_read(1 << 40, 6)        # a position beyond 32 bits
    p.add_read(4, 1 << 35)        # a reach beyond 32 bits
    p.add_read(5, 1 << 70)        # beyond 64: a list
    p.add_read(6, 2.5)
    assert list(p.read_rets) == [3, 1 << 40, 4, 5, 6]
    assert list(p.read_reaches) == [5, 6, 1 << 35, 1 << 70, 2.5]
