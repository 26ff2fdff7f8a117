"""Frames of the warehouse's tables as readers build them: conformed to the contract's schemas,
split into valid rows and quarantine."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from pipeline.readers.base import (
    QUARANTINE_SCHEMA,
    RAW_LIMIT,
    ReadContext,
    ReaderOutput,
    conform_requests,
    empty_requests,
)
from pipeline.readers.json_text import compact_json, to_json
from pipeline.readers.units import as_float, as_int
from pipeline.schema.tables import TABLES


def _table_schema(table: str) -> dict[str, pl.DataType]:
    arrow = pa.schema([pa.field(c.name, c.type) for c in TABLES[table]])
    return dict(pl.from_arrow(arrow.empty_table()).schema)  # type: ignore[union-attr]


RUNS_SCHEMA = _table_schema("runs")


ARRIVALS_SCHEMA = _table_schema("arrivals")


SUMMARIES_SCHEMA = _table_schema("run_summaries")


def cast_to_schema(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select ``schema``'s columns in order, cast leniently, nulls for the missing ones."""
    if df.height == 0:
        return pl.DataFrame(schema=schema)
    return df.select(
        [
            (pl.col(n).cast(t, strict=False) if n in df.columns else pl.lit(None, dtype=t)).alias(n)
            for n, t in schema.items()
        ]
    )


def runs_frame(reader: str, ctx: ReadContext, rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The ``runs`` rows; ``metadata`` (a dict) becomes ``metadata_json``."""
    out = []
    for r in rows:
        meta = r.get("metadata")
        out.append(
            {
                "run_id": r["run_id"],
                "source_format": reader,
                "source_file": str(ctx.path),
                "model": r.get("model") if isinstance(r.get("model"), str) else None,
                "backend": r.get("backend") if isinstance(r.get("backend"), str) else None,
                "request_rate": as_float(r.get("request_rate")),
                "max_concurrency": as_int(r.get("max_concurrency")),
                "started_at": r.get("started_at"),
                "metadata_json": to_json(meta) if meta else None,
            }
        )
    return pl.DataFrame(out, schema=RUNS_SCHEMA)


def summaries_frame(
    reader: str, ctx: ReadContext, run_id: str, metrics: dict[str, object]
) -> pl.DataFrame:
    """Long ``run_summaries`` rows for every value that is a number (or a numeric string)."""
    names, values = [], []
    for k, v in metrics.items():
        f = as_float(v)
        if f is not None and not math.isnan(f):
            names.append(str(k))
            values.append(f)
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(names),
            "source_format": [reader] * len(names),
            "source_file": [str(ctx.path)] * len(names),
            "metric": names,
            "value": values,
        },
        schema=SUMMARIES_SCHEMA,
    )


def quarantine_frame(
    lines: Sequence[int] | pl.Series, reasons: Sequence[str] | pl.Series, raws: Sequence[Any]
) -> pl.DataFrame:
    raw = [
        None if r is None else (r if isinstance(r, str) else to_json(r))[:RAW_LIMIT] for r in raws
    ]
    return pl.DataFrame(
        {"line": list(lines), "reason": list(reasons), "raw": raw}, schema=QUARANTINE_SCHEMA
    )


def file_quarantine(reason: str, raw: str | None = None) -> ReaderOutput:
    """The whole file recognised but not ingestable: one quarantine row at line 0."""
    return ReaderOutput(quarantine=quarantine_frame([0], [reason], [raw]))


def empty_quarantine() -> pl.DataFrame:
    return pl.DataFrame(schema=QUARANTINE_SCHEMA)


def split_valid(
    df: pl.DataFrame, checks: list[tuple[pl.Expr, str]], raw: str = "_raw", line: str = "_line"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows failing any check (expr True = bad) go to quarantine with all their reasons joined."""
    if not checks or df.height == 0:
        return df, empty_quarantine()
    reason = pl.concat_str(
        [pl.when(bad.fill_null(True)).then(pl.lit(msg)) for bad, msg in checks],
        separator="; ",
        ignore_nulls=True,
    )
    df = df.with_columns(reason.alias("_reason"))
    bad = df.filter(pl.col("_reason").is_not_null() & (pl.col("_reason") != ""))
    good = df.filter(pl.col("_reason").is_null() | (pl.col("_reason") == "")).drop("_reason")
    q = bad.select(
        pl.col(line).cast(pl.Int64, strict=False).alias("line"),
        pl.col("_reason").alias("reason"),
        pl.col(raw).cast(pl.Utf8).str.slice(0, RAW_LIMIT).alias("raw"),
    )
    return good, q


def requests_frame(df: pl.DataFrame) -> pl.DataFrame:
    if df.height == 0:
        return empty_requests()
    return conform_requests(df)


def float_series(values: Sequence[Any], name: str) -> pl.Series:
    """A list of JSON scalars as Float64 (non-numbers → null)."""
    try:
        s = pl.Series(name, values, dtype=pl.Float64, strict=False)
        return s
    except Exception:  # error path: odd nested values
        return pl.Series(name, [as_float(v) for v in values], dtype=pl.Float64)


def float_list_series(values: Sequence[Any], name: str) -> pl.Series:
    """A list of per-request lists of numbers as List(Float64) (anything else → null)."""
    try:
        s = pl.Series(name, values, dtype=pl.List(pl.Float64), strict=True)
        return s
    except Exception:  # error path: sanitise element by element
        out: list[list[float] | None] = []
        for v in values:
            if isinstance(v, list) and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in v
            ):
                out.append([float(x) for x in v])
            else:
                out.append(None)
        return pl.Series(name, out, dtype=pl.List(pl.Float64))


def records_frame(records: list[Any], name: str = "records") -> pl.DataFrame:
    """A JSON array of objects as a frame of text columns, one row per element.

    Nested values are kept as JSON text; ``_line`` is the 1-based element index and ``_raw`` the
    element's JSON. Non-object elements come back with every field null (the caller's checks then
    quarantine them).
    """
    payload = "\n".join(
        compact_json(r if isinstance(r, dict) else {"_not_an_object": r}) for r in records
    )
    keys: dict[str, None] = {}
    for r in records[:1000]:
        if isinstance(r, dict):
            keys.update(dict.fromkeys(r))
    schema = {k: pl.Utf8() for k in keys}
    if payload:
        df = pl.read_ndjson(io.BytesIO(payload.encode()), schema=schema or {"_x": pl.Utf8()})
    else:
        df = pl.DataFrame(schema=schema)
    return df.with_columns(
        pl.int_range(1, len(records) + 1, eager=True).cast(pl.Int64, strict=False).alias("_line"),
        pl.Series("_raw", payload.split("\n") if payload else [], dtype=pl.Utf8),
    )
