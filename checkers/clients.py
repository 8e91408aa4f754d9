"""Whose an anomaly is, when the evidence can tell (DESIGN.md's convention): the broker's (a trace rule or a
broker answer), a client library's (its own event in the history), or the harness's (the workload's own act).

The checkers read the client events a workload records on its completions (history/clients.py) and give each
anomaly that follows from one its owner, from the history alone, as they find it:

  whose   "client"   it follows from a client library's own event: a reset of its position after an answer it
                     took for an error, a position placed by its reset policy, a send it failed itself while
                     its transaction's commit returned
          "harness"  it follows from the workload's own seek
          "broker"   it follows from a broker's answer the client only obeyed (the group's committed offset),
                     or it is a broken protocol rule the broker's own trace shows (the trace checker), or the
                     brokers' own state (the replica checker); a trace rule that proves the client's own act
                     (checkers/trace.py CLIENT_RULES: sequence-reused, other records sent under a used sequence,
                     which the broker answers as Kafka's does) is the client's
          absent     unattributed: nothing recorded explains it; it stays the system's, whose part not known

An attributed anomaly still counts: the verdict stays invalid, since the system under test, its client
included, did it. Each example carries "whose", "cause" (one clause: what the client did, and why), the
event ("client_event", with its process and the op whose completion carried it) and "summary" (the anomaly
and its cause in one sentence, "<what>: <cause>"); each anomaly carries "whose": how many of all its
instances (not only the examples) each owner has. The composite (checkers/core.py compose) adds the run's
"attribution": the counts over every reported anomaly, and one sentence.

After the checks, `attribute_with_trace` adds the broker answers behind each example's client event where the
nodes' protocol traces have them (CheckContext.data["trace"], clusters/trace_files.py): the client id the event
names (history/clients.py: "kafkaesque-p<process>") ties it to the trace lines answered to that client. A reset
after OFFSET_OUT_OF_RANGE is tied to the `consumer_fetch_refused` at the offset it held, its ListOffsets to
`list_offsets_answered`, a leader taken from an older epoch to the `metadata_answered` that named it, and the
leader of the newest epoch then to the controller's `leader_elected` (or the broker's `become_leader`). Trace
and history are placed on one clock by `mono` (the host's monotonic clock, which both record; a node on
another host has its own, and then the offsets alone tie them). The cause then names the broker, its role and
epoch, the newer epoch's leader and the proving lines: "kafka-python reset its position to the earliest offset
(0) after broker-1 answered OFFSET_OUT_OF_RANGE to its fetch at offset 188 as leader of epoch 0 while broker-3
led epoch 1 (trace broker-1 line 1313)". The example's "trace" lists those lines (the report shows them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafkaesque_harness.history import client_events, client_id

CLIENT, BROKER, HARNESS = "client", "broker", "harness"
UNATTRIBUTED = "unattributed"
OWNERS = (CLIENT, BROKER, HARNESS)
# The checkers whose anomalies are the broker's by what they read: the nodes' own protocol decisions and state.
BROKER_CHECKERS = {"trace": "a protocol rule the broker's own trace shows broken",
                   "replicas": "the brokers' own replica state"}
MAX_PENDING = 8  # moves kept per process and partition, waiting for the read they explain
POLICY_WORDS = {"earliest": "the earliest offset", "latest": "the latest offset",
                "truncation": "the end of the diverging epoch", "offset": "an offset"}


def whose_of(event: Mapping[str, Any]) -> str:
    """The owner of what a client event did to a position."""
    if event.get("type") == "seek":
        why = event.get("why")
        return HARNESS if why == "workload" else BROKER if why == "committed" else CLIENT
    return CLIENT


def _regressed(e: Mapping[str, Any]) -> bool:
    a, b = e.get("from_epoch"), e.get("leader_epoch")
    return isinstance(a, int) and isinstance(b, int) and 0 <= b < a


class Moves:
    """The position moves (reset and seek events) of each process's clients, per partition, waiting for the read
    they explain: a move to offset T explains the next read of the partition that starts at T (or, its target
    not known, one that starts below where it moved from). Fed every completion in history order (`note`);
    asked at each read (`explain`), which takes the move it matches and the older ones. The leader events are
    kept too: a reset's broker that the client had just taken from an older epoch (an epoch regression) is told
    with it."""

    def __init__(self) -> None:
        self.pending: dict[tuple[Any, int], list[dict[str, Any]]] = {}
        self.regressions: dict[tuple[Any, int], dict[str, Any]] = {}

    def note(self, process: Any, extra: Mapping[str, Any] | None, op_index: Any) -> None:
        for e in client_events(extra):  # type: ignore[arg-type]
            kind, key = e.get("type"), e.get("key")
            if not isinstance(key, int):
                continue
            if kind == "leader":
                if _regressed(e):
                    self.regressions[(process, key)] = {**e, "process": process, "op": op_index}
                continue
            if kind not in ("reset", "seek"):
                continue
            move = {**e, "process": process, "op": op_index}
            taken = self.regressions.get((process, key))
            if kind == "reset" and taken is not None and taken.get("to") == e.get("broker"):
                move["after_leader"] = taken
            pending = self.pending.setdefault((process, key), [])
            pending.append(move)
            del pending[:-MAX_PENDING]

    def explain(self, process: Any, key: int, first: Any) -> dict[str, Any] | None:
        """The move that placed the read of `key` starting at offset `first`, taken off the pending ones, or None."""
        pending = self.pending.get((process, key))
        if not pending or not isinstance(first, int):
            return None
        for i in range(len(pending) - 1, -1, -1):
            m = pending[i]
            to, was = m.get("to"), m.get("from")
            if to == first or (to is None and isinstance(was, int) and first < was):
                del pending[:i + 1]
                return m
        return None


def node_name(node: Any, names: Mapping[Any, str] | None = None) -> str:
    """A broker as the text names it: the trace's node name when known ("broker-1"), else "broker <id>"."""
    if names and node in names:
        return names[node]
    return f"broker {node}"


