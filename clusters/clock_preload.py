"""Build and drive the realtime-only clock-offset preload library (clusters/native/clock_offset.c).

A node's processes start with LD_PRELOAD=<library> and KAFKAESQUE_CLOCK_FILE=<file>; the
clock nemesis then skews, jumps or strobes that node's wall clock by rewriting the file
(re-read within 10 ms). The host's and the other nodes' clocks are never touched
(containers share the kernel clock: nothing here ever sets it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "native" / "clock_offset.c"
LIBRARY_NAME = "libclockoffset.so"
CLOCK_FILE_ENV = "KAFKAESQUE_CLOCK_FILE"


class PreloadBuildError(RuntimeError):
    pass


def source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def build_preload(cache_dir: str | os.PathLike | None = None) -> Path:
    """Compile the library with the host's C compiler, once per source version; return its path."""
    cache = Path(cache_dir or Path(tempfile.gettempdir()) / "kafkaesque-native")
    out = cache / source_hash() / LIBRARY_NAME
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise PreloadBuildError("No C compiler found for the clock preload library; install gcc (apt-get install gcc).")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE), "-ldl"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PreloadBuildError(f"Compiling {SOURCE.name} failed: {r.stderr.strip()[-400:]}")
    os.replace(tmp, out)
    return out


def preload_env(library: str | os.PathLike, clock_file: str | os.PathLike) -> dict[str, str]:
    """Environment entries that put a process under the clock file's offset."""
    return {"LD_PRELOAD": str(library), CLOCK_FILE_ENV: str(clock_file)}


def offset_file_text(offset_ns: int) -> str:
    """A fixed offset (a skew, or a jump when it replaces a smaller one); 0 is the real clock."""
    return f"{int(offset_ns)}\n"


def strobe_file_text(delta_ns: int, period_ns: int) -> str:
    """The wall clock flips between the real time and real + delta every period, computed inside
    the library from the monotonic clock (so flips are exact however often the file is read)."""
    if period_ns <= 0:
        raise ValueError(f"a strobe period must be positive, not {period_ns} ns")
    return f"strobe {int(delta_ns)} {int(period_ns)}\n"
