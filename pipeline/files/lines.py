"""Split a decompressed byte stream into chunks of whole lines, with line numbers.

Line boundaries are found with numpy over whole chunks; no Python loop per line. Lines longer
than ``max_line_bytes`` are never held in memory whole: they are skipped while streaming and
reported, so a 50 MB single line cannot blow the memory bound.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.files.sources import UTF8_BOM, InputError, compression, iter_blocks

_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0D, 0x0A]] = True


@dataclass
class LineChunk:
    data: bytes  # whole lines, each ending in b"\n" (the last may lack it at end of file)
    starts: np.ndarray  # byte offset of each non-blank line in data
    ends: np.ndarray  # end offset (exclusive, without the newline)
    line_numbers: np.ndarray  # 1-based line number in the file of each non-blank line
    n_lines: int = 0  # lines in data, blank ones included

    def line(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.ends[i])]


@dataclass
class OverlongLine:
    line_number: int
    head: bytes  # the first bytes of the skipped line, for the quarantine record
    size: int


def _index(data: bytes, first_line: int) -> LineChunk:
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 0x0A)
    ends = nl if data.endswith(b"\n") else np.append(nl, len(data))
    starts = np.concatenate(([0], nl + 1))[: len(ends)]
    numbers = np.arange(first_line, first_line + len(ends), dtype=np.int64)
    # Blank (whitespace-only) lines are skipped by the JSON parser, so drop them here too to keep
    # row i <-> line i. Only lines that are empty or start with whitespace need a closer look.
    first = arr[np.minimum(starts, max(len(arr) - 1, 0))] if len(arr) else starts
    keep = (ends > starts) & ~_WS[first]
    for i in np.flatnonzero((ends > starts) & _WS[first]):
        keep[i] = bool(data[starts[i] : ends[i]].strip())
    return LineChunk(data, starts[keep], ends[keep], numbers[keep], len(ends))


@dataclass
class Truncated:
    line_number: int  # the line the input broke off in
    reason: str


def iter_line_chunks(
    blocks: Iterable[bytes], chunk_bytes: int, max_line_bytes: int
) -> Iterator[LineChunk | OverlongLine | Truncated]:
    """Yield LineChunks of about chunk_bytes, and an OverlongLine for each line over the limit.

    If the blocks raise InputError (a truncated compressed file), the complete lines read so far
    are yielded, then one Truncated for the broken-off rest.
    """
    state = {"line_no": 1}
    try:
        yield from _chunks(blocks, chunk_bytes, max_line_bytes, state)
    except InputError as exc:
        yield from state.get("flush", [])
        yield Truncated(state["line_no"], str(exc))


def _chunks(blocks, chunk_bytes, max_line_bytes, state):
    pending = bytearray()
    line_no = 1  # file line number of the first line in `pending`
    skipping: OverlongLine | None = None  # an over-long line whose end we have not seen yet

    def on_error() -> list[LineChunk]:
        cut = pending.rfind(b"\n")
        state["line_no"] = line_no + pending.count(b"\n")
        if skipping is not None or cut < 0:
            return []
        chunk = _index(bytes(pending[: cut + 1]), line_no)
        return [chunk] if len(chunk.starts) else []

    for block in _guard(blocks, state, on_error):
        if skipping is not None:
            nl = block.find(b"\n")
            if nl < 0:
                skipping.size += len(block)
                continue
            skipping.size += nl
            yield skipping
            line_no, skipping = skipping.line_number + 1, None
            block = block[nl + 1 :]
        pending += block
        while len(pending) >= chunk_bytes:
            cut = pending.rfind(b"\n", 0, chunk_bytes)
            if cut < 0:  # the first line alone is longer than a chunk
                cut = pending.find(b"\n", chunk_bytes)
                if cut < 0:
                    if len(pending) > max_line_bytes:
                        skipping = OverlongLine(line_no, bytes(pending[:1024]), len(pending))
                        pending.clear()
                    break
                if cut > max_line_bytes:
                    yield OverlongLine(line_no, bytes(pending[: min(cut, 1024)]), cut)
                    del pending[: cut + 1]
                    line_no += 1
                    continue
            with memoryview(pending) as view:
                data = bytes(view[: cut + 1])  # one copy, not two
            del pending[: cut + 1]
            items, n_lines = _split(data, line_no, max_line_bytes)
            yield from (c for c in items if isinstance(c, OverlongLine) or len(c.starts))
            line_no += n_lines
        state["line_no"] = line_no
    if skipping is not None:
        yield skipping
    elif pending:  # the last lines (several, or one unterminated over the limit)
        items, _ = _split(bytes(pending), line_no, max_line_bytes)
        last = items[-1]
        yield from (c for c in items[:-1] if isinstance(c, OverlongLine) or len(c.starts))
        yield last  # passed on even if blank, as before


def _guard(blocks, state, on_error):
    """Pass blocks through; on InputError, record the complete lines still pending, re-raise."""
    try:
        yield from blocks
    except InputError:
        state["flush"] = on_error()
        raise


def _split(
    data: bytes, first_line: int, max_line_bytes: int
) -> tuple[list[LineChunk | OverlongLine], int]:
    """``data`` (whole lines) as LineChunks, with each line over ``max_line_bytes`` taken out as
    an OverlongLine; and the number of lines in ``data``. A limit below the chunk size leaves
    such lines inside a chunk: they are cut out here, by offsets, not by a loop per line."""
    chunk = _index(data, first_line)
    long = np.flatnonzero((chunk.ends - chunk.starts) > max_line_bytes)
    if not len(long):
        return [chunk], chunk.n_lines
    items: list[LineChunk | OverlongLine] = []
    prev, prev_line = 0, first_line
    for i in long:  # one pass per over-long line, of which there are few
        s, e, number = int(chunk.starts[i]), int(chunk.ends[i]), int(chunk.line_numbers[i])
        if s > prev:
            items.append(_index(data[prev:s], prev_line))
        items.append(OverlongLine(number, data[s : s + 1024], e - s))
        prev, prev_line = e + 1, number + 1
    if prev < len(data):
        items.append(_index(data[prev:], prev_line))
    return items, chunk.n_lines


def iter_file_chunks(
    path: Path, chunk_bytes: int, max_line_bytes: int, start: tuple[int, int] | None = None
) -> Iterator[LineChunk | OverlongLine | Truncated]:
    """:func:`iter_line_chunks` of a file. An uncompressed file is memory-mapped and each chunk
    is one copy out of the page cache; the block path copied every byte three times (read,
    append to the pending buffer, cut), a seventh of a 1M-request ingest's CPU time.

    ``start`` = (byte offset, its line number) resumes a plain file at a line start.
    """
    if start is not None and compression(path) is not None:
        raise ValueError("only a plain file can be resumed part-way")
    if start is None and (compression(path) is not None or max_line_bytes < chunk_bytes):
        # (A limit below the chunk size is checked line by line only on the block path.)
        yield from iter_line_chunks(iter_blocks(path), chunk_bytes, max_line_bytes)
        return
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            if hasattr(mmap, "MADV_SEQUENTIAL"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            yield from _mapped_chunks(mm, chunk_bytes, max_line_bytes, start)


def _mapped_chunks(
    mm: mmap.mmap, chunk_bytes: int, max_line_bytes: int, start: tuple[int, int] | None = None
) -> Iterator[LineChunk | OverlongLine]:
    # The same cuts as _chunks: whole lines up to chunk_bytes, a longer first line alone (or
    # reported as over the limit and skipped), the rest at the end.
    size = len(mm)
    pos = len(UTF8_BOM) if mm[: len(UTF8_BOM)] == UTF8_BOM else 0
    line_no = 1
    if start is not None:
        pos, line_no = start
    released = pos - pos % mmap.PAGESIZE  # pages before this offset are handed back
    while pos < size:
        tail = size - pos < chunk_bytes
        if tail:
            cut = size
        else:
            nl = mm.rfind(b"\n", pos, pos + chunk_bytes)
            if nl < 0:  # the first line alone is longer than a chunk
                nl = mm.find(b"\n", pos + chunk_bytes)
                line_end = size if nl < 0 else nl
                if line_end - pos > max_line_bytes:
                    yield OverlongLine(line_no, mm[pos : pos + 1024], line_end - pos)
                    pos, line_no = line_end + 1, line_no + 1
                    continue
            cut = size if nl < 0 else nl + 1
        chunk = _index(mm[pos:cut], line_no)
        # Mapped pages count in the process's RSS until dropped: without this, a 2.8 GB file
        # showed 3.7 GiB peak RSS. The chunk is a copy, so its pages can go now.
        upto = cut - cut % mmap.PAGESIZE
        if upto > released and hasattr(mmap, "MADV_DONTNEED"):
            mm.madvise(mmap.MADV_DONTNEED, released, upto - released)
            released = upto
        if len(chunk.starts) or tail:  # the tail is passed on even if blank, as in _chunks
            yield chunk
        line_no += chunk.n_lines
        pos = cut
