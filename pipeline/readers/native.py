"""Our own JSON-lines format (RequestRecord), read at columnar speed.

Fast path: Polars parses a whole chunk of lines against the record's schema. When a chunk fails
(bad JSON, wrong type), it is bisected until the failing lines are isolated; each of those is
validated by the pydantic model, which either coerces it (e.g. ``512.0`` tokens) or says in plain
words what is wrong. The cost of bad lines is O(bad · log chunk), never a loop over good lines.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
from pydantic import ValidationError

from pipeline.files.lines import LineChunk, OverlongLine, Truncated, iter_line_chunks
from pipeline.files.sources import iter_blocks
from pipeline.readers.base import (
    CANONICAL_SCHEMA,
    QUARANTINE_SCHEMA,
    Capabilities,
    ReadContext,
    ReaderOutput,
    conform_requests,
)
from pipeline.schema.record import RequestRecord

PRIORITY = 100
CHUNK_BYTES = 32 * 1024 * 1024
_SMALL = 32  # below this many lines, validate one by one instead of bisecting further
RAW_LIMIT = 64 * 1024


def _parse(data: bytes) -> pl.DataFrame:
    return pl.read_ndjson(io.BytesIO(data), schema=CANONICAL_SCHEMA)


def explain(error: ValidationError) -> str:
    """A pydantic error as one sentence a person understands."""
    parts = []
    for e in error.errors()[:3]:
        if e["type"] == "json_invalid":
            return f"not valid JSON ({e['msg'].removeprefix('Invalid JSON: ')})"
        field = ".".join(str(x) for x in e["loc"]) or "record"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {json.dumps(got, default=str)[:60]})"
        parts.append(f"{field}: {e['msg']}{shown}")
    more = len(error.errors()) - 3
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


class _Chunk:
    """Parses one LineChunk into good rows and quarantined lines."""

    def __init__(self, chunk: LineChunk):
        self.c = chunk
        self.frames: list[pl.DataFrame] = []
        self.bad: list[tuple[int, str, str]] = []

    def run(self) -> tuple[pl.DataFrame, list[tuple[int, str, str]]]:
        self._range(0, len(self.c.starts))
        frames = [f for f in self.frames if f.height]
        df = pl.concat(frames, how="vertical") if frames else _parse(b"")
        return df, self.bad

    def _range(self, i: int, j: int) -> None:
        if i >= j:
            return
        if j - i <= _SMALL and j - i > 1:
            for k in range(i, j):
                self._range(k, k + 1)
            return
        data = self.c.data[int(self.c.starts[i]) : int(self.c.ends[j - 1])]
        try:
            df = _parse(data)
        except Exception:
            if j - i == 1:
                self._single(i)
                return
            mid = (i + j) // 2
            self._range(i, mid)
            self._range(mid, j)
            return
        if df.height != j - i:  # should not happen; never mislabel lines if it does
            for k in range(i, j):
                self._single(k)
            return
        self.frames.append(df.with_columns(source_line=pl.Series(self.c.line_numbers[i:j])))

    def _single(self, k: int) -> None:
        line = self.c.line(k)
        number = int(self.c.line_numbers[k])
        raw = line[:RAW_LIMIT].decode("utf-8", errors="replace")
        try:
            rec = RequestRecord.model_validate_json(line)
        except ValidationError as exc:
            self.bad.append((number, explain(exc), raw))
            return
        except ValueError as exc:  # not JSON at all
            self.bad.append((number, f"not valid JSON: {exc}", raw))
            return
        row = pl.DataFrame([rec.model_dump()], schema=CANONICAL_SCHEMA)
        self.frames.append(row.with_columns(source_line=pl.lit(number, dtype=pl.Int64)))


class NativeReader:
    name = "native"
    required_fields = ("prompt_tokens", "output_tokens")
    description = "Our own JSON-lines request log (schemas/request-record.schema.json)."
    capabilities = Capabilities(
        per_request=True, per_token=True, arrivals_only=False, gpu_model_present=True
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        # Loose on purpose: more specific readers sniff first, and a garbage first line must
        # not turn a log into "unrecognised" (it is quarantined line by line instead).
        return b'"request_id"' in head and b'"arrival_ts"' in head

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        blocks = iter_blocks(ctx.path)
        for item in iter_line_chunks(blocks, CHUNK_BYTES, ctx.max_line_bytes):
            if isinstance(item, Truncated):
                reason = f"input ends early at this line: {item.reason}"
                q = pl.DataFrame(
                    [(item.line_number, reason, None)], schema=QUARANTINE_SCHEMA, orient="row"
                )
                yield ReaderOutput(quarantine=q)
                continue
            if isinstance(item, OverlongLine):
                reason = (
                    f"line is {item.size:,} bytes, over the {ctx.max_line_bytes:,}-byte limit "
                    "(raise it with --max-line-mb if this is a real record)"
                )
                q = pl.DataFrame(
                    [(item.line_number, reason, item.head.decode("utf-8", "replace"))],
                    schema=QUARANTINE_SCHEMA,
                    orient="row",
                )
                yield ReaderOutput(quarantine=q)
                continue
            df, bad = _Chunk(item).run()
            q = pl.DataFrame(bad, schema=QUARANTINE_SCHEMA, orient="row") if bad else None
            yield ReaderOutput(requests=conform_requests(df), quarantine=q)


READER = NativeReader()
