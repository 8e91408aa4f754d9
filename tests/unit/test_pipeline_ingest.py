"""Pipeline ingest (no JVM): how a history's ops become rows of the ops, reads and runs tables."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kafkaesque_harness.history import HistoryWriter, Op
from kafkaesque_harness.results.pipeline import PipelineError
from kafkaesque_harness.results.pipeline.ingest import discover_runs, ingest
from kafkaesque_harness.results.store import write_json


def make_run(root, name="queue", stamp="20260101T000000", ops=None):
    run = root / name / stamp
    run.mkdir(parents=True)
    write_json(run / "test.json", {"workload": "queue", "nemesis": ["kill"], "acks": "1",
                                   "broker_variant": "truncate-to-hw", "flush_policy": "never"})
    with HistoryWriter(run / "history.jsonl") as w:
        for i, op in enumerate(ops or []):
            op.time = (i + 1) * 1000
            w.append(op)
    return run


HISTORY = [
    Op("invoke", "send", 0, [1, 7]),
    Op("ok", "send", 0, [1, [0, 7]]),
    Op("invoke", "start-kill", "nemesis", None),
    Op("info", "start-kill", "nemesis", {"kill": ["broker-2"]}),
    Op("invoke", "poll", 0, None),
    Op("ok", "poll", 0, {"1": [[0, 7], [1, 8]], "2": [[0, 9]]}),
    Op("invoke", "stop-kill", "nemesis", None),
    Op("info", "stop-kill", "nemesis", {"healed": ["broker-2"]}),
    Op("invoke", "final-poll", 5, [1]),
    Op("ok", "final-poll", 5, [1, 2, [[0, 7], [1, 8]]]),
]


def test_ops_reads_and_runs_rows(tmp_path):
    make_run(tmp_path / "store", ops=[Op(o.type, o.f, o.process, o.value) for o in HISTORY])
    wh = tmp_path / "wh"
    summary = ingest([tmp_path / "store"], wh, jobs=1)
    assert summary["ingested"] == 1 and summary["ops"] == 10 and summary["reads"] == 5
    part = "campaign=none/run=queue-20260101T000000/part-0.parquet"
    ops = pq.read_table(wh / "ops" / part).to_pylist()
    assert (ops[1]["key"], ops[1]["offset"], ops[1]["value"], ops[1]["process"]) == (1, 0, 7, 0)
    assert ops[3]["process"] is None and json.loads(ops[3]["value_json"]) == {"kill": ["broker-2"]}
    assert (ops[9]["key"], ops[9]["hwm"]) == (1, 2)
    reads = pq.read_table(wh / "reads" / part).to_pylist()
    assert [(r["seq"], r["pos"], r["kind"], r["key"], r["offset"], r["value"]) for r in reads] == [
        (5, 0, "poll", 1, 0, 7), (5, 1, "poll", 1, 1, 8), (5, 2, "poll", 2, 0, 9),
        (9, 0, "final-poll", 1, 0, 7), (9, 1, "final-poll", 1, 1, 8)]
    run = pq.read_table(wh / "runs" / part).to_pylist()[0]
    assert (run["nemesis"], run["acks"], run["broker_variant"], run["verdict"]) == \
        ("kill", "1", "truncate-to-hw", "incomplete")
    # the report's rule (history/faults.py): from the start's completion to the stop's
    assert run["fault_windows"] == [{"fault": "kill", "start_ns": 4000, "end_ns": 8000}]


def test_a_second_ingest_skips_the_unchanged_run(tmp_path):
    make_run(tmp_path / "store", ops=[Op("invoke", "poll", 0, None)])
    assert ingest([tmp_path / "store"], tmp_path / "wh", jobs=1)["ingested"] == 1
    again = ingest([tmp_path / "store"], tmp_path / "wh", jobs=1)
    assert (again["ingested"], again["skipped"]) == (0, 1)


def test_a_run_ingested_before_a_column_existed_is_ingested_again(tmp_path):
    make_run(tmp_path / "store", ops=[Op("invoke", "send", 0, [1, 7]),
                                      Op("ok", "send", 0, [1, [0, 7]], extra={"resent": {"requests": 2}})])
    wh = tmp_path / "wh"
    assert ingest([tmp_path / "store"], wh, jobs=1)["ingested"] == 1
    part = wh / "ops" / "campaign=none/run=queue-20260101T000000/part-0.parquet"
    assert [o["resent"] for o in pq.read_table(part).to_pylist()] == [None, 2]
    pq.write_table(pq.read_table(part).drop(["resent"]), part)  # as an older version wrote it
    again = ingest([tmp_path / "store"], wh, jobs=1)
    assert (again["ingested"], again["skipped"]) == (1, 0)
    assert [o["resent"] for o in pq.read_table(part).to_pylist()] == [None, 2]


def test_completions_carry_their_invocation_as_pairing_decides(tmp_path):
    """Ingest pairs as history.pair_stream does: an invocation's next op of its process completes it unless
    it is an invocation (then the first never completes); a completion with no open invocation is ignored;
    a read's records are judged only for an ok completion of an invocation of the same f."""
    make_run(tmp_path / "store", ops=[
        Op("invoke", "send", 0, [1, 7]),            # 0: superseded by 1, never completes
        Op("invoke", "send", 0, [1, 8]),            # 1
        Op("invoke", "poll", 1, None),              # 2
        Op("ok", "send", 0, [1, [0, 8]]),           # 3: completes 1
        Op("ok", "poll", 1, {"1": [[0, 8]]}),       # 4: completes 2, judged
        Op("ok", "poll", 1, {"1": [[0, 8]]}),       # 5: no open invocation: ignored
        Op("invoke", "send", 2, [1, 9]),            # 6
        Op("ok", "poll", 2, {"1": [[0, 8]]}),       # 7: completes a send: its records are not judged
        Op("invoke", "poll", 3, None),              # 8
        Op("fail", "poll", 3, None),                # 9: completes 8, no records
    ])
    wh = tmp_path / "wh"
    ingest([tmp_path / "store"], wh, jobs=1)
    part = "campaign=none/run=queue-20260101T000000/part-0.parquet"
    ops = pq.read_table(wh / "ops" / part).to_pylist()
    paired = {o["seq"]: (o["inv_seq"], o["inv_f"], o["inv_key"], o["inv_value"]) for o in ops
              if o["inv_seq"] is not None}
    assert paired == {3: (1, "send", 1, 8), 4: (2, "poll", None, None), 7: (6, "send", 1, 9),
                      9: (8, "poll", None, None)}
    assert ops[3]["inv_time"] == ops[1]["time"]
    reads = pq.read_table(wh / "reads" / part).to_pylist()
    assert [(r["seq"], r["inv_seq"], r["process"], r["time"]) for r in reads] == [
        (4, 2, 1, ops[4]["time"]), (5, None, None, None), (7, None, None, None)]


