"""Partition shapes: each grudge cuts exactly what its name says."""

import random

import pytest

from kafkaesque_harness.nemesis import grudge

NODES = ["n1", "n2", "n3", "n4", "n5"]


def _symmetric(g):
    return all(a in g.get(b, set()) for a, bs in g.items() for b in bs)


def test_isolate_cuts_one_node_from_all_others_both_ways():
    g = grudge.isolate(NODES, "n3")
    assert g["n3"] == {"n1", "n2", "n4", "n5"}
    assert all(g[n] == {"n3"} for n in NODES if n != "n3")


def test_halves_is_a_minority_and_a_majority():
    g = grudge.halves(NODES, random.Random(1))
    sizes = sorted({len(v) for v in g.values()})
    assert sizes == [2, 3] and _symmetric(g)


def test_bridge_node_sees_everyone_and_halves_do_not_see_each_other():
    g = grudge.bridge(NODES, random.Random(2))
    bridges = [n for n, v in g.items() if not v]
    assert len(bridges) == 1
    assert _symmetric(g) and all(len(v) == 2 for n, v in g.items() if n not in bridges)


def test_majorities_ring_every_node_sees_a_distinct_majority():
    g = grudge.majorities_ring(NODES, random.Random(3))
    seen = {n: frozenset(set(NODES) - v) for n, v in g.items()}
    assert all(len(s) == 3 for s in seen.values())
    assert len(set(seen.values())) == len(NODES)
    assert _symmetric(g)


def test_one_way_only_the_target_drops():
    g = grudge.one_way(NODES, "n1")
    assert g == {"n1": {"n2", "n3", "n4", "n5"}}


def test_bad_target_is_one_clear_error():
    with pytest.raises(ValueError, match="not one of"):
        grudge.isolate(NODES, "n9")
    with pytest.raises(ValueError, match="at least 3"):
        grudge.bridge(["a", "b"], random.Random(0))
