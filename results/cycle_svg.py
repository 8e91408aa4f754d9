"""A dependency cycle drawn for the report: one small inline SVG per cycle anomaly example.

An example carries "cycle" (transaction ids, closed: first == last), "edges" ([from, to, kind] per
step, the kind the checker's words name: checkers/elle.py and checkers/txn.py), "steps" (one
sentence per edge) and "ops" (the transactions' ops in the cycle's order, the first few). The
transactions sit on a circle in the cycle's order, each a labelled node whose tooltip is its op;
each step is an arrow to the next, labelled with its kind, its tooltip the step's sentence. An
edge whose kind the example does not give (a results.json from before "edges") is drawn unlabelled:
the kinds are the checker's, never guessed here.

Everything is computed here and written as SVG text, with no script, no ids (many drawings share
one page) and no external reference, so the report stays one file that opens with no network.
Every text that comes from a history (ids, kinds, ops, sentences) is XML-escaped.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from kafkaesque_harness.checkers.elle import PROCESS, REALTIME, RW, WR, WW

MAX_DRAWN = 12  # nodes on the circle; a longer cycle shows its first MAX_DRAWN - 1 and one node for the rest
TOOLTIP_CHARS = 240
MAX_LABEL_CHARS = 16  # a node's or edge's label longer than this (not one of ours) is cut; its tooltip keeps it whole

# Anti-dependencies dashed, as in Adya's and Elle's drawings; the orders (process, real time) grey and dotted.
_KIND_STYLE = {WW: ("#c62828", ""), WR: ("#1565c0", ""), RW: ("#ef6c00", "6 4"),
               PROCESS: ("#616161", "2 3"), REALTIME: ("#2e7d32", "2 3")}
_OTHER_KIND = ("#616161", "")

_FONT = 'font-family="system-ui, sans-serif"'
_NODE_RY = 15
_ARROW_LENGTH, _ARROW_HALF_WIDTH = 10, 4.5


def cycle_svg(example: dict[str, Any]) -> str | None:
    """The SVG text of `example`'s cycle, or None when it carries no cycle of two or more transactions."""
    cycle = example.get("cycle")
    if not isinstance(cycle, list) or len(cycle) < 2:
        return None
    ids = cycle[:-1] if cycle[0] == cycle[-1] else list(cycle)
    if len(ids) < 2:
        return None
    nodes, arrows, note = _drawn(ids, example)
    return _render(nodes, arrows, note, " → ".join(f"T{i}" for i in [*ids, ids[0]]))


