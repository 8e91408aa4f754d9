"""The per-run HTML report: one self-contained file (plotly.js and styles embedded; opens with no network).

Order of the page, for a reader who has one screen: the verdict and the reasons first
(each anomaly with the acknowledged writes it concerns, the fault that was active, and
when), then the plots with the fault windows shaded (latency, throughput, per-partition
offsets), the ops timeline per process, the test spec, and links to node logs.

Every value that comes from a history or a broker is escaped: jinja2's autoescape for
HTML, and JSON embedded in <script> with "<" escaped, since a broker can return anything.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from harness.history import INVOKE, NEMESIS, Op, pair_ops, read_history

MAX_TIMELINE_OPS = 4000  # beyond this the timeline shows the first ops only (the page stays usable)
MAX_SCATTER_POINTS = 60000


@dataclass
class FaultWindow:
    name: str
    start_s: float
    end_s: float | None  # None: never healed inside the history
    detail: str


def fault_windows(history: list[Op]) -> list[FaultWindow]:
    """Pair each nemesis start-X with the next stop-X; the window is the fault's active time."""
    open_faults: dict[str, tuple[float, str]] = {}
    windows: list[FaultWindow] = []
    for op in history:
        if op.process != NEMESIS or op.type == INVOKE:
            continue
        f = op.f
        t = op.time / 1e9
        if f.startswith("start-"):
            open_faults[f[6:]] = (t, json.dumps(op.value, default=str)[:200])
        elif f.startswith("stop-") and f[5:] in open_faults:
            start, detail = open_faults.pop(f[5:])
            windows.append(FaultWindow(f[5:], start, t, detail))
    for name, (start, detail) in open_faults.items():
        windows.append(FaultWindow(name, start, None, detail))
    return sorted(windows, key=lambda w: w.start_s)


def fault_at(windows: list[FaultWindow], t_s: float) -> str:
    active = [w.name for w in windows if w.start_s <= t_s and (w.end_s is None or t_s <= w.end_s)]
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


def _latency_and_throughput(pairs, windows, end_s):
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
                                              "symbol": "circle" if f == "send" else "diamond"}}
              for (f, t), v in sorted(by_key.items())]
    latency = {"data": traces, "layout": {"title": "Latency (ms) by op, coloured by outcome",
                                           "xaxis": {"title": "time (s)"},
                                           "yaxis": {"title": "latency (ms)", "type": "log"},
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
                          "line": {"color": colours.get(t, "#555"), "dash": "solid" if f == "send" else "dot"}})
    throughput = {"data": tp_traces, "layout": {"title": "Throughput (completions per second)",
                                                "xaxis": {"title": "time (s)"}, "yaxis": {"title": "ops/s"},
                                                "shapes": _shapes(windows, end_s), "height": 320}}
    return latency, throughput


def _offsets(pairs, windows, end_s):
    """Per partition: the offsets acknowledged sends got over time, and the final HWM."""
    sends: dict[str, dict[str, list]] = defaultdict(lambda: {"x": [], "y": []})
    hwm: dict[str, tuple[float, int]] = {}
    for inv, comp in pairs:
        if comp is None or comp.type != "ok":
            continue
        v = comp.value
        if inv.f == "send" and isinstance(v, list) and len(v) == 2 and isinstance(v[1], list):
            s = sends[str(v[0])]
            s["x"].append(round(comp.time / 1e9, 4))
            s["y"].append(v[1][0])
        elif inv.f == "final-poll" and isinstance(v, list) and len(v) == 3:
            hwm[str(v[0])] = (comp.time / 1e9, v[1])
    traces = [{"type": "scattergl", "mode": "markers", "name": f"partition {k} acked offset",
               "x": d["x"][:MAX_SCATTER_POINTS], "y": d["y"][:MAX_SCATTER_POINTS], "marker": {"size": 3}}
              for k, d in sorted(sends.items())]
    for k, (t, h) in sorted(hwm.items()):
        traces.append({"type": "scatter", "mode": "markers+text", "name": f"partition {k} final HWM",
                       "x": [t], "y": [h], "text": [f"HWM {h}"], "textposition": "top center",
                       "marker": {"size": 10, "symbol": "x"}})
    return {"data": traces, "layout": {"title": "Offsets acknowledged per partition, and the final HWM",
                                       "xaxis": {"title": "time (s)"}, "yaxis": {"title": "offset"},
                                       "shapes": _shapes(windows, end_s), "height": 340}}


def _timeline(pairs, end_s):
    """Jepsen's timeline.html in plotly: one row per process, one bar per op."""
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
    n_proc = len({y for r in rows.values() for y in r["y"]})
    return {"data": data, "layout": {"title": f"Timeline (first {shown} ops, one row per process)",
                                     "barmode": "overlay", "xaxis": {"title": "time (s)"},
                                     "yaxis": {"title": "process", "type": "category"},
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
                    "ops": [{"index": o.get("index"), "time_s": f"{o.get('time', 0) / 1e9:.3f}",
                             "process": o.get("process"), "type": o.get("type"), "f": o.get("f"),
                             "value": json.dumps(o.get("value"), default=str)[:300],
                             "fault": fault_at(windows, o.get("time", 0) / 1e9)} for o in ops],
                    "raw": json.dumps(ex, default=str, indent=1)[:4000],
                })
            sections.append({"checker": cname, "name": a.get("name"), "count": a.get("count"),
                             "explanation": a.get("explanation", ""), "examples": examples})
        details = r.get("details") or {}
        for key in ("counterexample", "cycles"):
            if key in details:
                sections.append({"checker": cname, "name": key, "count": "", "explanation":
                                 details.get(f"{key}_text") or "", "examples": [{"summary": "", "ops": [],
                                 "raw": json.dumps(details[key], default=str, indent=1)[:20000]}]})
    return sections


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


def _script_json(obj: Any) -> str:
    # Safe inside <script>: no "</script>" or "<!--" can close or confuse the element.
    return json.dumps(obj, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_report(run_dir: str | os.PathLike) -> Path:
    """Write <run_dir>/report.html from test.json, history.jsonl and results.json; return its path."""
    run = Path(run_dir)
    test = json.loads((run / "test.json").read_text()) if (run / "test.json").exists() else {}
    results = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    history = read_history(run / "history.jsonl") if (run / "history.jsonl").exists() else []
    pairs = pair_ops(history)
    end_s = max((op.time for op in history), default=0) / 1e9
    windows = fault_windows(history)
    latency, throughput = _latency_and_throughput(pairs, windows, end_s)
    plots = {"latency": latency, "throughput": throughput, "offsets": _offsets(pairs, windows, end_s),
             "timeline": _timeline(pairs, end_s)}
    node_logs = sorted(str(p.relative_to(run)) for p in (run / "nodes").rglob("*") if p.is_file()) \
        if (run / "nodes").exists() else []
    counts = defaultdict(int)
    for op in history:
        if op.process != NEMESIS and op.type != INVOKE:
            counts[op.type] += 1
    from plotly.offline import get_plotlyjs

    html = _ENV.get_template("report.html.j2").render(
        test=test, results=results, valid=results.get("valid", "unknown"),
        anomalies=_anomaly_sections(results, windows), windows=windows, node_logs=node_logs,
        counts=dict(counts), n_ops=len(history), duration=f"{end_s:.1f}",
        test_json=json.dumps(test, indent=2, default=str),
        plots_json=_script_json(plots), plotly_js=jinja2.utils.markupsafe.Markup(get_plotlyjs()),
    )
    out = run / "report.html"
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(html)
    os.replace(tmp, out)
    return out
