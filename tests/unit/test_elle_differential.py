"""The list-append checker against the one it replaced (tests/unit/elle_reference.py, issue 44): on many
seeded random small histories, each with injected anomalies of every kind Elle names (G0, G1a, G1b, G1c,
G-single, G2-item, incompatible order, duplicates, internal), under every consistency model, the two give
the same result, verdict and anomalies with their counts, examples and words alike. And the same check fed
a history file's rows (the stream `kafkaesque check` uses) gives what the check of the history in memory
gives."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import pytest

from kafkaesque_harness.checkers.elle import ElleListAppendChecker, check_list_append
from kafkaesque_harness.checkers.stream import InFile
from kafkaesque_harness.history import HistoryFile, Op, read_history
from tests.unit import elle_reference

MODEL_SETS = (["strict-serializable"], ["serializable"], ["snapshot-isolation"], ["read-committed"],
              ["repeatable-read", "snapshot-isolation"])


class _Builder:
    """A history of transactions executed one at a time in a chosen order (so serializable unless an
    injection breaks it), invoked in batches that complete in a shuffled order."""

    def __init__(self, rng: random.Random, keys: int):
        self.rng = rng
        self.keys = list(range(keys))
        self.lists: dict[int, list[int]] = {k: [] for k in self.keys}
        self.values = itertools.count(1)
        self.txns: list[dict] = []  # {"mops": [...], "type": ...}
        self.fresh_keys = itertools.count(1000)

    def run(self, mops_spec: list[tuple], type_: str = "ok") -> dict:
        """Execute one transaction now: ("append", k) appends a fresh value, ("r", k) reads the list."""
        mops = []
        for f, k in mops_spec:
            if f == "append":
                v = next(self.values)
                if type_ != "fail":
                    self.lists.setdefault(k, []).append(v)
                mops.append(["append", k, v])
            else:
                mops.append(["r", k, list(self.lists.setdefault(k, []))])
        txn = {"mops": mops, "type": type_}
        self.txns.append(txn)
        return txn

    def random_txn(self) -> dict:
        spec = [(self.rng.choice(["append", "append", "r"]), self.rng.choice(self.keys))
                for _ in range(self.rng.randint(1, 4))]
        return self.run(spec, self.rng.choice(["ok"] * 10 + ["info", "fail"]))

    def ops(self, batch: int) -> list[Op]:
        """Invocations of a batch, then its completions in a shuffled order; process p runs the p-th
        transaction of every batch (so process order links the batches)."""
        out: list[Op] = []
        clock = 0
        for start in range(0, len(self.txns), batch):
            group = list(enumerate(self.txns[start:start + batch]))
            for p, txn in group:
                clock += 1
                out.append(Op("invoke", "txn", p, [[f, k, None if f == "r" else v] for f, k, v in txn["mops"]],
                              time=clock))
            self.rng.shuffle(group)
            for p, txn in group:
                clock += 1
                out.append(Op(txn["type"], "txn", p, txn["mops"], time=clock))
        for i, op in enumerate(out):
            op.index = i
        return out


def _g0(b: _Builder) -> None:
    x, y = next(b.fresh_keys), next(b.fresh_keys)
    t1 = b.run([("append", x), ("append", y)])
    t2 = b.run([("append", x), ("append", y)])
    (_, _, x1), (_, _, y1) = t1["mops"]
    (_, _, x2), (_, _, y2) = t2["mops"]
    b.run([("r", x)])["mops"][0][2] = [x1, x2]
    b.run([("r", y)])["mops"][0][2] = [y2, y1]  # y was appended by T2 first: a write cycle


def _g1a(b: _Builder) -> None:
    k = next(b.fresh_keys)
    failed = b.run([("append", k)], "fail")
    b.run([("r", k)])["mops"][0][2] = [failed["mops"][0][2]]


def _g1b(b: _Builder) -> None:
    k = next(b.fresh_keys)
    twice = b.run([("append", k), ("append", k)])
    b.run([("r", k)])["mops"][0][2] = [twice["mops"][0][2]]  # the first of its two appends


def _g1c(b: _Builder) -> None:
    x, y = next(b.fresh_keys), next(b.fresh_keys)
    t1 = b.run([("append", x), ("r", y)])
    t2 = b.run([("append", y), ("r", x)])
    t1["mops"][1][2] = [t2["mops"][0][2]]  # each read the other's write
    b.run([("r", y)])


def _g_single(b: _Builder) -> None:
    x, y = next(b.fresh_keys), next(b.fresh_keys)
    t1 = b.run([("r", x), ("r", y)])
    t2 = b.run([("append", x), ("append", y)])
    t1["mops"][1][2] = [t2["mops"][1][2]]  # saw T2's y but not its x
    b.run([("r", x)])


def _g2(b: _Builder) -> None:
    x, y = next(b.fresh_keys), next(b.fresh_keys)
    b.run([("r", x), ("append", y)])
    b.run([("r", y), ("append", x)])["mops"][0][2] = []  # each missed the other's append: write skew
    b.run([("r", x), ("r", y)])


def _incompatible(b: _Builder) -> None:
    k = next(b.fresh_keys)
    b.run([("append", k)])
    b.run([("append", k)])
    read = b.run([("r", k)])
    b.run([("r", k)])["mops"][0][2] = list(reversed(read["mops"][0][2]))


def _duplicate(b: _Builder) -> None:
    k = next(b.fresh_keys)
    b.run([("append", k)])
    read = b.run([("r", k)])
    read["mops"][0][2] = read["mops"][0][2] * 2


def _internal(b: _Builder) -> None:
    k = next(b.fresh_keys)
    b.run([("append", k)])
    own = b.run([("append", k), ("r", k)])
    own["mops"][1][2] = own["mops"][1][2][:-1]  # did not see its own append


INJECTIONS = {"G0": _g0, "G1a": _g1a, "G1b": _g1b, "G1c": _g1c, "G-single": _g_single, "G2-item": _g2,
              "incompatible-order": _incompatible, "duplicate-elements": _duplicate, "internal": _internal}


def _stale_reads(rng: random.Random, ops: list[Op], share: float) -> None:
    """Cut some completed reads short: anti-dependencies that point back, cycles of the -realtime and
    -process kinds among them."""
    for op in ops:
        if op.type == "ok":
            for mop in op.value:
                if mop[0] == "r" and mop[2] and rng.random() < share:
                    mop[2] = mop[2][:rng.randrange(len(mop[2]))]


def random_history(seed: int) -> tuple[list[Op], list[str]]:
    """A random history and the anomalies injected in it (that it must show)."""
    rng = random.Random(seed)
    b = _Builder(rng, keys=rng.randint(2, 5))
    injected = rng.sample(sorted(INJECTIONS), rng.randint(0, 3))
    plan = [None] * rng.randint(8, 40) + injected
    rng.shuffle(plan)
    for step in plan:
        if step is None:
            b.random_txn()
        else:
            INJECTIONS[step](b)
    ops = b.ops(batch=rng.randint(1, 5))
    if rng.random() < 0.4:
        _stale_reads(rng, ops, share=0.2)
        injected = []  # a cut read may have undone an injection (or made another anomaly)
    if rng.random() < 0.1:  # a clock that went back: completions before their invocations
        for op in ops:
            if op.type != "invoke" and rng.random() < 0.2:
                op.time -= rng.randint(1, 20)
    elif rng.random() < 0.1:  # times that are no int64 (the checker's arrays fall back to lists)
        for op in ops:
            op.time = op.time + 0.5 if rng.random() < 0.5 else op.time + (1 << 70)
    return ops, injected


def _result(r) -> dict:
    return json.loads(json.dumps(r.to_dict(), default=repr))


def test_the_new_checker_gives_the_old_ones_results_on_random_histories_with_every_anomaly():
    seen: Counter[str] = Counter()
    for seed in range(400):
        h, injected = random_history(seed)
        for models in MODEL_SETS:
            new = check_list_append(h, models)
            old = elle_reference.check_list_append(h, models)
            assert _result(new) == _result(old), (seed, models)
            seen.update(a.name for a in new.anomalies)
        caught = {a.name for a in check_list_append(h, ["strict-serializable"]).anomalies}
        for name in injected:  # each injection is found (G2-item may be named as the cycle that holds it)
            assert name in caught or (name == "G2-item" and caught & {"G2-item-realtime", "G-single"}), (seed, name)
    # the histories exercise every kind, and the verdicts both ways
    assert set(INJECTIONS) <= set(seen), seen
    assert any(name.endswith("-realtime") for name in seen) and any(name.endswith("-process") for name in seen), seen


def test_the_differential_histories_hold_valid_ones_too():
    verdicts = Counter(check_list_append(random_history(seed)[0], ["serializable"]).valid for seed in range(200))
    assert verdicts[True] > 20 and verdicts[False] > 20, verdicts


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_a_history_file_streamed_gives_the_result_of_the_history_in_memory(tmp_path, seed):
    h, _ = random_history(seed)
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(op.to_dict()) + "\n" for op in h))
    checker = ElleListAppendChecker(["strict-serializable"])
    ops = InFile(HistoryFile(path))
    reader = checker.stream({}, None, ops)
    for inv, comp in ops.pairs():
        reader.feed(inv, comp)
    # against the file read whole (the reader reads an int beyond 64 bits as a float: the same either way)
    assert _result(reader.result()) == _result(check_list_append(read_history(path), ["strict-serializable"]))
