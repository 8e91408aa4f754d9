"""Reading a large Jepsen EDN history: the fast reader of checkers/formats/edn.py against edn_format alone.

    .venv/bin/python benchmarks/bench_edn_reader.py [--ops 100000] [--edn-format-sample 2000]

Writes a list-append history of `--ops` ops (strings with commas, quotes, escapes and non-ASCII
text among the values, so the fast path is measured on what used to be misread), then prints the
time `parse_edn_history` takes, and edn_format's time per line on a sample (the whole file would
take minutes), extrapolated to the whole file.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import edn_format  # noqa: E402

from kafkaesque_harness.checkers.formats.edn import export_edn, parse_edn_history  # noqa: E402
from kafkaesque_harness.history import Op  # noqa: E402

WORDS = ("a,b", "é", 'say "hi"', "tab\there", "back\\slash", "plain", "日本", "x, y, z")


def history(n: int, keys: int = 200, seed: int = 1) -> list[Op]:
    """Invoke/ok pairs of list-append transactions whose appended values are mostly strings."""
    rng = random.Random(seed)
    lists: dict[int, list] = {k: [] for k in range(keys)}
    ops: list[Op] = []
    for i in range(n // 2):
        mops, inv = [], []
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(keys)
            if rng.random() < 0.5:
                v = f"{rng.choice(WORDS)}-{i}" if rng.random() < 0.7 else i
                lists[k].append(v)
                mops.append(["append", k, v])
                inv.append(["append", k, v])
            else:
                mops.append(["r", k, list(lists[k][-5:])])
                inv.append(["r", k, None])
        p = i % 10
        ops.append(Op("invoke", "txn", p, inv, time=2 * i, index=len(ops)))
        ops.append(Op("ok", "txn", p, mops, time=2 * i + 1, index=len(ops)))
    return ops


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--edn-format-sample", type=int, default=2000, help="lines edn_format reads for its estimate")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "history.edn"
        export_edn(history(args.ops), path)
        size = path.stat().st_size
        t0 = time.perf_counter()
        ops = parse_edn_history(path)
        fast = time.perf_counter() - t0
        lines = path.read_text().split("\n")[: args.edn_format_sample]
        t0 = time.perf_counter()
        for line in lines:
            edn_format.loads(line)
        per_line = (time.perf_counter() - t0) / len(lines)
    print(f"history: {len(ops)} ops, {size / 1e6:.1f} MB")
    print(f"parse_edn_history: {fast:.2f} s ({len(ops) / fast:,.0f} ops/s)")
    print(f"edn_format alone: {per_line * 1e6:.0f} us/line, about {per_line * len(ops):.0f} s for the whole file "
          f"(sampled {len(lines)} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
