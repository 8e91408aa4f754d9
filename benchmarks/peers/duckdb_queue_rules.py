"""The queue checker's assign-mode rules restated in DuckDB SQL over a history file: the peer that
benchmarks/bench_queue_streaming.py times against the streamed checker (issue 26), so that the two figures
are for the same work. A query that computes lost writes and duplicates only skips pairing, consumer
positions and four of the six anomalies, and is not the same check.

The rules are checkers/queue.py's, as results/pipeline/queue_checks.py states them as set operations
(its docstring lists them); tests/unit/test_duckdb_queue_rules.py holds these counts equal to the
in-process checker's on histories with each anomaly. Values and keys are the queue workload's ints.
A benchmark's peer only: `kafkaesque check` does not use it.

    .venv/bin/python benchmarks/peers/duckdb_queue_rules.py HISTORY.jsonl [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# history/ops.py NEMESIS and history/faults.py BEYOND_BUDGET (the test holds them equal): the peer imports
# nothing of the project's, so that an interpreter with DuckDB and nothing else runs it (--duckdb-python).
NEMESIS = "nemesis"
BEYOND_BUDGET = "beyond_fault_budget"

# Each step a table, in order. {path}: the history file; {nemesis}: the nemesis process as JSON text;
# {mark}: the mark of a fault beyond the budget.
STEPS = [
    # every line with its position; the process as its JSON text (an int or "nemesis")
    """CREATE TEMP TABLE raw AS SELECT row_number() OVER () - 1 AS pos, time, process::VARCHAR AS process, type, f,
        value, resent
       FROM read_json('{path}', format='newline_delimited',
            columns={{time:'BIGINT', process:'JSON', type:'VARCHAR', f:'VARCHAR', value:'JSON', resent:'JSON'}})""",
    # the time of the last nemesis completion marked beyond the fault budget (history/faults.py)
    """CREATE TEMP TABLE cutoff AS SELECT arg_max(time, pos) AS t FROM raw
       WHERE process = '{nemesis}' AND type <> 'invoke' AND json_type(value) = 'OBJECT'
         AND coalesce(TRY_CAST(value->'{mark}' AS BOOLEAN), false)""",
    # pair_ops: an invocation with its process's next op, unless that is an invocation (then no completion)
    """CREATE TEMP TABLE pairs AS SELECT p.*, CASE WHEN ctime >= c.t THEN 1 ELSE 0 END AS era,
        coalesce(ctime < c.t, false) AS excused FROM (
         SELECT pos, type, f, value, process,
                CASE WHEN lead(type) OVER w <> 'invoke' THEN lead(type) OVER w END AS ctype,
                lead(value) OVER w AS cvalue, lead(time) OVER w AS ctime, lead(resent) OVER w AS cresent
         FROM raw WHERE process <> '{nemesis}' WINDOW w AS (PARTITION BY process ORDER BY pos)) p, cutoff c
       WHERE p.type = 'invoke' AND p.f IN ('send', 'poll', 'final-poll')""",
    # every value a send carried, with the produce requests the client sent it in when it re-sent it
    """CREATE TEMP TABLE sends AS SELECT key, val, max(requests) AS requests FROM (
         SELECT CAST(value->>0 AS BIGINT) AS key, CAST(value->>1 AS BIGINT) AS val,
                CASE WHEN ctype IS NOT NULL AND cresent IS NOT NULL AND json_type(cresent) <> 'NULL'
                     THEN coalesce(CAST(cresent->>'requests' AS BIGINT), 2) END AS requests
         FROM pairs WHERE f = 'send') GROUP BY key, val""",
    """CREATE TEMP TABLE acked AS SELECT CAST(cvalue->>0 AS BIGINT) AS key, CAST(cvalue->1->>0 AS BIGINT) AS off,
        CAST(cvalue->1->>1 AS BIGINT) AS val, era, excused
       FROM pairs WHERE f = 'send' AND ctype = 'ok'""",
    """CREATE TEMP TABLE polls AS SELECT pos, process, era,
        unnest(map_entries(json_transform(cvalue, '"MAP(VARCHAR, BIGINT[][])"'))) AS e
       FROM pairs WHERE f = 'poll' AND ctype = 'ok'""",
    """CREATE TEMP TABLE finals AS SELECT pos, process, era, CAST(cvalue->>0 AS BIGINT) AS key,
        CAST(cvalue->>1 AS BIGINT) AS hwm, CAST(cvalue->2 AS BIGINT[][]) AS recs
       FROM pairs WHERE f = 'final-poll' AND ctype = 'ok'""",
    # every record read, with its place in its read (two unnests in one select go in step)
    """CREATE TEMP TABLE records AS SELECT pos, process, era, kind, key, r[1] AS off, r[2] AS val, i FROM (
         SELECT pos, process, era, 'poll' AS kind, CAST(e.key AS BIGINT) AS key, unnest(e.value) AS r,
                unnest(range(len(e.value))) AS i FROM polls
         UNION ALL
         SELECT pos, process, era, 'final-poll', key, unnest(recs), unnest(range(len(recs))) FROM finals)""",
    # A record's step from the consumer's position: the record before it in the same read, else the last
    # record of an earlier poll of its process, key and era (a final read does not move the position).
    # Only the steps that are not to the next offset are kept.
    """CREATE TEMP TABLE steps AS SELECT era, key, off, prev FROM (
         SELECT era, key, off,
                CASE WHEN lag(pos) OVER w = pos THEN lag(off) OVER w
                     ELSE last_value(CASE WHEN kind = 'poll' THEN off END IGNORE NULLS)
                          OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) END AS prev
         FROM records WINDOW w AS (PARTITION BY process, key, era ORDER BY pos, i))
       WHERE prev IS NOT NULL AND off <> prev + 1""",
    "CREATE TEMP TABLE seen AS SELECT DISTINCT era, key, off, val FROM records",
]

COUNTS = {
    "inconsistent-offsets": "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM seen GROUP BY era, key, off)",
    "duplicate": """SELECT count(*) FROM (SELECT key, val, count(*) AS n FROM seen GROUP BY era, key, val) b
                    LEFT JOIN sends s USING (key, val) WHERE n > coalesce(s.requests, 1)""",
    "unexpected": "SELECT count(*) FROM (SELECT DISTINCT key, val FROM seen) b ANTI JOIN sends s USING (key, val)",
    "nonmonotonic-poll": "SELECT count(*) FROM steps WHERE off <= prev",
    # a jump over an offset proven to exist in its era: a read returned a record there, or a send was
    # acknowledged there
    "poll-skip": """WITH proven AS (SELECT era, key, off FROM seen UNION SELECT era, key, off FROM acked)
                    SELECT count(*) FROM steps j WHERE off > prev + 1 AND EXISTS (
                      SELECT 1 FROM proven p WHERE p.era = j.era AND p.key = j.key AND p.off > j.prev AND p.off < j.off)""",
}
# lost writes, the acknowledged sends of keys without a final read, and the acknowledged sends
ACKED = """WITH hwm AS (SELECT key, max(hwm) AS hwm FROM finals WHERE hwm IS NOT NULL GROUP BY key),
    in_final AS (SELECT DISTINCT key, val FROM records WHERE kind = 'final-poll'),
    at_offset AS (SELECT DISTINCT key, off, val FROM seen)
    SELECT count(*) FILTER (WHERE h.hwm IS NOT NULL AND NOT a.excused
                            AND (f.key IS NULL OR (a.off >= 0 AND a.off < h.hwm AND o.key IS NULL))),
           count(*) FILTER (WHERE h.hwm IS NULL), count(*)
    FROM acked a LEFT JOIN hwm h USING (key) LEFT JOIN in_final f ON f.key = a.key AND f.val = a.val
         LEFT JOIN at_offset o ON o.key = a.key AND o.off = a.off AND o.val = a.val"""


def queue_rule_counts(path: str, threads: int = 1) -> dict[str, Any]:
    """The anomaly counts of the history file at `path` under the queue rules, with the verdict they give:
    false on any anomaly; else unknown when an acknowledged send's key has no final read, or no send was
    acknowledged; else true."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads={int(threads)}")
    for step in STEPS:
        con.execute(step.format(path=path.replace("'", "''"), nemesis=json.dumps(NEMESIS), mark=BEYOND_BUDGET))
    counts: dict[str, Any] = {name: con.execute(sql).fetchone()[0] for name, sql in COUNTS.items()}
    counts["lost-write"], uncovered, acked = con.execute(ACKED).fetchone()
    verdict = "false" if any(counts.values()) else "unknown" if uncovered or not acked else "true"
    return {"verdict": verdict, **counts, "uncovered": uncovered, "acked": acked}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("history")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(json.dumps(queue_rule_counts(args.history, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
