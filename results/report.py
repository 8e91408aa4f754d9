"""The per-run HTML report: one self-contained file (plotly.js and styles embedded; opens with no network).

Order of the page, for a reader who has one screen: the verdict, one line per anomaly type
(count and first example), and the lost acknowledged writes (partition, offset, value; when
acknowledged and under which fault; between when and under which faults they disappeared),
all in the first 900 pixels (first_screen_summary); then each anomaly with its example ops
and the fault active at each (a dependency cycle drawn beside its steps: results/cycle_svg.py),
the plots with the fault windows shaded (latency, throughput, per-partition offsets), the ops
timeline per process with the protocol states the run reached,
the fault ledger (each fault applied, observed and healed, with its evidence), the test spec,
and links to node logs. When the verdict is not valid for lack of proof, the first screen says
why, one sentence per missing proof (results.json's unknown_reasons). Fault windows are the
shared rule of history/faults.py, which the Spark pipeline uses too.

Every value that comes from a history or a broker is escaped: jinja2's autoescape for
HTML, and JSON embedded in <script> with "<" escaped, since a broker can return anything.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import jinja2

from kafkaesque_harness.checkers.availability import availability, availability_sentence
from kafkaesque_harness.checkers.coverage import STATES
from kafkaesque_harness.history import (
    INVOKE,
    NEMESIS,
    FaultWindow,
    Op,
    fault_records,
    fault_windows,
    pair_ops,
    read_history,
)
from kafkaesque_harness.results.cycle_svg import cycle_svg
from kafkaesque_harness.results.store import store_relative, write_atomically
from kafkaesque_harness.workloads.base import ValueReader
from kafkaesque_harness.workloads.registry import value_reader

MAX_TIMELINE_OPS = 4000  # beyond this the timeline shows the first ops only (the page stays usable)
MAX_SCATTER_POINTS = 60000


def fault_at(windows: list[FaultWindow], t_s: float) -> str:
    active = [w.name for w in windows if w.start_s <= t_s and (w.end_s is None or t_s <= w.end_s)]
    return ", ".join(active) or "none"


def faults_during(windows: list[FaultWindow], t0_s: float, t1_s: float) -> str:
    """The faults active at any moment of [t0_s, t1_s], in the order they began."""
    active = []
    for w in windows:
        if w.start_s <= t1_s and (w.end_s is None or w.end_s >= t0_s) and w.name not in active:
            active.append(w.name)
    return ", ".join(active) or "none"


def _shapes(windows: list[FaultWindow], end_s: float) -> list[dict[str, Any]]:
    palette = ["rgba(220,50,47,0.12)", "rgba(38,139,210,0.12)", "rgba(133,153,0,0.15)",
               "rgba(211,54,130,0.12)", "rgba(181,137,0,0.15)", "rgba(42,161,152,0.12)"]
    names = sorted({w.name for w in windows})
    colour = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    shapes = []
    for w in windows:
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": w.start_s,
                       "x1": w.end_s if w.end_s is not None else end_s, "y0": 0, "y1": 1,
                       "fillcolor": colour[w.name], "line": {"width": 0}, "layer": "below",
                       "label": {"text": w.name, "textposition": "top left", "font": {"size": 10}}})
    return shapes


def _latency_and_throughput(pairs, windows, end_s, values: ValueReader):
    """Latency and throughput per (op, outcome); the workload's writes (what `values` reads a written record
    from) drawn as circles and solid lines, every other op as diamonds and dotted lines."""
    writes = {inv.f for inv, _ in pairs if inv.process != NEMESIS and values.written(inv) is not None}
    by_key: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: {"x": [], "y": [], "text": []})
    for inv, comp in pairs:
        if inv.process == NEMESIS or comp is None:
            continue
        d = by_key[(inv.f, comp.type)]
        if len(d["x"]) < MAX_SCATTER_POINTS:
            d["x"].append(round(inv.time / 1e9, 4))
            d["y"].append(round((comp.time - inv.time) / 1e6, 3))
            d["text"].append(f"#{inv.index} p{inv.process}")
    colours = {"ok": "#2e7d32", "fail": "#c62828", "info": "#f9a825"}
    traces = [{"type": "scattergl", "mode": "markers", "name": f"{f} {t}", "x": v["x"], "y": v["y"],
               "text": v["text"], "marker": {"size": 4, "color": colours.get(t, "#555"),
                                              "symbol": "circle" if f in writes else "diamond"}}
              for (f, t), v in sorted(by_key.items())]
    latency = {"data": traces, "layout": {"title": {"text": "Latency (ms) by op, coloured by outcome"},
                                           "xaxis": {"title": {"text": "time (s)"}},
                                           "yaxis": {"title": {"text": "latency (ms)"}, "type": "log"},
                                           "shapes": _shapes(windows, end_s), "height": 380}}
    buckets: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for inv, comp in pairs:
        if inv.process == NEMESIS or comp is None:
            continue
        buckets[(inv.f, comp.type)][int(comp.time / 1e9)] += 1
    tp_traces = []
    for (f, t), counts in sorted(buckets.items()):
        xs = list(range(0, int(end_s) + 1))
        tp_traces.append({"type": "scatter", "mode": "lines", "name": f"{f} {t}", "x": xs,
                          "y": [counts.get(x, 0) for x in xs],
                          "line": {"color": colours.get(t, "#555"), "dash": "solid" if f in writes else "dot"}})
    throughput = {"data": tp_traces, "layout": {"title": {"text": "Throughput (completions per second)"},
                                                "xaxis": {"title": {"text": "time (s)"}}, "yaxis": {"title": {"text": "ops/s"}},
                                                "shapes": _shapes(windows, end_s), "height": 320}}
    return latency, throughput


def _offsets(pairs, windows, end_s, values: ValueReader):
    """Per partition: the offsets acknowledged sends got over time, and the final HWM."""
    sends: dict[str, dict[str, list]] = defaultdict(lambda: {"x": [], "y": []})
    hwm: dict[str, tuple[float, int]] = {}
    for _, comp in pairs:
        if comp is None or comp.type != "ok" or comp.process == NEMESIS:
            continue
        written, drained = values.written(comp), values.drained(comp)
        if written is not None and written[1] is not None:
            s = sends[str(written[0])]
            s["x"].append(round(comp.time / 1e9, 4))
            s["y"].append(written[1])
        elif drained is not None:
            hwm[str(drained[0])] = (comp.time / 1e9, drained[1])
    traces = [{"type": "scattergl", "mode": "markers", "name": f"partition {k} acked offset",
               "x": d["x"][:MAX_SCATTER_POINTS], "y": d["y"][:MAX_SCATTER_POINTS], "marker": {"size": 3}}
              for k, d in sorted(sends.items())]
    for k, (t, h) in sorted(hwm.items()):
        traces.append({"type": "scatter", "mode": "markers+text", "name": f"partition {k} final HWM",
                       "x": [t], "y": [h], "text": [f"HWM {h}"], "textposition": "top center",
                       "marker": {"size": 10, "symbol": "x"}})
    return {"data": traces, "layout": {"title": {"text": "Offsets acknowledged per partition, and the final HWM"},
                                       "xaxis": {"title": {"text": "time (s)"}}, "yaxis": {"title": {"text": "offset"}},
                                       "shapes": _shapes(windows, end_s), "height": 340}}


def _timeline(pairs, end_s, reached: dict[str, Any] | None = None):
    """Jepsen's timeline.html in plotly: one row per process, one bar per op; above them, a row of the
    protocol states the run reached (results.json "reached"), a marker at each time."""
    colours = {"ok": "#81c784", "fail": "#e57373", "info": "#ffd54f", "open": "#bdbdbd"}
    rows: dict[str, dict[str, list]] = defaultdict(lambda: {"base": [], "x": [], "y": [], "text": []})
    shown = 0
    for inv, comp in pairs:
        if shown >= MAX_TIMELINE_OPS:
            break
        shown += 1
        t0 = inv.time / 1e9
        t1 = comp.time / 1e9 if comp is not None else end_s
        kind = comp.type if comp is not None else "open"
        r = rows[kind]
        r["base"].append(round(t0, 4))
        r["x"].append(max(round(t1 - t0, 4), 0.002))
        r["y"].append(str(inv.process))
        value = comp.value if comp is not None else inv.value
        r["text"].append(f"#{inv.index} {inv.f} {json.dumps(value, default=str)[:120]}")
    data = [{"type": "bar", "orientation": "h", "name": k, "base": r["base"], "x": r["x"], "y": r["y"],
             "hovertext": r["text"], "hoverinfo": "text", "marker": {"color": colours[k]}}
            for k, r in rows.items()]
    for state, seen in sorted((reached or {}).items()):
        times = seen.get("times_s") or []
        data.append({"type": "scatter", "mode": "markers", "name": f"reached: {state}", "x": times,
                     "y": ["states"] * len(times), "marker": {"symbol": "diamond", "size": 9},
                     "hovertext": [f"{state} at {t:.2f} s ({seen.get('source')})" for t in times],
                     "hoverinfo": "text"})
    n_proc = len({y for r in rows.values() for y in r["y"]})
    return {"data": data, "layout": {"title": {"text": f"Timeline (first {shown} ops, one row per process)"},
                                     "barmode": "overlay", "xaxis": {"title": {"text": "time (s)"}},
                                     "yaxis": {"title": {"text": "process"}, "type": "category"},
                                     "height": max(300, 18 * n_proc + 120)}}


def _anomaly_sections(results: dict[str, Any], windows: list[FaultWindow]) -> list[dict[str, Any]]:
    """Every anomaly of every checker, with its example ops and the fault active at each op."""
    sections = []
    for cname, r in (results.get("checkers") or {}).items():
        for a in r.get("anomalies", []):
            examples = []
            for ex in a.get("examples", []):
                ops = [o for o in _ops_in(ex)]
                examples.append({
                    "summary": ex.get("summary") or ex.get("explanation") or "",
                    "whose": ex.get("whose") or "",  # checkers/clients.py: client, broker, harness
                    "ops": [{"index": o.get("index"), "time_s": f"{o.get('time', 0) / 1e9:.3f}",
                             "process": o.get("process"), "type": o.get("type"), "f": o.get("f"),
                             "value": _cut(json.dumps(o.get("value"), default=str), 300),
                             "fault": fault_at(windows, o.get("time", 0) / 1e9)} for o in ops],
                    # Trace lines that prove a protocol-rule violation (checkers/trace.py).
                    "trace": [{"node": t.get("node"), "line": t.get("line"), "event": t.get("event"),
                               "facts": _cut(readable({k: v for k, v in t.items()
                                                       if k not in ("node", "line", "event")}), 400)}
                              for t in ex.get("trace") or [] if isinstance(t, dict)],
                    # A dependency cycle (checkers/elle.py, checkers/txn.py) drawn beside its steps in words.
                    "cycle_svg": _markup_or_none(cycle_svg(ex)),
                    "steps": [str(s) for s in ex.get("steps") or []] if isinstance(ex.get("steps"), list) else [],
                    "raw": json.dumps(ex, default=str, indent=1)[:4000],
                })
            sections.append({"checker": cname, "name": a.get("name"), "count": a.get("count"),
                             "explanation": a.get("explanation", ""), "whose": whose_text(a), "examples": examples})
        details = r.get("details") or {}
        for key in ("counterexample", "cycles"):
            if key in details:
                sections.append({"checker": cname, "name": key, "count": "", "explanation":
                                 details.get(f"{key}_text") or "", "examples": [{"summary": "", "ops": [],
                                 "raw": json.dumps(details[key], default=str, indent=1)[:20000]}]})
    sections.sort(key=lambda x: x["name"] != "lost-write")  # as on the first screen: lost writes first
    return sections


def whose_text(anomaly: dict[str, Any]) -> str:
    """Whose an anomaly's instances are (checkers/clients.py), in words: "9 client, 1 unattributed"; "" when its
    checker attributed none."""
    whose = anomaly.get("whose")
    if not isinstance(whose, dict) or not whose:
        return ""
    parts = [f"{n} {owner}" for owner, n in whose.items() if isinstance(n, int) and n]
    rest = int(anomaly.get("count") or 0) - sum(n for n in whose.values() if isinstance(n, int))
    if rest > 0:
        parts.append(f"{rest} unattributed")
    return ", ".join(parts)


MAX_SUMMARY_LOST = 8  # lost writes listed on the first screen (the checkers keep at most 8 examples each)


def first_screen_summary(results: dict[str, Any], pairs, windows: list[FaultWindow],
                         values: ValueReader) -> dict[str, Any]:
    """What a reader needs from the first screen: one line per anomaly type, and the lost writes.

    Lines: {"name", "count", "checker", "text"}, the text being the checker's explanation and its
    first example's summary. Lost writes: for each lost-write example (the checker records up to
    8 of them), the partition, offset and value, when it was acknowledged and under which fault,
    and when it disappeared: by the first op that saw another value at its offset (a read, or a
    send acknowledged there after a new leader reused the offset), or else by the final read that
    missed it, with the faults active between its last sighting and then. `values`: how the ops' values
    read (the workload's, workloads/base.py).
    """
    lines: list[dict[str, Any]] = []
    lost_examples: list[dict[str, Any]] = []
    for cname, r in (results.get("checkers") or {}).items():
        for a in r.get("anomalies", []):
            examples = a.get("examples") or []
            first = examples[0] if examples else {}
            text = first.get("summary") or first.get("explanation") or a.get("explanation") or ""
            lines.append({"name": a.get("name"), "count": a.get("count"), "checker": cname,
                          "explanation": a.get("explanation", ""), "text": text, "whose": whose_text(a)})
            if a.get("name") == "lost-write":
                lost_examples += [ex for ex in examples if isinstance(ex, dict)]
    lines.sort(key=lambda x: x["name"] != "lost-write")  # stable: lost writes first, then the checkers' order
    lost = _lost_write_rows(lost_examples[:MAX_SUMMARY_LOST], pairs, windows, values)
    return {"lines": lines, "lost": lost, "lost_groups": _lost_write_groups(lost),
            "lost_total": sum(int(x["count"] or 0) for x in lines if x["name"] == "lost-write"
                              and isinstance(x["count"], int))}


def _lost_write_rows(examples: list[dict[str, Any]], pairs, windows: list[FaultWindow],
                     values: ValueReader) -> list[dict[str, Any]]:
    """Rows for the first screen's lost-write table; times are seconds into the run.

    Each row: partition, offset, value (as JSON text), acked_s, acked_fault, and when it
    disappeared: gone_from_s (the last sighting: its acknowledgement or a later read of it),
    gone_to_s (the first op that showed something else at its offset, or the final read that
    missed it; None if neither exists), gone_fault (the faults active in between) and gone_by
    (that op, in words).
    """
    wanted: dict[tuple[str, str], list[dict[str, Any]]] = {}
    rows = []
    for ex in examples:
        send = ex.get("send") if isinstance(ex.get("send"), dict) else {}
        acked_s = (send.get("time") or 0) / 1e9
        key, offset = ex.get("key"), ex.get("offset")
        row = {"partition": key, "offset": offset, "value": _cut(json.dumps(ex.get("value"), default=str), 80), "raw_value": ex.get("value"),
               "acked_s": acked_s, "acked_fault": fault_at(windows, acked_s),
               "gone_from_s": acked_s, "gone_to_s": None, "gone_by": "", "gone_fault": ""}
        rows.append(row)
        wanted.setdefault((_norm(key), _norm(offset)), []).append(row)
    if not rows:
        return []
    # One pass over the history: at each (partition, offset) of a lost write, which values did
    # ops see, and when? Sightings of the lost value move "last seen" on; the first other value
    # after that marks the latest moment the write can still have existed.
    final_read_s: dict[str, float] = {}
    for inv, comp in pairs:
        if comp is None or comp.type != "ok" or inv.process == NEMESIS:
            continue
        t = comp.time / 1e9
        drained = values.drained(comp)
        if drained is not None:
            final_read_s[_norm(drained[0])] = max(final_read_s.get(_norm(drained[0]), 0.0), t)
        for key, off, val, what in _sightings(comp, values):
            for row in wanted.get((_norm(key), _norm(off)), []):
                if row["gone_to_s"] is not None:
                    continue
                if val == row["raw_value"]:
                    row["gone_from_s"] = max(row["gone_from_s"], t)
                elif t >= row["gone_from_s"]:
                    row["gone_to_s"], row["gone_by"] = t, what.format(v=_cut(json.dumps(val, default=str), 80))
    for row in rows:
        if row["gone_to_s"] is None and _norm(row["partition"]) in final_read_s:
            row["gone_to_s"], row["gone_by"] = final_read_s[_norm(row["partition"])], "the final read missed it"
        if row["gone_to_s"] is not None:
            row["gone_fault"] = faults_during(windows, row["gone_from_s"], row["gone_to_s"])
        del row["raw_value"]
    return rows


def _lost_write_groups(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per (fault when acknowledged, faults while gone): usually one event lost them all."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["acked_fault"], row["gone_fault"]), []).append(row)
    out = []
    for (acked_fault, gone_fault), rs in groups.items():
        acked = sorted(r["acked_s"] for r in rs)
        when = _span(acked[0], acked[-1])
        text = f"{len(rs)} acknowledged at {when} s " + (
            f"while {acked_fault} was active" if acked_fault != "none" else "with no fault active")
        gone_to = [r["gone_to_s"] for r in rs if r["gone_to_s"] is not None]
        if gone_to:
            text += f"; gone by {max(gone_to):.2f} s, " + (
                f"under {gone_fault}" if gone_fault != "none" else "with no fault active")
        else:
            text += "; when they disappeared is not known (nothing read their offsets afterwards)"
        where = ", ".join(f"partition {r['partition']} offset {r['offset']}" for r in rs[:4])
        out.append(f"{text} ({where}{', ...' if len(rs) > 4 else ''})")
    return out


def _span(a: float, b: float) -> str:
    return f"{a:.2f}" if f"{a:.2f}" == f"{b:.2f}" else f"{a:.2f}–{b:.2f}"


def _sightings(comp, values: ValueReader):
    """(partition, offset, value, what) for each record an ok op names, as the workload's values read;
    `what` describes the sighting, with {v} for the value seen."""
    written = values.written(comp)
    if written is not None and written[1] is not None:
        yield *written, "{v} was acked at that offset later"
    what = "the final read had {v} there" if values.drained(comp) is not None else f"a {comp.f} read {{v}} there"
    for key, off, val in values.records(comp):
        yield key, off, val, what


def _fault_row(r) -> dict[str, Any]:
    """One row of the report's fault ledger: what was asked, whether it happened, was seen, was undone."""
    def mark(ok: Any, why: Any, evidence: dict[str, Any]) -> str:
        if ok is True:
            return "yes" + (f": {readable(evidence)}" if evidence else "")
        if ok is False:
            return f"NO: {why}"
        return "—"
    return {"id": r.id, "fault": r.fault, "nodes": ", ".join(r.nodes), "by": r.by,
            "applied": mark(r.applied, r.apply_error, {}), "observed": mark(r.observed, r.observe_error, r.evidence),
            "healed": mark(r.healed, r.heal_error, r.heal_evidence) if r.applied else "—",
            "from_s": r.t_applied / 1e9 if r.t_applied is not None else None,
            "to_s": r.t_healed / 1e9 if r.t_healed is not None else None}


def _norm(x: Any) -> str:
    # Poll results key partitions by string ("0"), sends by number (0); compare them as text.
    return str(x)


def readable(value: Any) -> str:
    """Evidence as text a person reads, never cut mid-string: a table as "key: value; ...", a list as
    "a, b", a node's probe answers as they are."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {readable(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        inner = ", ".join(readable(v) for v in value)
        return f"[{inner}]" if any(isinstance(v, (dict, list, tuple)) for v in value) else inner
    return str(value)


def _cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many more there are (said, not hidden)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters in the raw view)"


def system_under_test(test: dict[str, Any]) -> tuple[str, str]:
    """(its name for the title, one line on what it is): a cluster file's system by the versions its nodes
    reported (test.json node_versions), else our reference broker and its variant."""
    versions = test.get("node_versions") if isinstance(test.get("node_versions"), dict) else {}
    if versions or isinstance(test.get("cluster_file"), dict):
        said = sorted({str(v.get("command")) for v in versions.values() if isinstance(v, dict) and v.get("command")})
        apis = sorted({str(v.get("api_versions")) for v in versions.values() if isinstance(v, dict)
                       and v.get("api_versions")})
        name = ", ".join(said) or "a Kafka-protocol system"
        file = Path(str(test.get("cluster") or "cluster file")).name
        # A system we did not build writes no protocol trace and no state dumps: its verdict rests on what the
        # clients saw, and the reader of a valid run should know that much was not looked at.
        return name, (f"{name} ({len(versions)} node(s), described by {file}"
                      + (f"; its brokers answer the Kafka API of {', '.join(apis)}" if apis else "") + "); judged by "
                      "the client-side checkers only: the trace and replica checkers need the reference broker's "
                      "protocol trace and state dumps")
    variant = test.get("broker_variant") or "default"
    name = "the reference broker" + (f" ({variant})" if variant != "default" else "")
    harness = (test.get("versions") or {}).get("kafkaesque-harness", "")
    return name, (f"{name} {harness}, {test.get('brokers', '?')} brokers and {test.get('controllers', 1)} "
                  f"controller(s) on the {test.get('cluster', '?')} cluster, flush policy "
                  f"{test.get('flush_policy', 'never')}, acks={test.get('acks', 'all')}, min ISR {test.get('min_isr', '?')}")


TARGET_WORDS = {"mixed": "each on a random node, the leader, a minority, a majority or every broker",
                "random-node": "each on a random node", "leader": "each on a partition's leader",
                "controller": "each on the active controller", "minority": "each on a minority of the brokers",
                "majority": "each on a majority of the brokers", "all": "each on every broker"}


def fault_plan_in_words(test: dict[str, Any]) -> str:
    """The run's faults as a sentence: which, how often, on whom; a scenario or the protocol nemesis by name."""
    names = [str(n) for n in test.get("nemesis") or []]
    if not names:
        return "none: the run tests the system without faults"
    driven = [n for n in names if n.startswith("scenario:") or n == "protocol"]
    random_faults = [n for n in names if n not in driven]
    parts = [("the protocol nemesis's role-aware moves and flaw sequences" if n == "protocol"
              else f"the scenario {n.removeprefix('scenario:')}") for n in driven]
    if random_faults:
        schedule = ("one at a time" if test.get("nemesis_schedule") == "sequential" else
                    "overlapping")
        target = str(test.get("nemesis_target") or "mixed")
        # On a one-broker system every target is that broker: "a minority, a majority or every broker" of one
        # node reads as nonsense.
        on_whom = "each on the only broker" if test.get("brokers") == 1 else TARGET_WORDS.get(target, f"on {target}")
        parts.append(f"{', '.join(random_faults)} at random ({schedule}), a start or a stop about every "
                     f"{float(test.get('nemesis_interval') or 10):g} s, {on_whom}")
    return "; with ".join(parts) if driven and random_faults else "; ".join(parts)


def _ops_in(example: dict[str, Any]):
    """Op dicts inside an anomaly example, wherever the checker put them."""
    for key in ("op", "invoke", "completion", "send", "read", "ops", "reads", "sends"):
        v = example.get(key)
        if isinstance(v, dict) and "type" in v and "f" in v:
            yield v
        elif isinstance(v, list):
            for o in v:
                if isinstance(o, dict) and "type" in o and "f" in o:
                    yield o


_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          autoescape=True)


