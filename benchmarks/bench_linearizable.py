"""The linearizability checker on Porcupine's own histories, raced against Porcupine (Go) in the same run.

    nice -n 15 .venv/bin/python benchmarks/bench_linearizable.py --porcupine DIR [--rounds 5] [--only etcd_002,c50]
        [--all-test-data]

DIR holds Porcupine's published source (github.com/anishathalye/porcupine: a checkout, or a bare git
directory whose HEAD is read). With a Go toolchain (`go` on PATH, or --go) the benchmark copies that
source to a scratch directory, adds benchmarks/peers/porcupine_timing_test.go, builds the test binary
once, and then alternates rounds: our checker on every file, Porcupine on every file (GOMAXPROCS=2),
swapping which goes first each round. Each figure is a file's median over the rounds of the time per
check (a check is repeated for at least --min-ms, parsing excluded, on both sides). Without Go or the
source, it compares against the stored figures of TIMINGS-2026-11-24.json, and says so.

The files are the anchors' (shared/anchors/porcupine: etcd 000-049 and the six kv files), or with
--all-test-data every file of Porcupine's own test_data in DIR (etcd 000-102 and kv), each with the
verdict Porcupine's porcupine_test.go expects of it (checkJepsen / checkKv); the summary then gives the
totals of 000-049 and of the held-out 050-102 apart, and how many files each checker was faster on.

The machine is shared: the 1-minute load is printed beside every round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yardstick import bracket  # noqa: E402  # benchmarks/yardstick.py (this script's directory is on sys.path)

from kafkaesque_harness.checkers.formats.porcupine import parse_etcd_log, parse_kv_log  # noqa: E402
from kafkaesque_harness.checkers.linearizable import calls_from_history, check_calls  # noqa: E402
from kafkaesque_harness.checkers.models import MODELS  # noqa: E402

ANCHORS = Path(__file__).resolve().parents[1].parent / "shared" / "anchors" / "porcupine"
STORED = "TIMINGS-2026-11-24.json"  # the newer of the two stored Go measurements (see its "note")
GO_HARNESS = Path(__file__).resolve().parent / "peers" / "porcupine_timing_test.go"


def load() -> str:
    return "uptime load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def time_ours(calls, model: str, min_ms: float) -> tuple[float, object]:
    """Milliseconds per check (repeated for at least min_ms, after one warm-up check) and the verdict."""
    verdict, _ = check_calls(calls, MODELS[model](), time_limit=300)
    runs, t0 = 0, time.perf_counter()
    while runs == 0 or (time.perf_counter() - t0) * 1000 < min_ms:
        check_calls(calls, MODELS[model](), time_limit=300)
        runs += 1
    return (time.perf_counter() - t0) * 1000 / runs, verdict


def build_porcupine(source: Path, go: str, scratch: Path) -> tuple[Path, str]:
    """Porcupine's source plus our timing test, built once; returns the binary and a description."""
    tree = scratch / "porcupine"
    if (source / "porcupine.go").exists():
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown commit"
    elif (source / "HEAD").exists() and (source / "objects").exists():
        tree.mkdir()
        archive = subprocess.run(["git", "--git-dir", str(source), "archive", "HEAD"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        commit = subprocess.run(["git", "--git-dir", str(source), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    else:
        raise SystemExit(f"{source} holds neither Porcupine's source (porcupine.go) nor a git directory; "
                         f"pass --porcupine a checkout of github.com/anishathalye/porcupine.")
    shutil.copy(GO_HARNESS, tree / GO_HARNESS.name)
    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod")  # Porcupine needs no module: build offline
    built = subprocess.run([go, "test", "-c", "-o", str(scratch / "porcupine.test"), "."], cwd=tree, env=env,
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"building Porcupine's test binary failed: {built.stderr.strip()[-600:]}; "
                         f"check that {source} is Porcupine's source and `{go} version` works.")
    version = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
    return scratch / "porcupine.test", f"Porcupine {commit} ({version}), built once in this run, GOMAXPROCS=2"


def test_data_rows(tree: Path) -> list[dict]:
    """Every file of Porcupine's test_data under `tree` (its source), with the verdict its porcupine_test.go
    expects: checkJepsen(t, N, bool) and checkKv(t, "name", bool, ...)."""
    go_test = (tree / "porcupine_test.go").read_text()
    rows = [{"file": f"jepsen/etcd_{int(num):03d}.log", "model": "etcd", "expected_linearizable": ok == "true"}
            for num, ok in re.findall(r"checkJepsen\(t, (\d+), (true|false)\)", go_test)]
    rows += [{"file": f"kv/{name}.txt", "model": "kv", "expected_linearizable": ok == "true"}
             for name, ok in dict(re.findall(r'checkKv\(t, "([^"]+)", (true|false)', go_test)).items()]
    missing = [r["file"] for r in rows if not (tree / "test_data" / r["file"]).is_file()]
    if missing or not rows:
        raise SystemExit(f"{tree} lacks Porcupine's test data ({', '.join(missing[:3]) or 'no checkJepsen in its tests'})")
    return sorted(rows, key=lambda r: r["file"])


def time_go(binary: Path, files: list[tuple[str, str]], min_ms: float, root: Path) -> dict[str, tuple[float, bool]]:
    """One round of Porcupine over the files (named relative to `root`): {file: (ms per check, verdict)}."""
    env = dict(os.environ, GOMAXPROCS="2", KAFKAESQUE_MIN_MS=str(int(min_ms)),
               KAFKAESQUE_FILES=",".join(f"{model}:{root / name}" for name, model in files))
    out = subprocess.run([str(binary), "-test.run", "^TestKafkaesqueTiming$", "-test.v"], env=env,
                         capture_output=True, text=True, timeout=3600)
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            _, path, ns, _runs, verdict = line.split()
            results[str(Path(path).relative_to(root))] = (int(ns) / 1e6, verdict == "true")
    if len(results) != len(files):
        raise SystemExit(f"Porcupine's timing run reported {len(results)} of {len(files)} files: "
                         f"{(out.stdout + out.stderr).strip()[-600:]}")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (ours, Go); medians are reported")
    ap.add_argument("--min-ms", type=float, default=50.0, help="repeat each check for at least this long")
    ap.add_argument("--porcupine", type=Path, default=os.environ.get("PORCUPINE_SRC"),
                    help="Porcupine's source (a checkout or a bare git directory); default $PORCUPINE_SRC")
    ap.add_argument("--go", default=shutil.which("go"), help="the Go toolchain (default: go on PATH)")
    ap.add_argument("--only", default="", help="comma-separated substrings of file names to keep")
    ap.add_argument("--all-test-data", action="store_true",
                    help="every file of Porcupine's test_data in --porcupine (etcd 000-102, kv), not the anchors' 56")
    args = ap.parse_args()
    bracket()  # the machine's speed before and after: figures compare through it

    scratch = Path(tempfile.mkdtemp(prefix="bench-linearizable-"))
    try:
        binary = None
        if args.go and args.porcupine:
            binary, against = build_porcupine(args.porcupine, args.go, scratch)
        if args.all_test_data:
            if binary is None:
                raise SystemExit("--all-test-data needs Porcupine's source and Go (--porcupine DIR, go on PATH)")
            root = scratch / "porcupine" / "test_data"
            manifest = test_data_rows(scratch / "porcupine")
        else:
            root = ANCHORS
            manifest = json.loads((ANCHORS / "TIMINGS.json").read_text())["rows"]  # the files, models and verdicts
        stored = {r["go_bench"]: r["go_ms_median"] for r in json.loads((ANCHORS / STORED).read_text())["rows"]}
        rows = [r for r in manifest if not args.only or any(s in r["file"] for s in args.only.split(","))]
        files = [(r["file"], "etcd" if r["model"] == "etcd" else "kv") for r in rows]
        expected = {r["file"]: r["expected_linearizable"] for r in rows}
        calls = {name: calls_from_history((parse_etcd_log if model == "etcd" else parse_kv_log)(root / name), model)
                 for name, model in files}
        if binary is None:
            missing = "no Go toolchain" if not args.go else "no Porcupine source (--porcupine or $PORCUPINE_SRC)"
            against = (f"the STORED Go figures of {STORED} ({missing}: not measured in this run; "
                       f"stored figures are from another day and load)")
        print(f"comparing against: {against}")
        print(f"start: {load()}; rounds: {args.rounds}; at least {args.min_ms:g} ms per file and round")
        ours_ms: dict[str, list[float]] = {name: [] for name, _ in files}
        go_ms: dict[str, list[float]] = {name: [] for name, _ in files}
        ours_verdict, go_verdict = {}, {}
        for rnd in range(args.rounds):
            order = ["ours", "go"] if rnd % 2 == 0 else ["go", "ours"]
            if binary is None:
                order = ["ours"]
            for side in order:
                if side == "ours":
                    for name, model in files:
                        ms, ours_verdict[name] = time_ours(calls[name], model, args.min_ms)
                        ours_ms[name].append(ms)
                elif binary is not None:
                    for name, (ms, verdict) in time_go(binary, files, args.min_ms, root).items():
                        go_ms[name].append(ms)
                        go_verdict[name] = verdict
            print(f"round {rnd + 1}: {' then '.join(order)}; {load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    go_bench = {r["file"]: r.get("go_bench") for r in rows}
    peer = {name: statistics.median(go_ms[name]) if go_ms[name] else stored[go_bench[name]] for name, _ in files}
    ours = {name: statistics.median(ms) for name, ms in ours_ms.items()}
    label = "go (this run)" if binary is not None else "go (STORED)"
    print(f"\n{'file':24s} {'ours ms':>10s} {label:>14s} {'ratio':>7s}  verdict (expected)")
    mismatches = 0
    for name, _ in files:
        wrong = ours_verdict[name] != expected[name] or (binary is not None and go_verdict[name] != expected[name])
        mismatches += wrong
        theirs = f" go {go_verdict[name]}" if binary is not None else ""
        print(f"{name:24s} {ours[name]:10.2f} {peer[name]:14.3f} {ours[name] / peer[name]:6.2f}x  "
              f"{ours_verdict[name]}{theirs} ({expected[name]}){'  MISMATCH' if wrong else ''}")
    etcd = [name for name, model in files if model == "etcd"]
    groups = [("etcd", etcd)]
    if args.all_test_data:
        held_out = [n for n in etcd if int(n[-7:-4]) >= 50]
        groups = [("etcd 000-049", [n for n in etcd if n not in held_out]), ("etcd 050-102 (held out)", held_out)]
    for what, names in groups:
        if names:
            o, g = sum(ours[n] for n in names), sum(peer[n] for n in names)
            print(f"\n{what} total ({len(names)} files): ours {o:.1f} ms, Porcupine {g:.1f} ms, ratio {o / g:.3f}x")
    slower = [n for n, _ in files if ours[n] > peer[n]]
    print(f"files where ours took longer than Porcupine: {len(slower)} of {len(files)}"
          + (f" ({', '.join(f'{n} {ours[n] / peer[n]:.2f}x' for n in slower[:12])}{', ...' if len(slower) > 12 else ''})"
             if slower else ""))
    for name in ("kv/c50-ok.txt", "kv/c50-bad.txt"):
        if name in ours:
            print(f"{name}: ours {ours[name]:.1f} ms, Porcupine {peer[name]:.1f} ms, ratio {ours[name] / peer[name]:.2f}x")
    print("slowest (ours):", ", ".join(f"{n} {ours[n]:.1f} ms" for n in sorted(ours, key=lambda n: -ours[n])[:5]))
    print(f"compared against: {against}")
    print(f"end: {load()}; verdict mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
