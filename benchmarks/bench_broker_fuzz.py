"""Fuzzing the reference broker's listeners for as long as you like (issue 20 item 5): the inputs of
tests/integration/broker_fuzz.py thrown at a real controller and broker, then the held-connection
phase, then the measured attack of issue 20 replayed against a node with its default caps.

Prints figures (never asserts): inputs tried per port, inputs answered, crashes (a process that
died, or a line its event loop's exception handler wrote), the most log lines one input got,
resident memory (VmRSS before, while big requests were held, after; VmHWM, the peak) and, for the
replay, what four and eight connections holding the largest request one byte short cost a node.

    .venv/bin/python benchmarks/bench_broker_fuzz.py [--examples 5000] [--seconds 600] [--big 16]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.broker_fuzz import (  # noqa: E402
    MAX_CONNECTIONS,
    QUEUED_MAX,
    REQUEST_MAX,
    Figures,
    FuzzTarget,
    MiB,
    run_fuzz,
    vm_kib,
)


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def fuzz(root: Path, args: argparse.Namespace) -> None:
    print(f"caps: request {REQUEST_MAX // MiB} MiB, memory pool {QUEUED_MAX // MiB} MiB, "
          f"{MAX_CONNECTIONS} connections")
    t0 = time.monotonic()
    target, figures, m = run_fuzz(root, args.examples, args.seconds, args.big, args.hold,
                                  log=lambda s: print(f"  {s}", flush=True))
    try:
        crashes = figures.crashes + [f"{n}: {e}" for n, es in m["unhandled"].items() for e in es]
        crashes += [f"{n} not alive at the end" for n, up in m["alive"].items() if not up]
        print(f"inputs tried: {sum(figures.inputs.values())} ({dict(figures.inputs)}), "
              f"answered {figures.answered}, in {time.monotonic() - t0:.0f} s")
        print(f"crashes: {len(crashes)}" + "".join(f"\n  {c}" for c in crashes))
        print(f"most log lines for one input: {m['most_lines_for_one_input']}")
        print(f"held: {figures.held} connections, {figures.held_bytes_sent / MiB:.0f} MiB sent; "
              f"connections_refused lines: {m['refused_connection_lines']}")
        print(f"real client afterwards: {len(m['round_trip'])}/20 records produced and consumed back")
        for name in sorted(m["rss_before_kib"]):
            # VmHWM is updated lazily by the kernel: the samples taken while held may be higher.
            peak = max(m["peak_rss_kib"].get(name, 0), m["rss_while_held_kib"][name])
            print(f"{name}: RSS {mib(m['rss_before_kib'][name])} before, "
                  f"{mib(m['rss_while_held_kib'][name])} while held, "
                  f"{mib(m['rss_after_kib'].get(name, 0))} after; peak {mib(peak)}")
    finally:
        target.stop()


def replay_measured_attack(root: Path, hold_s: float) -> None:
    """Issue 20: '64 MiB frame announced and held open costs 64 MiB per connection (+252 MiB for four)'."""
    target = FuzzTarget(root, cap_flags=[]).start()  # the nodes' default caps
    try:
        target.real_client_round_trip(5)
        pid = target.pid("broker")
        print("replay against the default caps (request 16 MiB, pool 64 MiB):")
        for size, conns in ((64 * MiB, 4), (16 * MiB, 4), (16 * MiB, 8)):
            before = vm_kib(pid, "VmRSS")
            peak = target.hold_big_requests(conns, hold_s, Figures(), size=size, flood=False)["broker"]
            time.sleep(0.5)
            print(f"  {conns} connections x {size // MiB} MiB announced, all but one byte sent: broker RSS "
                  f"{(peak - before) / 1024:+.0f} MiB while held, {(vm_kib(pid, 'VmRSS') - before) / 1024:+.0f} "
                  f"MiB after; alive {target.alive('broker')}")
    finally:
        target.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=5000, help="generated inputs (both ports together)")
    ap.add_argument("--seconds", type=float, default=600, help="stop generating after this long")
    ap.add_argument("--big", type=int, default=16, help="connections per node holding a largest request")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds to hold them")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kq-fuzz-"))
    try:
        fuzz(root / "fuzz", args)
        replay_measured_attack(root / "replay", args.hold)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