def move_cause(m: Mapping[str, Any]) -> str:
    """What a move did, and why, in one clause, from the history alone."""
    lib = m.get("library") or "the client library"
    to = m.get("to")
    at = f" ({to})" if to is not None else ""
    if m.get("type") == "seek":
        why = m.get("why")
        if why == "workload":
            return f"the workload itself moved the consumer's position to offset {to}"
        if why == "committed":
            return f"{lib} took up the group's committed offset {to} on an assignment"
        return f"{lib} placed a position it did not have at {POLICY_WORDS.get(m.get('policy'), 'an offset')}{at}"
    policy = POLICY_WORDS.get(m.get("policy"), "an offset")
    text = f"{lib} reset its position to {policy}{at} after an {m.get('error') or 'error'} answer to its fetch at " \
           f"offset {m.get('from')}"
    if m.get("broker") is not None:
        text += f" from {node_name(m['broker'])}"
        if m.get("leader_epoch") is not None:
            text += f", which it took for the leader of epoch {m['leader_epoch']}"
    leader = m.get("after_leader")
    if leader:
        text += (f"; it had taken {node_name(leader.get('to'))} for the leader in epoch {leader.get('leader_epoch')} "
                 f"after knowing {node_name(leader.get('from'))} in epoch {leader.get('from_epoch')} (op "
                 f"#{leader.get('op')})")
    return text


def cause_fields(what: str, m: Mapping[str, Any] | None, whose: str | None = None,
                 cause: str | None = None) -> dict[str, Any]:
    """An example's fields for an anomaly `what` (its sentence without the cause) caused by client event `m`:
    whose, cause, client_event, and the summary in one sentence. Nothing but the summary when `m` is None."""
    if m is None:
        return {"summary": what}
    cause = cause or move_cause(m)
    return {"summary": f"{what}: {cause}", "what": what, "whose": whose or whose_of(m), "cause": cause,
            "client_event": dict(m)}


def send_error_cause(e: Mapping[str, Any], committed: bool = True) -> str:
    lib = e.get("library") or "the client library"
    tail = ", yet its commit_transaction returned" if committed else ""
    return f"{lib} failed its send of {e.get('value')!r} to key {e.get('key')} itself ({e.get('error')}){tail}"


def count_whose(counts: dict[str, int], whose: str | None) -> None:
    counts[whose or UNATTRIBUTED] = counts.get(whose or UNATTRIBUTED, 0) + 1


# --- after the checks: the broker answers, from the traces -----------------------------------------------

class TraceIndex:
    """The nodes' traces (clusters/trace_files.py's document) as the attribution reads them."""

    def __init__(self, doc: Mapping[str, Any]):
        self.names: dict[Any, str] = {}
        self.by_event: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for name, node in (doc.get("nodes") or {}).items():
            for e in (node or {}).get("lines") or ():
                if not isinstance(e, dict):
                    continue
                if isinstance(e.get("node"), int):  # a node's lines all carry its id
                    self.names.setdefault(e["node"], name)
                self.by_event.setdefault(e.get("event"), []).append((name, e))

    def lines(self, event: str) -> list[tuple[str, dict[str, Any]]]:
        return self.by_event.get(event, [])


def _mono(e: Mapping[str, Any]) -> float | None:
    m = e.get("mono")
    return float(m) if isinstance(m, int | float) else None