def test_a_reads_table_without_the_pairing_columns_is_stale(tmp_path):
    from kafkaesque_harness.results.pipeline.ingest import stale_tables

    make_run(tmp_path / "store", ops=HISTORY)
    wh = tmp_path / "wh"
    ingest([tmp_path / "store"], wh, jobs=1)
    assert stale_tables(wh) == []
    part = wh / "reads" / "campaign=none/run=queue-20260101T000000/part-0.parquet"
    pq.write_table(pq.read_table(part).drop(["inv_seq", "process", "time"]), part)  # as an older version wrote it
    assert stale_tables(wh) == [part]
    again = ingest([tmp_path / "store"], wh, jobs=1)
    assert (again["ingested"], again["skipped"]) == (1, 0) and stale_tables(wh) == []


def test_a_campaign_dir_names_the_partition(tmp_path):
    run = make_run(tmp_path / "store", ops=[Op("invoke", "poll", 0, None)])
    camp = tmp_path / "store" / "campaigns" / "nightly" / "20260102T000000"
    camp.mkdir(parents=True)
    write_json(camp / "campaign.json", {"name": "nightly", "runs": [{"run_dir": str(run)}, {"run_dir": None}]})
    [src] = discover_runs([camp])
    assert (src.campaign, src.run) == ("nightly-20260102T000000", "queue-20260101T000000")
    [src] = discover_runs([tmp_path / "store"])  # the store knows its campaigns too
    assert src.campaign == "nightly-20260102T000000"


def test_a_non_integer_value_is_one_sentence(tmp_path):
    make_run(tmp_path / "store", ops=[Op("invoke", "send", 0, [1, "x"])])
    with pytest.raises(PipelineError, match="is not an integer"):
        ingest([tmp_path / "store"], tmp_path / "wh", jobs=1)


@pytest.mark.parametrize("make, words", [
    (lambda p: p / "missing", "does not exist"),
    (lambda p: p, "no stored runs"),
])
def test_bad_inputs_name_the_fix(tmp_path, make, words):
    with pytest.raises(PipelineError, match=words):
        discover_runs([make(tmp_path)])


class _KeyValueValues:
    """A second workload's value shapes: write {"k", "v"} / ok {"k", "v", "at"}, read ok {"k", "log"}."""

    op_names = frozenset({"write", "read"})

    def key(self, op):
        return op.value["k"] if isinstance(op.value, dict) and "k" in op.value else None

    def written(self, op):
        v = op.value
        return (v["k"], v.get("at"), v["v"]) if op.f == "write" and isinstance(v, dict) else None

    def records(self, op):
        v = op.value
        return [(v["k"], o, x) for o, x in v["log"]] if op.f == "read" and isinstance(v, dict) and "log" in v else []

    def drained(self, op):
        return None


