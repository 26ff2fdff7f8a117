"""Where every line of a plain file starts and ends, found in one bounded-memory pass.

The native reader hands a whole file to DuckDB's parallel JSON reader, which returns rows in
file order but not their line numbers. With this index, and no blank line (DuckDB skips them),
row i is line i + 1 and any row's bytes can be looked up again.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from pipeline.files.lines import _WS

WINDOW = 64 * 1024 * 1024  # scanned at a time; its pages are handed back after each window


@dataclass
class LineIndex:
    starts: np.ndarray  # byte offset of each line (int64)
    ends: np.ndarray  # end offset, exclusive, without the newline
    loose: bool  # some line is empty or starts with whitespace (perhaps blank: look closer)
    longest: int  # bytes in the longest line

    def __len__(self) -> int:
        return len(self.starts)


def index_lines(mm: mmap.mmap, max_lines: int) -> LineIndex | None:
    """The index of every line in ``mm``, or None when it has over ``max_lines`` lines (the
    offsets cost 16 bytes a line, so memory stays bounded)."""
    size = len(mm)
    found: list[np.ndarray] = []
    count = 0
    loose = False
    after_newline = True  # the next byte starts a line
    for a in range(0, size, WINDOW):
        n = min(WINDOW, size - a)
        arr = np.frombuffer(mm, dtype=np.uint8, count=n, offset=a)
        nl = np.flatnonzero(arr == 0x0A)
        heads = nl[nl + 1 < n] + 1
        loose = loose or bool(_WS[arr[heads]].any()) or (after_newline and bool(_WS[arr[0]]))
        after_newline = bool(arr[n - 1] == 0x0A)
        del arr  # (a live view would keep the map from closing)
        found.append(nl + a)
        count += len(nl)
        if count > max_lines:
            return None
        if hasattr(mmap, "MADV_DONTNEED"):
            # Mapped pages count in RSS until dropped, and a scan touches every one.
            mm.madvise(mmap.MADV_DONTNEED, a, n)
    nl = np.concatenate(found).astype(np.int64) if found else np.zeros(0, dtype=np.int64)
    ends = nl if size == 0 or after_newline else np.append(nl, size)
    starts = np.concatenate(([0], nl + 1))[: len(ends)].astype(np.int64)
    lengths = ends - starts
    return LineIndex(starts, ends, loose, int(lengths.max()) if len(lengths) else 0)
