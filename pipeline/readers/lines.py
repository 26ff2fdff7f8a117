"""JSON lines in bounded batches: line splitting and one-call Polars parsing, with the bad lines
found and quarantined.

Everything works on whole columns: JSON lines are parsed by Polars with every top-level field
read as text (so one record with a wrong type cannot fail the batch), nested values are pulled
out with JSON paths (:mod:`pipeline.readers.columns`), numbers are cast leniently and a record
whose required fields do not parse goes to the quarantine frame with a reason a person
understands (:mod:`pipeline.readers.frames`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator

import polars as pl

from pipeline.files.sources import iter_blocks
from pipeline.readers.base import (
    RAW_LIMIT,
    InputError,
    ReadContext,
)
from pipeline.readers.frames import empty_quarantine, quarantine_frame

# A line batch ends at batch_rows lines or this much text, whichever comes first: a reader's
# frames hold several copies of the batch (text, parsed fields, per-token lists), so rows alone
# do not bound memory when lines are long (AIPerf, ~1.7 kB a line: 200k-line batches peaked at
# 6.4 GiB; at 200k requests 64 MiB batches peak at 1,825 MiB, 16 MiB ones at 856 MiB, same time).
LINE_BATCH_BYTES = 16 * 2**20


def iter_line_batches(
    ctx: ReadContext, skip_header: bool = False
) -> Iterator[tuple[pl.Series, pl.Series]]:
    """Batches of (1-based line number, line text) of the non-blank lines, streamed.

    Invalid UTF-8 bytes are replaced (the record then fails to parse and is quarantined).
    """
    pending = b""
    line_no = 1
    header_done = not skip_header
    target = max(1, ctx.batch_rows)
    buf_lines: list[pl.Series] = []
    buf_nums: list[pl.Series] = []
    count = 0
    size = 0

    def emit(chunk: bytes, first: int) -> tuple[pl.Series, pl.Series]:
        parts = chunk.decode("utf-8", errors="replace").split("\n")
        if parts and parts[-1] == "":
            parts.pop()
        s = pl.Series("text", parts, dtype=pl.Utf8)
        nums = pl.int_range(first, first + len(parts), eager=True).alias("line")
        keep = s.str.strip_chars().str.len_bytes() > 0
        return nums.filter(keep), s.filter(keep).str.strip_suffix("\r")

    for block in iter_blocks(ctx.path):
        pending += block
        cut = pending.rfind(b"\n")
        if cut < 0:
            if len(pending) > ctx.max_line_bytes:
                raise InputError(
                    f"line {line_no} is longer than {ctx.max_line_bytes} bytes; not a line format"
                )
            continue
        chunk, pending = pending[: cut + 1], pending[cut + 1 :]
        nums, texts = emit(chunk, line_no)
        line_no += chunk.count(b"\n")
        if not header_done and texts.len():
            nums, texts = nums.slice(1), texts.slice(1)
            header_done = True
        buf_nums.append(nums)
        buf_lines.append(texts)
        count += texts.len()
        size += len(chunk)
        if count >= target or size >= LINE_BATCH_BYTES:
            yield pl.concat(buf_nums), pl.concat(buf_lines)
            buf_nums, buf_lines, count, size = [], [], 0, 0
    if pending:
        nums, texts = emit(pending, line_no)
        if not header_done and texts.len():
            nums, texts = nums.slice(1), texts.slice(1)
        buf_nums.append(nums)
        buf_lines.append(texts)
    if buf_nums:
        nums, texts = pl.concat(buf_nums), pl.concat(buf_lines)
        if texts.len():
            yield nums, texts


def _strict_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def rows_per_batch(ctx: ReadContext) -> int:
    """``ctx.batch_rows``, fewer where lines are long: about LINE_BATCH_BYTES of text a batch
    (line length estimated from the first block of the file)."""
    head = next(iter_blocks(ctx.path), b"")
    lines = max(1, head.count(b"\n"))
    return max(1, min(ctx.batch_rows, LINE_BATCH_BYTES * lines // max(1, len(head))))


def parse_ndjson(
    nums: pl.Series, texts: pl.Series, fields: Iterable[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse JSON lines, reading each named top-level field as text (nested values as JSON text).

    Returns (frame with ``_line``, ``_raw`` and the fields as Utf8, quarantine of unparsable lines).
    The hot path is one Polars call; only when it fails are lines checked one by one to find the
    bad ones (invalid or truncated JSON, not an object, NaN/Infinity).
    """
    fields = list(dict.fromkeys(fields))
    schema = {f: pl.Utf8() for f in fields}
    q = empty_quarantine()
    payload = "\n".join(texts.to_list()).encode()
    try:
        df = pl.read_ndjson(io.BytesIO(payload), schema=schema) if payload else None
    except Exception:
        df = None
        bad_idx, reasons = [], []
        for i, t in enumerate(texts.to_list()):  # error path only
            try:
                obj = json.loads(t, parse_constant=_strict_constant)
            except (ValueError, RecursionError) as exc:
                bad_idx.append(i)
                reasons.append(f"not valid JSON (truncated or corrupt line?): {exc}")
                continue
            if not isinstance(obj, dict):
                bad_idx.append(i)
                reasons.append(f"line is a JSON {type(obj).__name__}, not an object")
        mask = pl.Series([True] * texts.len())
        if bad_idx:
            mask = mask.scatter(bad_idx, False)
            q = quarantine_frame(
                nums.gather(bad_idx), reasons, [t[:RAW_LIMIT] for t in texts.gather(bad_idx)]
            )
        nums, texts = nums.filter(mask), texts.filter(mask)
        payload = "\n".join(texts.to_list()).encode()
        if payload:
            try:
                df = pl.read_ndjson(io.BytesIO(payload), schema=schema)
            except Exception as exc:
                raise InputError(f"JSON lines could not be parsed: {exc}") from exc
    if df is None:
        df = pl.DataFrame(schema=schema)
    df = df.with_columns(nums.alias("_line"), texts.alias("_raw"))
    return df, q