def _closest_before(found: list[tuple[str, dict[str, Any]]], mono: float | None,
                    slack: float = 0.05) -> tuple[str, dict[str, Any]] | None:
    """The last of `found` no later than `mono` (+ slack); without a common clock, the last one."""
    if not found:
        return None
    if mono is None:
        return found[-1]
    before = [f for f in found if (_mono(f[1]) or 0) <= mono + slack]
    return max(before, key=lambda f: _mono(f[1]) or 0) if before else found[-1]


def _cite(node: str, e: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    out: dict[str, Any] = {"node": node, "line": e.get("line"), "event": e.get("event")}
    for k in ("mono", "topic", "partition", "leader_epoch", "client", *keys):
        if k in e:
            out[k] = e[k]
    return out


def _same_partition(e: Mapping[str, Any], m: Mapping[str, Any]) -> bool:
    return e.get("partition") == m.get("key") and (m.get("topic") is None or e.get("topic") == m.get("topic"))


def _newest_leader(index: TraceIndex, m: Mapping[str, Any], mono: float | None) -> tuple[Any, int] | None:
    """(leader node id, epoch) of the partition's newest leader epoch elected by `mono`, from the controller's
    `leader_elected` lines, else the brokers' `become_leader`."""
    best: tuple[Any, int] | None = None
    for event, leader_of in (("leader_elected", lambda e: e.get("leader")), ("become_leader", lambda e: e.get("node"))):
        for _, e in index.lines(event):
            t, ep = _mono(e), e.get("leader_epoch")
            if not _same_partition(e, m) or not isinstance(ep, int) or (mono is not None and t is not None and t > mono):
                continue
            if leader_of(e) is not None and leader_of(e) >= 0 and (best is None or ep > best[1]):
                best = (leader_of(e), ep)
        if best is not None:
            return best
    return best


def reset_with_trace(m: Mapping[str, Any], index: TraceIndex) -> tuple[str, list[dict[str, Any]]] | None:
    """The cause of reset `m` with the broker answers behind it, and the proving lines; None when the trace does
    not have the answer."""
    cid = m.get("client") or client_id(m.get("process"))
    mono = _mono(m)
    if m.get("error") == "OFFSET_OUT_OF_RANGE":
        refused = [(n, e) for n, e in index.lines("consumer_fetch_refused")
                   if e.get("client") == cid and _same_partition(e, m) and e.get("offset") == m.get("from")
                   and e.get("error") == 1]
    elif m.get("error") == "LOG_TRUNCATION":
        refused = [(n, e) for n, e in index.lines("offset_for_leader_epoch_answered")
                   if e.get("client") == cid and _same_partition(e, m)]
    else:
        return None
    hit = _closest_before(refused, mono)
    if hit is None:
        return None
    node, e = hit
    lib = m.get("library") or "the client library"
    to = m.get("to")
    policy = POLICY_WORDS.get(m.get("policy"), "an offset") + (f" ({to})" if to is not None else "")
    role, epoch = e.get("role") or "replica", e.get("leader_epoch")
    lines = [_cite(node, e, "offset", "current_leader_epoch", "last_fetched_epoch", "error", "role", "leo", "hwm")]
    if m.get("error") == "OFFSET_OUT_OF_RANGE":
        text = (f"{lib} reset its position to {policy} after {node} answered OFFSET_OUT_OF_RANGE to its fetch at "
                f"offset {m.get('from')} as {role} of epoch {epoch}")
    else:
        text = (f"{lib} reset its position to {policy} after {node} answered its OffsetForLeaderEpoch as {role} of "
                f"epoch {epoch} (end offset {e.get('end_offset')} of epoch {e.get('end_epoch')})")
    newest = _newest_leader(index, m, _mono(e))
    if newest is not None and isinstance(epoch, int) and newest[1] > epoch:
        text += f" while {node_name(newest[0], index.names)} led epoch {newest[1]}"
    elif newest is not None and newest[0] == e.get("node") and role == "leader":
        text += (f", the partition's newest leader, its log then ending at {e.get('leo')}: its log no longer held "
                 f"what the consumer had read")
    text += f" (trace {node} line {e.get('line')})"
    leader = m.get("after_leader")
    if leader:
        told = [(n, x) for n, x in index.lines("metadata_answered") if x.get("client") == cid
                and _names_leader(x, m, leader.get("to"), leader.get("leader_epoch"))]
        said = _closest_before(told, _mono(leader))
        if said is not None:
            named = node_name(leader.get("to"), index.names)
            text += (f"; {said[0]} had named {'itself' if named == said[0] else named} leader of epoch "
                     f"{leader.get('leader_epoch')} in its Metadata answer, which {lib} took after knowing epoch "
                     f"{leader.get('from_epoch')} (trace {said[0]} line {said[1].get('line')})")
            lines.append(_cite(said[0], said[1], "leaders"))
    listed = [(n, x) for n, x in index.lines("list_offsets_answered") if x.get("client") == cid
              and _same_partition(x, m) and (_mono(x) or 0) >= (_mono(e) or 0)]
    if listed:
        first = min(listed, key=lambda f: _mono(f[1]) or 0)
        lines.append(_cite(first[0], first[1], "timestamp", "offset", "role"))
    return text, lines


def _names_leader(e: Mapping[str, Any], m: Mapping[str, Any], leader: Any, epoch: Any) -> bool:
    for p in ((e.get("leaders") or {}).get(m.get("topic")) or ()):
        if isinstance(p, list | tuple) and len(p) >= 3 and p[0] == m.get("key") and p[1] == leader and p[2] == epoch:
            return True
    return False


def attribute_with_trace(results: Iterable[Any], data: Mapping[str, Any] | None) -> None:
    """After the checks: the broker answers behind each example's client event (module docstring), where the
    run's traces have them; and the broker's own checkers' anomalies marked the broker's. Changes the Results'
    examples in place (they are the checkers' own dicts, not yet written)."""
    doc = (data or {}).get("trace")
    index = TraceIndex(doc) if isinstance(doc, Mapping) else None
    for r in results:
        for a in r.anomalies:
            if r.checker in BROKER_CHECKERS and a.whose is None:
                a.whose = {BROKER: a.count}
                for ex in a.examples:
                    if isinstance(ex, dict):
                        ex.setdefault("whose", BROKER)
                continue
            if index is None:
                continue
            for ex in a.examples:
                m = ex.get("client_event") if isinstance(ex, dict) else None
                if not isinstance(m, dict) or m.get("type") != "reset":
                    continue
                found = reset_with_trace(m, index)
                if found is None:
                    continue
                cause, lines = found
                ex["cause"] = cause
                ex["broker_answer"] = lines[0]
                ex["trace"] = [*(ex.get("trace") or []), *lines]
                if ex.get("what"):
                    ex["summary"] = f"{ex['what']}: {cause}"


def attribution(results: Iterable[Any]) -> dict[str, Any] | None:
    """The run's attribution: how many reported anomalies each owner has (over every instance), the client
    libraries named, and one sentence; None when no anomaly was reported."""
    counts: dict[str, int] = {}
    libraries: set[str] = set()
    total = 0
    for r in results:
        for a in r.anomalies:
            total += a.count
            whose = dict(a.whose or {})
            for owner, n in whose.items():
                counts[owner] = counts.get(owner, 0) + n
            rest = a.count - sum(whose.values())
            if rest > 0:
                counts[UNATTRIBUTED] = counts.get(UNATTRIBUTED, 0) + rest
            for ex in a.examples:
                m = ex.get("client_event") if isinstance(ex, dict) else None
                if isinstance(m, dict) and m.get("library") and ex.get("whose") == CLIENT:
                    libraries.add(m["library"])
    if not total:
        return None
    return {**{k: counts.get(k, 0) for k in (*OWNERS, UNATTRIBUTED)}, "anomalies": total,
            "libraries": sorted(libraries), "text": attribution_text(counts, total, sorted(libraries))}


def attribution_text(counts: Mapping[str, int], total: int, libraries: list[str]) -> str:
    lib = f" ({', '.join(libraries)})" if libraries else ""
    parts = []
    if counts.get(CLIENT):
        parts.append(f"{counts[CLIENT]} follow the client library's own events{lib}")
    if counts.get(BROKER):
        parts.append(f"{counts[BROKER]} are the broker's (a trace rule, its state, or its answer)")
    if counts.get(HARNESS):
        parts.append(f"{counts[HARNESS]} follow the workload's own seeks")
    if counts.get(UNATTRIBUTED):
        parts.append(f"{counts[UNATTRIBUTED]} are unattributed (the system's, whose part not known)")
    if len(parts) == 1:
        only = parts[0].split(" ", 1)[1]
        return f"{'The one anomaly' if total == 1 else f'All {total} anomalies'} {_singular(only) if total == 1 else only}."
    return f"Of {total} anomalies, " + ", ".join(parts[:-1]) + f" and {parts[-1]}."


def _singular(text: str) -> str:
    return text.replace("follow ", "follows ", 1).replace("are ", "is ", 1)


__all__ = ["BROKER", "BROKER_CHECKERS", "CLIENT", "HARNESS", "OWNERS", "UNATTRIBUTED", "Moves", "TraceIndex",
           "attribute_with_trace", "attribution", "attribution_text", "cause_fields", "count_whose", "move_cause",
           "reset_with_trace", "send_error_cause", "whose_of"]
