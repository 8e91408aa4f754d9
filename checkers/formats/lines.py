"""The lines of a text history file, for the readers of other tools' formats (EDN, Porcupine's logs).

A file that is not text (a NUL byte, or bytes that are not UTF-8) is a HistoryFormatError naming
the file and the line, never a UnicodeDecodeError: the reader's caller turns it into one sentence.
Lines are split at "\\n" only: str.splitlines would also split at characters such as U+2028 or
U+0085, which may sit inside a string value.
"""

from __future__ import annotations

import os

from kafkaesque_harness.history import HistoryFormatError


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The file's lines (without their "\\n"); OSError (missing, a directory, unreadable) passes through."""
    with open(path, "rb") as f:
        data = f.read()
    nul = data.find(b"\0")
    if nul >= 0:
        raise HistoryFormatError(f"{path} line {_line_of(data, nul)}: a NUL byte, so this is a binary file, not a "
                                 f"text history; pass the history file itself.")
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark some editors write is not part of line 1
    except UnicodeDecodeError as e:
        raise HistoryFormatError(f"{path} line {_line_of(data, e.start)}: byte 0x{data[e.start]:02x} is not UTF-8 "
                                 f"text; pass a UTF-8 text history.") from None
    return text.split("\n")


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
