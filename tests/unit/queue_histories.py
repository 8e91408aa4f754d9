"""Random queue histories for the differential tests: concurrent sends and polls over a few partitions, a final
read of each, and optionally one injected anomaly of each kind the queue and log-order checkers look for."""

from __future__ import annotations

import random
from typing import Any

from kafkaesque_harness.history import Op

ANOMALIES = ("lost", "duplicate", "inconsistent", "nonmonotonic", "skip", "unexpected", "future-read",
             "stale-final", "swap-acks", "unmatched", "orphan-completion", "beyond-budget", "gap", "wrong-hwm",
             "float-offset", "string-value", "committed-rewind", "resend", "resent", "resent-over")


def generate(seed: int, n_ops: int = 60, keys: int = 2, processes: int = 4,
             anomalies: tuple[str, ...] = (), subscribe: bool = False) -> list[Op]:
    """A history of about `n_ops` client ops in time order, with `anomalies` injected."""
    rng = random.Random(seed)
    logs: list[list[Any]] = [[] for _ in range(keys)]
    positions = [[0] * keys for _ in range(processes)]
    events: list[tuple[float, int, Op]] = []  # (time, tie-break, op)
    busy_until = [0.0] * processes
    pid = list(range(processes))
    value = 0
    polled: set[int] = set()  # subscribe: processes that have polled (been assigned their partitions)
    t = 0.0
    tick = 0

    def at(time: float, op: Op) -> None:
        nonlocal tick
        tick += 1
        events.append((time, tick, op))

    for _ in range(n_ops):
        p = rng.randrange(processes)
        start = max(t, busy_until[p]) + rng.random()
        effect = start + rng.random() * 2
        end = effect + rng.random() * 2
        t = start
        if rng.random() < 0.6:
            k = rng.randrange(keys)
            value += 1
            at(start, Op("invoke", "send", pid[p], [k, value]))
            r = rng.random()
            if "gap" in anomalies and rng.random() < 0.1:
                logs[k].append(None)  # an offset holding nothing a client sees (a transaction marker)
            if r < 0.85:
                logs[k].append(value)
                at(end, Op("ok", "send", pid[p], [k, [len(logs[k]) - 1, value]]))
            elif r < 0.92:
                at(end, Op("fail", "send", pid[p], [k, value]))
            else:
                if rng.random() < 0.5:
                    logs[k].append(value)  # indeterminate, and it happened
                at(end, Op("info", "send", pid[p], [k, value]))
                pid[p] += processes  # an info op ends its process (Jepsen's rule)
        else:
            at(start, Op("invoke", "poll", pid[p], None))
            out: dict[str, list] = {}
            committed: dict[str, int] = {}
            for k in range(keys):
                begin = positions[p][k]
                recs = [[o, logs[k][o]] for o in range(begin, min(begin + rng.randrange(1, 5), len(logs[k])))]
                recs = [r for r in recs if r[1] is not None]
                if recs:
                    out[str(k)] = recs
                    positions[p][k] = recs[-1][0] + 1
                    committed[str(k)] = recs[-1][0] + 1
            extra: dict[str, Any] | None = None
            if subscribe:
                extra = {"committed": committed} if committed else {}
                if pid[p] not in polled:  # a member's first poll: the group assigns it every partition
                    polled.add(pid[p])
                    extra["rebalance_log"] = [{"keys": list(range(keys)), "type": "assigned"}]
                extra = extra or None
            at(end, Op("ok" if rng.random() < 0.95 else "fail", "poll", pid[p], out,
                       extra=extra))
        busy_until[p] = end
        t = effect
    t_final = max(busy_until) + 1
    for k in range(keys):
        recs = [[o, v] for o, v in enumerate(logs[k]) if v is not None]
        at(t_final + k, Op("invoke", "final-poll", 100 + k, [k]))
        at(t_final + k + 0.5, Op("ok", "final-poll", 100 + k, [k, len(logs[k]), recs]))
    events.sort(key=lambda e: (e[0], e[1]))
    ops = [op for _, _, op in events]
    for a in anomalies:
        _inject(rng, ops, a, value)
    for i, op in enumerate(ops):
        op.index, op.time = i, i * 10
    return ops


def _reads(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.type == "ok" and op.f == "poll" and any(op.value.values())]