def test_a_second_workload_is_ingested_as_its_values_read_with_no_change_here(tmp_path, monkeypatch):
    class KeyValueWorkload:
        values = _KeyValueValues()

    monkeypatch.setattr("kafkaesque_harness.workloads.registry.workload_class",
                        lambda name: KeyValueWorkload if name == "kv" else pytest.fail(name))
    run = make_run(tmp_path / "store", ops=[Op("invoke", "write", 0, {"k": 3, "v": 9}),
                                            Op("ok", "write", 0, {"k": 3, "v": 9, "at": 4}),
                                            Op("invoke", "read", 1, {"k": 3}),
                                            Op("ok", "read", 1, {"k": 3, "log": [[4, 9]]}),
                                            Op("invoke", "cas", 1, [1, 2])])
    test = json.loads((run / "test.json").read_text())
    write_json(run / "test.json", {**test, "workload": "kv"})
    wh = tmp_path / "wh"
    assert ingest([tmp_path / "store"], wh, jobs=1)["reads"] == 1
    part = "campaign=none/run=queue-20260101T000000/part-0.parquet"
    ops = pq.read_table(wh / "ops" / part).to_pylist()
    assert [(o["key"], o["offset"], o["value"], o["value_json"]) for o in ops] == [
        (3, None, 9, None), (3, 4, 9, None), (3, None, None, None), (3, None, None, None), (None, None, None, "[1,2]")]
    reads = pq.read_table(wh / "reads" / part).to_pylist()
    assert [(r["kind"], r["key"], r["offset"], r["value"]) for r in reads] == [("read", 3, 4, 9)]


def test_reads_carry_the_consumer_position_before_them(tmp_path):
    """Ingest follows each process's position per key as checkers/queue.py does: the previous record of the key
    in the same read, else the last record of the key in the process's last judged poll; a final-poll is compared
    with that position but does not move it; records no check judges have none."""
    make_run(tmp_path / "store", ops=[
        Op("invoke", "poll", 0, None),                              # 0
        Op("ok", "poll", 0, {"1": [[0, 7], [1, 8]], "2": [[4, 9]]}),  # 1: first reads: no position, then 0
        Op("invoke", "poll", 0, None),                              # 2
        Op("ok", "poll", 0, {"1": [[3, 10]]}),                      # 3: after 1 (read at 1's time)
        Op("invoke", "final-poll", 0, [1]),                         # 4
        Op("ok", "final-poll", 0, [1, 5, [[0, 7], [1, 8]]]),        # 5: after 3, then 0
        Op("invoke", "poll", 0, None),                              # 6
        Op("ok", "poll", 0, {"1": [[4, 11]], "2": [[5, 12]]}),      # 7: after 3 again; after 4
        Op("invoke", "poll", 1, None),                              # 8
        Op("ok", "poll", 1, {"1": [[0, 7]]}),                       # 9: another process: no position
        Op("ok", "poll", 1, {"1": [[1, 8]]}),                       # 10: no open invocation: not judged
    ])
    wh = tmp_path / "wh"
    ingest([tmp_path / "store"], wh, jobs=1)
    part = "campaign=none/run=queue-20260101T000000/part-0.parquet"
    t = {o["seq"]: o["time"] for o in pq.read_table(wh / "ops" / part).to_pylist()}
    reads = pq.read_table(wh / "reads" / part).to_pylist()
    assert [(r["seq"], r["key"], r["offset"], r["prev_offset"], r["prev_time"]) for r in reads] == [
        (1, 1, 0, None, None), (1, 1, 1, 0, t[1]), (1, 2, 4, None, None),
        (3, 1, 3, 1, t[1]),
        (5, 1, 0, 3, t[3]), (5, 1, 1, 0, t[5]),
        (7, 1, 4, 3, t[3]), (7, 2, 5, 4, t[1]),
        (9, 1, 0, None, None),
        (10, 1, 1, None, None)]


def test_a_run_whose_completions_go_back_in_time_across_a_fault_beyond_budget_is_refused(tmp_path):
    """Eras need each process's completions in time order; without a fault beyond the budget there is one era."""
    from kafkaesque_harness.history import BEYOND_BUDGET

    def run_with(name, nemesis):
        ops = [Op("invoke", "poll", 0, None), Op("ok", "poll", 0, {"1": [[0, 7]]}),
               Op("invoke", "poll", 0, None), Op("ok", "poll", 0, {"1": [[1, 8]]}), *nemesis]
        run = make_run(tmp_path / name, ops=ops)
        lines = (run / "history.jsonl").read_text().splitlines()
        late = json.loads(lines[1])
        late["time"] = 10_000  # the first poll completes after the second (4000)
        lines[1] = json.dumps(late)
        (run / "history.jsonl").write_text("\n".join(lines) + "\n")

    run_with("one-era", [])
    assert ingest([tmp_path / "one-era"], tmp_path / "wh", jobs=1)["ingested"] == 1
    run_with("two-eras", [Op("invoke", "start-kill", "nemesis", None),
                          Op("info", "start-kill", "nemesis", {"kill": ["broker-1"], BEYOND_BUDGET: True})])
    with pytest.raises(PipelineError, match=r"line 4: a completion is earlier than its process's previous one"):
        ingest([tmp_path / "two-eras"], tmp_path / "wh", jobs=1)
