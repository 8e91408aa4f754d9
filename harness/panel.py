"""The live panel while a test runs: time, throughput, outcomes, the current fault, the leaders."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


def _render(stats, spec) -> Table:
    elapsed = time.monotonic() - stats.start
    t = Table(show_header=False, box=None, padding=(0, 2))
    t.add_row("phase", stats.phase)
    t.add_row("elapsed / remaining", f"{elapsed:5.0f} s / {max(spec.time_limit - elapsed, 0):5.0f} s")
    t.add_row("ops/s (5 s)", f"{stats.rate():.0f}")
    c = stats.counts
    t.add_row("ok / fail / info", f"[green]{c.get('ok', 0)}[/] / [red]{c.get('fail', 0)}[/] / "
              f"[yellow]{c.get('info', 0)}[/]")
    t.add_row("fault", stats.fault)
    t.add_row("leaders (partition:node)", stats.leaders)
    return t


class Panel:
    def __init__(self, stats, spec):
        self.stats, self.spec = stats, spec
        self.live = Live(_render(stats, spec), console=Console(stderr=True), refresh_per_second=4,
                         get_renderable=lambda: _render(stats, spec), transient=True)
        self.live.start()

    def stop(self) -> None:
        self.live.stop()


def start_panel(stats, spec) -> Panel:
    return Panel(stats, spec)