def _inject(rng: random.Random, ops: list[Op], anomaly: str, max_value: int) -> None:
    polls = _reads(ops)
    finals = [op for op in ops if op.type == "ok" and op.f == "final-poll" and op.value[2]]
    acks = [op for op in ops if op.type == "ok" and op.f == "send"]
    if anomaly == "lost" and finals:
        f = rng.choice(finals)
        del f.value[2][rng.randrange(len(f.value[2]))]
    elif anomaly == "duplicate" and finals:
        f = rng.choice(finals)
        o, v = f.value[2][rng.randrange(len(f.value[2]))]
        f.value[2].append([f.value[1], v])
        f.value[1] += 1
    elif anomaly == "inconsistent" and polls:
        recs = rng.choice(list(v for v in rng.choice(polls).value.values() if v))
        recs[rng.randrange(len(recs))][1] = rng.randrange(1, max_value + 1)
    elif anomaly == "nonmonotonic" and len(polls) > 2:
        poll = rng.choice(polls[1:])
        recs = rng.choice([v for v in poll.value.values() if v])
        recs.append([max(0, recs[0][0] - 2), recs[0][1]])
    elif anomaly == "skip" and polls:
        recs = rng.choice([v for v in rng.choice(polls).value.values() if v])
        if len(recs) > 2:
            del recs[1]
    elif anomaly == "unexpected" and polls:
        recs = rng.choice([v for v in rng.choice(polls).value.values() if v])
        recs[-1][1] = max_value + 1000
    elif anomaly == "future-read" and polls and acks:
        early = polls[0]
        key = next(k for k, v in early.value.items() if v)
        late = [a for a in acks if a.value[0] == int(key)][-1:]
        if late:
            early.value[key].append([late[0].value[1][0], late[0].value[1][1]])
    elif anomaly == "stale-final" and finals:
        f = rng.choice(finals)
        f.value[1] = max(0, f.value[1] - 1)
    elif anomaly == "swap-acks" and len(acks) > 1:
        a, b = acks[0], acks[-1]
        a.value[1][0], b.value[1][0] = b.value[1][0], a.value[1][0]
    elif anomaly == "unmatched":
        for _ in range(3):
            comps = [k for k, op in enumerate(ops) if op.type != "invoke" and op.f in ("send", "poll")]
            if comps:
                del ops[rng.choice(comps)]
    elif anomaly == "orphan-completion":
        ops.insert(rng.randrange(len(ops) + 1), Op("ok", "poll", 999, {"0": [[0, 1]]}))
    elif anomaly == "beyond-budget":
        k = rng.randrange(len(ops) + 1)
        ops.insert(k, Op("info", "power-cut", "nemesis", {"beyond_fault_budget": True, "nodes": ["n1"]}))
        ops.insert(k, Op("invoke", "power-cut", "nemesis", None))
    elif anomaly == "wrong-hwm" and finals:
        rng.choice(finals).value[1] += 3
    elif anomaly == "float-offset" and polls:
        recs = rng.choice([v for v in rng.choice(polls).value.values() if v])
        recs[0][0] = float(recs[0][0])
    elif anomaly == "string-value" and polls:
        recs = rng.choice([v for v in rng.choice(polls).value.values() if v])
        recs[0][1] = str(recs[0][1])
    elif anomaly == "resend" and acks:
        # a value sent again (a client retrying by hand): acknowledged at another offset, or indeterminate
        a = rng.choice(acks)
        k = rng.randrange(len(ops) + 1)
        comp = (Op("ok", "send", 500, [a.value[0], [a.value[1][0] + rng.choice((0, 1, 50)), a.value[1][1]]])
                if rng.random() < 0.6 else Op("info", "send", 500, [a.value[0], a.value[1][1]]))
        ops[k:k] = [Op("invoke", "send", 500, [a.value[0], a.value[1][1]]), comp]
    elif anomaly in ("resent", "resent-over"):
        # A send the client re-sent n times (librdkafka: "resent" on its completion, n + 1 requests; a failed
        # one is info). "resent": its value at 2 to n + 1 offsets, the client's own copies; "resent-over": at
        # n + 2, one more than its requests could append, a duplicate. The extra copies end the final read.
        sends = [op for op in ops if op.f == "send" and op.type in ("ok", "info")]
        if sends:
            s = rng.choice(sends)
            n = rng.randrange(1, 4)
            s.extra = {"resent": {"requests": n + 1, "errors": ["Broker: Not leader for partition"] * n}}
            key, v = s.value[0], s.value[1][1] if s.type == "ok" else s.value[1]
            final = next(op for op in ops if op.type == "ok" and op.f == "final-poll" and op.value[0] == key)
            if anomaly == "resent-over":
                copies = n + 2
            else:
                copies = n + 1 if rng.random() < 0.5 else rng.randrange(2, n + 2)
            for _ in range(copies - sum(1 for _, x in final.value[2] if x == v)):
                final.value[2].append([final.value[1], v])
                final.value[1] += 1
    elif anomaly == "committed-rewind" and polls:
        poll = rng.choice(polls)
        poll.extra = {**(poll.extra or {}), "committed": {k: v[-1][0] + 5 for k, v in poll.value.items() if v}}
