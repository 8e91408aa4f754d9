"""The graph core of the dependency checkers: edge kinds, real-time edges through a frontier, strongly
connected components, and the cycle search over an edge-kind subgraph. Elle keeps the same machinery
(graph.clj, core.clj) apart from the workloads that use it; here checkers/elle.py (list-append) and
checkers/txn.py (Kafka transactions) both stand on it, and neither reaches into the other.

A graph is networkx's DiGraph whose edges carry {"kinds": {kind: why}}; transactions are anything with
`id`, `type`, `inv` and `comp` ops (real-time order only needs their times).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from kafkaesque_harness.history import OK

WW, WR, RW, PROCESS, REALTIME = "ww", "wr", "rw", "process", "realtime"
KIND_BIT = {WW: 1, WR: 2, RW: 4, PROCESS: 8, REALTIME: 16}
_END = object()  # an iterator's end, in cycle_in's walk


def realtime_edges(txns: list[Any], edge) -> None:
    """T1 completed before T2 was invoked. Through a frontier of the latest completions, as Elle
    does, so the edge count stays near-linear. (Also checkers/txn.py's, for its cyclic parts.)"""
    events = []
    for t in txns:
        events.append((t.inv.time, 1, t))
        if t.type == OK:
            events.append((t.comp.time, 0, t))
    # At equal times an invocation sorts first: "before" is strict (Elle's anchors with all
    # :time 0 have no real-time order at all).
    events.sort(key=lambda e: (e[0], -e[1]))
    frontier: list[Any] = []
    for _, kind, t in events:
        if kind == 1:
            for a in frontier:
                edge(a, t, REALTIME, "completed before the other began")
        else:
            frontier = [a for a in frontier if not a.comp.time < t.inv.time] + [t]

def nontrivial_sccs(succ: dict[int, list[int]]) -> list[set[int]]:
    """Strongly connected components with two or more nodes of a graph given as node -> successors."""
    nodes = sorted(set(succ) | {b for bs in succ.values() for b in bs})
    number = {x: i for i, x in enumerate(nodes)}
    adjacency = [[number[b] for b in succ.get(x, ())] for x in nodes]
    return [{nodes[i] for i in comp} for comp in sccs(adjacency) if len(comp) > 1]


def sccs(adjacency: list[list[int]]) -> list[list[int]]:
    """Strongly connected components of a graph on nodes 0..n-1 (iterative Tarjan: no recursion
    limit; flat lists, no dicts), each listed as Tarjan pops it."""
    n = len(adjacency)
    index = [-1] * n
    low = [0] * n
    on_stack = bytearray(n)
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = 1
        work = [(root, iter(adjacency[root]))]
        while work:
            node, children = work[-1]
            for child in children:
                if index[child] < 0:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack[child] = 1
                    work.append((child, iter(adjacency[child])))
                    break
                if on_stack[child] and index[child] < low[node]:
                    low[node] = index[child]
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    if low[node] < low[parent]:
                        low[parent] = low[node]
                if low[node] == index[node]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on_stack[x] = 0
                        comp.append(x)
                        if x == node:
                            break
                    out.append(comp)
    return out

def edge_kinds(sub, a, b):
    """The edge's kinds, as a set-like view of its {kind: why} (no set built per step of a search)."""
    return sub[a][b]["kinds"].keys()


def kind_view(sub, allowed: set[str]):
    return nx.subgraph_view(sub, filter_edge=lambda a, b: bool(edge_kinds(sub, a, b) & allowed))


def kind_subgraph(sub, edges: list[tuple[int, int]], allowed: set[str]) -> nx.DiGraph:
    """The edges of `sub` with a kind in `allowed`, as a graph of their own: a search then walks plain
    adjacency dicts, where a filtered view calls its filter at every step (most of the time on Elle's
    huge-scc anchor). Nodes in `sub`'s order and `edges` in the order `sub` was given them, so each
    node's successors and predecessors come in the same order as through a view: the same cycles."""
    g = nx.DiGraph()
    g.add_nodes_from(sub)
    g.add_edges_from(e for e in edges if sub[e[0]][e[1]]["kinds"].keys() & allowed)
    return g


def cycle_in(g) -> list[int] | None:
    """The cycle networkx's find_cycle reports (the same one, so the same examples and classes), as
    [a, ..., a], or None. find_cycle walks again, from each new start, everything earlier starts
    explored and found acyclic (quadratic on a large acyclic component: seconds at a few thousand
    transactions); this walk does not enter an explored node. Skipping it changes nothing found:
    all it reaches is explored, and find_cycle ignores edges into explored nodes."""
    adj = g._adj  # each node's successors, in the order find_cycle's edge DFS takes them
    explored: set = set()
    for start in g:
        if start in explored:
            continue
        path: list[tuple[Any, Any]] = []  # find_cycle's active path, as edges
        seen, active, previous_head = {start}, {start}, None
        successors = {start: iter(adj[start])}
        stack = [start]
        while stack:
            tail = stack[-1]
            head = next(successors[tail], _END)
            if head is _END:
                stack.pop()
                continue
            if head in explored:
                continue
            stack.append(head)
            if head not in successors:
                successors[head] = iter(adj[head])
            if previous_head is not None and tail != previous_head:
                # backtracked: pop the path back to the edge that ends at this tail
                while True:
                    if not path:
                        active = {tail}
                        break
                    active.remove(path.pop()[1])
                    if path and path[-1][1] == tail:
                        break
            path.append((tail, head))
            if head in active:
                first = next(i for i, (a, _) in enumerate(path) if a == head)
                cycle = [a for a, _ in path[first:]]
                return cycle + [cycle[0]]
            seen.add(head)
            active.add(head)
            previous_head = head
        explored |= seen
    return None


def rw_count(sub, cyc: list[int], extra: set[str] = frozenset()) -> int:
    """Anti-dependencies the cycle needs: steps with no ww/wr (or allowed extra) edge."""
    return sum(1 for x, y in zip(cyc, cyc[1:], strict=False) if not edge_kinds(sub, x, y) & ({WW, WR} | extra))