def _drawn(ids: list[Any], example: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """What to draw: nodes as (label, tooltip), arrows as (kind, tooltip) from node i to node i + 1
    (the last back to the first), and the note saying how much of the cycle was left out."""
    kinds = {}
    for edge in example.get("edges") or []:
        if isinstance(edge, list) and len(edge) == 3:
            kinds[(_key(edge[0]), _key(edge[1]))] = str(edge[2])
    steps = example.get("steps") if isinstance(example.get("steps"), list) else []
    ops = [o for o in example.get("ops") or [] if isinstance(o, dict)]

    def node(n: int) -> tuple[str, str]:
        label = f"T{ids[n]}"
        return _cut(label, MAX_LABEL_CHARS), f"{label}: {_op_text(ops[n])}" if n < len(ops) else label

    def arrow(n: int) -> tuple[str, str]:
        a, b = ids[n], ids[(n + 1) % len(ids)]
        step = str(steps[n]) if len(steps) == len(ids) else f"T{a} → T{b}"
        return kinds.get((_key(a), _key(b)), ""), _cut(step, TOOLTIP_CHARS)

    if len(ids) <= MAX_DRAWN:
        return [node(n) for n in range(len(ids))], [arrow(n) for n in range(len(ids))], ""
    shown = MAX_DRAWN - 1
    hidden = ids[shown:]
    rest = (f"{len(hidden)} more transactions: " + ", ".join(f"T{i}" for i in hidden[:20])
            + (", ..." if len(hidden) > 20 else ""))
    nodes = [node(n) for n in range(shown)] + [(f"+{len(hidden)} more", rest)]
    # Into the stand-in: the real edge into the first hidden transaction; out of it, the edge that closes the cycle.
    arrows = [arrow(n) for n in range(shown)] + [arrow(len(ids) - 1)]
    note = (f"A cycle of {len(ids)} transactions: the first {shown} are drawn and one node stands for the other "
            f"{len(hidden)}; the steps name them all.")
    return nodes, arrows, note


def _key(x: Any) -> str:
    # Ids compare as text: JSON keeps ints, but another checker may give them as strings.
    return str(x)


def _op_text(op: dict[str, Any]) -> str:
    return _cut(f"op #{op.get('index')}, process {op.get('process')}, {op.get('type')} {op.get('f')} "
                + json.dumps(op.get("value"), default=str), TOOLTIP_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _render(nodes: list[tuple[str, str]], arrows: list[tuple[str, str]], note: str, aria: str) -> str:
    k = len(nodes)
    half_widths = [max(20.0, 7 + 4.3 * len(label)) for label, _ in nodes]
    # Neighbours far enough apart for an arrow and its label between them.
    radius = max(60.0, (2 * max(half_widths) + 70) / (2 * math.sin(math.pi / k)))
    at = [(radius * math.cos(-math.pi / 2 + 2 * math.pi * n / k), radius * math.sin(-math.pi / 2 + 2 * math.pi * n / k))
          for n in range(k)]
    boxes = [(x - rx, y - _NODE_RY, x + rx, y + _NODE_RY) for (x, y), rx in zip(at, half_widths, strict=True)]
    body = []
    for n, (kind, tooltip) in enumerate(arrows):
        m = (n + 1) % k
        svg, label_box = _arrow(at[n], half_widths[n], at[m], half_widths[m], kind, tooltip,
                                bow=0.3 if k == 2 else 0.15)
        body.append(svg)
        boxes.append(label_box)
    for (label, tooltip), (x, y), rx in zip(nodes, at, half_widths, strict=True):
        body.append(f'<g class="txn"><title>{escape(tooltip)}</title>'
                    f'<ellipse cx="{x:.1f}" cy="{y:.1f}" rx="{rx:.1f}" ry="{_NODE_RY}" fill="#fff8e1" '
                    f'stroke="#5d4037" stroke-width="1.5"/>'
                    f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle" dominant-baseline="central" '
                    f'font-size="13" font-weight="600" {_FONT}>{escape(label)}</text></g>')
    pad = 10
    left, top = min(b[0] for b in boxes) - pad, min(b[1] for b in boxes) - pad
    right, bottom = max(b[2] for b in boxes) + pad, max(b[3] for b in boxes) + pad
    if note:
        # Two short lines, so the note fits under even the smallest capped drawing.
        first, _, second = note.partition("; ")
        body.append(f'<text class="cycle-note" x="{left + pad:.1f}" y="{bottom + 8:.1f}" font-size="12" fill="#555" '
                    f'{_FONT}><tspan>{escape(first)};</tspan><tspan x="{left + pad:.1f}" dy="15">{escape(second)}'
                    f'</tspan></text>')
        bottom += 34
        right = max(right, left + 2 * pad + 6.2 * max(len(first), len(second)))
    width, height = right - left, bottom - top
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="cycle" role="img" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="{left:.1f} {top:.1f} {width:.1f} {height:.1f}" '
            f'aria-label="{escape(aria)}">' + "".join(body) + "</svg>")


def _arrow(a: tuple[float, float], a_rx: float, b: tuple[float, float], b_rx: float, kind: str, tooltip: str,
           bow: float) -> tuple[str, tuple[float, float, float, float]]:
    """A curved arrow from node a to node b, bowed outward (to its left as the cycle runs clockwise), so
    the two arrows between the nodes of a two-transaction cycle stay apart; and its label's box."""
    chord_x, chord_y = b[0] - a[0], b[1] - a[1]
    chord = math.hypot(chord_x, chord_y)
    normal = (chord_y / chord, -chord_x / chord)
    control = ((a[0] + b[0]) / 2 + normal[0] * bow * chord, (a[1] + b[1]) / 2 + normal[1] * bow * chord)
    start = _on_boundary(a, a_rx, control)
    tip = _on_boundary(b, b_rx, control, gap=2)
    towards = _unit(tip[0] - control[0], tip[1] - control[1])
    base = (tip[0] - towards[0] * _ARROW_LENGTH, tip[1] - towards[1] * _ARROW_LENGTH)
    wing = (-towards[1] * _ARROW_HALF_WIDTH, towards[0] * _ARROW_HALF_WIDTH)
    colour, dash = _KIND_STYLE.get(kind, _OTHER_KIND)
    mid = (0.25 * start[0] + 0.5 * control[0] + 0.25 * base[0], 0.25 * start[1] + 0.5 * control[1] + 0.25 * base[1])
    shown = _cut(kind, MAX_LABEL_CHARS)
    half = 3.6 * len(shown) + 3
    # The label sits outside the curve, far enough that its box clears the line.
    away = 9 + abs(normal[0]) * half
    label_at = (mid[0] + normal[0] * away, mid[1] + normal[1] * away)
    label = (f'<text x="{label_at[0]:.1f}" y="{label_at[1]:.1f}" text-anchor="middle" dominant-baseline="central" '
             f'font-size="12" font-weight="600" fill="{colour}" stroke="#fff" stroke-width="3" paint-order="stroke" '
             f'{_FONT}>{escape(shown)}</text>') if shown else ""
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    svg = (f'<g class="edge"><title>{escape(tooltip)}</title>'
           f'<path d="M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} {base[0]:.1f},{base[1]:.1f}" '
           f'fill="none" stroke="{colour}" stroke-width="1.8"{dashes}/>'
           f'<polygon points="{tip[0]:.1f},{tip[1]:.1f} {base[0] + wing[0]:.1f},{base[1] + wing[1]:.1f} '
           f'{base[0] - wing[0]:.1f},{base[1] - wing[1]:.1f}" fill="{colour}"/>{label}</g>')
    return svg, (label_at[0] - half, label_at[1] - 8, label_at[0] + half, label_at[1] + 8)


def _on_boundary(centre: tuple[float, float], rx: float, towards: tuple[float, float],
                 gap: float = 0.0) -> tuple[float, float]:
    """Where the line from a node's centre towards a point leaves the node's ellipse (plus `gap`)."""
    ux, uy = _unit(towards[0] - centre[0], towards[1] - centre[1])
    reach = 1 / math.sqrt((ux / rx) ** 2 + (uy / _NODE_RY) ** 2) + gap
    return centre[0] + ux * reach, centre[1] + uy * reach


def _unit(x: float, y: float) -> tuple[float, float]:
    length = math.hypot(x, y) or 1.0
    return x / length, y / length