def _markup_or_none(svg: str | None) -> jinja2.utils.markupsafe.Markup | None:
    # cycle_svg escapes every text it writes, so its SVG goes into the page as markup.
    return jinja2.utils.markupsafe.Markup(svg) if svg is not None else None


def _script_json(obj: Any) -> str:
    # Safe inside <script>: no "</script>" or "<!--" can close or confuse the element.
    return json.dumps(obj, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _as_shown(test: dict[str, Any]) -> dict[str, Any]:
    """test.json as the report shows it: the run and its store named by their place and name, not by the
    absolute paths of the machine that ran it (the report travels, archived with the store or alone)."""
    shown = dict(test)
    if shown.get("run_dir"):
        shown["run_dir"] = store_relative(shown["run_dir"])
    if shown.get("store"):
        shown["store"] = Path(shown["store"]).name
    if isinstance(shown.get("cluster_file"), dict) and shown["cluster_file"].get("path"):
        shown["cluster_file"] = {**shown["cluster_file"], "path": Path(shown["cluster_file"]["path"]).name}
    return shown


def render_report(run_dir: str | os.PathLike, history: list[Op] | None = None) -> Path:
    """Write <run_dir>/report.html from test.json, history.jsonl and results.json; return its path.
    `history`: the run's history when the caller has read it already (the runner, after its checks)."""
    run = Path(run_dir)
    test = json.loads((run / "test.json").read_text()) if (run / "test.json").exists() else {}
    results = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    if history is None:
        history = read_history(run / "history.jsonl") if (run / "history.jsonl").exists() else []
    values = value_reader(test.get("workload") or "queue")
    pairs = pair_ops(history)
    end_s = max((op.time for op in history), default=0) / 1e9
    windows = fault_windows(history)
    latency, throughput = _latency_and_throughput(pairs, windows, end_s, values)
    reached = results.get("reached") if isinstance(results.get("reached"), dict) else {}
    plots = {"latency": latency, "throughput": throughput, "offsets": _offsets(pairs, windows, end_s, values),
             "timeline": _timeline(pairs, end_s, reached)}
    node_logs = sorted(str(p.relative_to(run)) for p in (run / "nodes").rglob("*") if p.is_file()) \
        if (run / "nodes").exists() else []
    counts = defaultdict(int)
    for op in history:
        if op.process != NEMESIS and op.type != INVOKE:
            counts[op.type] += 1
    from plotly.offline import get_plotlyjs

    html = _ENV.get_template("report.html.j2").render(
        test=test, results=results, valid=results.get("valid", "unknown"),
        sut=system_under_test(test), fault_plan=fault_plan_in_words(test),
        availability=availability_sentence(results["availability"] if isinstance(results.get("availability"), dict)
                                           else availability(history, float(test.get("time_limit") or end_s), [
                                               w for w in results.get("harness_warnings") or []
                                               if ": client open failed: " in str(w)])),
        anomalies=_anomaly_sections(results, windows), windows=windows, node_logs=node_logs,
        faults=[_fault_row(r) for r in fault_records(history)], reached=reached, state_meaning=STATES,
        unknown_reasons=[str(x) for x in results.get("unknown_reasons") or []],
        summary=first_screen_summary(results, pairs, windows, values),
        counts=dict(counts), n_ops=len(history), duration=f"{end_s:.1f}",
        test_json=json.dumps(_as_shown(test), indent=2, default=str),
        plots_json=_script_json(plots), plotly_js=jinja2.utils.markupsafe.Markup(get_plotlyjs()),
    )
    out = run / "report.html"
    write_atomically(out, html)
    return out
