"""The contract between readers and the ingest pipeline.

A reader converts what a tool wrote into *canonical frames*:

- ``requests``: Polars frame whose columns are the fields of our own log record
  (:class:`pipeline.schema.record.RequestRecord`, see :data:`CANONICAL_SCHEMA`) plus
  ``source_line`` (Int64, 1-based line or record index). Missing columns are filled with nulls;
  ``--set`` metadata is applied afterwards by the pipeline, never by the reader. Validation of
  times and counts, the derived metrics and the ``tokens`` table are computed by the pipeline
  (:mod:`pipeline.ingest.validate`), not by readers, so every format obeys the same rules.
- ``quarantine``: rows the reader could not even parse: ``line`` (Int64), ``reason`` (Utf8, for a
  person), ``raw`` (Utf8).
- ``runs``, ``arrivals``, ``run_summaries``: columns as in :mod:`pipeline.schema.tables`.

Readers stream: ``read`` yields as many :class:`ReaderOutput` batches as it likes, so memory stays
bounded for large files.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from pipeline.files.sources import InputError as InputError  # readers raise it: part of their API
from pipeline.schema.record import RequestRecord


def _polars_dtype(annotation: object) -> pl.DataType:
    """Map a pydantic field annotation to the Polars dtype the fast path parses it as."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _polars_dtype(args[0])
    if origin is typing.Literal:
        return pl.Utf8()
    if origin is list:
        return pl.List(_polars_dtype(args[0]))
    return {str: pl.Utf8(), int: pl.Int64(), float: pl.Float64(), bool: pl.Boolean()}[annotation]


# The record's fields as Polars dtypes, in declaration order: the shape of a canonical frame.
CANONICAL_SCHEMA: dict[str, pl.DataType] = {
    name: _polars_dtype(f.annotation) for name, f in RequestRecord.model_fields.items()
}
RAW_LIMIT = 64 * 1024  # characters of a bad record's text the quarantine keeps
QUARANTINE_SCHEMA: dict[str, pl.DataType] = {
    "line": pl.Int64(),
    "reason": pl.Utf8(),
    "raw": pl.Utf8(),
}


@dataclass
class ReaderOutput:
    requests: pl.DataFrame | None = None
    quarantine: pl.DataFrame | None = None
    runs: pl.DataFrame | None = None
    arrivals: pl.DataFrame | None = None
    run_summaries: pl.DataFrame | None = None
    # Records the tool itself marks as outside the measurement (AIPerf's warmup requests): not
    # requests and not bad data. One row per record, columns line (int) and reason (str); ingest
    # counts them as `excluded`: read = ingested + quarantined + duplicates + arrivals + excluded.
    excluded: pl.DataFrame | None = None


@dataclass(frozen=True)
class ReadContext:
    """What the pipeline tells a reader about the file it reads."""

    path: Path
    default_run_id: str  # file-derived run id for records that carry none
    max_line_bytes: int = 32 * 1024 * 1024
    batch_rows: int = 200_000
    mapping: Path | None = None  # a declarative mapping file (pipeline/readers/mapping.py)


@dataclass(frozen=True)
class Capabilities:
    per_request: bool
    per_token: bool
    arrivals_only: bool
    gpu_model_present: bool
    needs_set: tuple[str, ...] = field(default=())


class Reader(Protocol):
    name: str
    description: str
    capabilities: Capabilities
    # Canonical columns a row must have to be kept. Our own format requires token counts; tools
    # that do not log them (TGI at INFO level, genai-perf) leave them null instead of losing rows.
    required_fields: tuple[str, ...]

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when the file (its first 64 KiB, decompressed, in ``head``) is this format."""

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        """Yield the file's content as canonical frames."""


def empty_requests() -> pl.DataFrame:
    return pl.DataFrame(schema={**CANONICAL_SCHEMA, "source_line": pl.Int64()})


def conform_requests(df: pl.DataFrame) -> pl.DataFrame:
    """Add missing canonical columns as nulls and cast to the canonical dtypes, in order."""
    target = {**CANONICAL_SCHEMA, "source_line": pl.Int64()}
    exprs = [
        (pl.col(n).cast(t, strict=False) if n in df.columns else pl.lit(None, dtype=t)).alias(n)
        for n, t in target.items()
    ]
    return df.select(exprs)


# Bytes of a file's start that name its run (and that ingest sniffs formats from).
HEAD_BYTES = 64 * 1024


def file_run_id(path: Path, head: bytes, size: int) -> str:
    """<file name>-<8 hex>: the hex digits hash the file's first 64 KiB (decompressed) and its
    size, so the id is known before the whole file has been hashed and is the same wherever the
    file is. A companion summary names its per-request file's run with :func:`sibling_run_id`."""
    import hashlib
    import re

    sha = hashlib.sha256(head + str(size).encode()).hexdigest()
    stem = path.name
    for suffix in (".gz", ".zst", ".zstd", ".jsonl", ".json", ".ndjson", ".csv", ".log", ".txt"):
        stem = stem.removesuffix(suffix)
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', stem)}-{sha[:8]}"


def sibling_run_id(path: Path) -> str | None:
    """The run id ingest gives an uncompressed per-request file ``path`` (None if absent), so
    that a tool's summary written beside it joins the same run instead of making a second one."""
    if not path.is_file() or path.suffix in (".gz", ".zst", ".zstd"):
        return None
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
    return file_run_id(path, head, path.stat().st_size)
