"""Helpers shared by the format readers (this module defines no ``READER``).

Everything here works on whole columns: JSON lines are parsed by Polars with every top-level
field read as text (so one record with a wrong type cannot fail the batch), nested values are
pulled out with JSON paths, numbers are cast leniently and a record whose required fields do not
parse goes to the quarantine frame with a reason a person understands.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from pipeline.files.sources import iter_blocks
from pipeline.readers.base import (
    QUARANTINE_SCHEMA,
    InputError,
    ReadContext,
    ReaderOutput,
    conform_requests,
    empty_requests,
)
from pipeline.schema.tables import TABLES

# Seconds per unit of every unit a tool writes times in.
UNIT_SECONDS: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
}
RAW_LIMIT = 64 * 1024
# A line batch ends at batch_rows lines or this much text, whichever comes first: a reader's
# frames hold several copies of the batch (text, parsed fields, per-token lists), so rows alone
# do not bound memory when lines are long (AIPerf, ~1.7 kB a line: 200k-line batches peaked at
# 6.4 GiB; at 200k requests 64 MiB batches peak at 1,825 MiB, 16 MiB ones at 856 MiB, same time).
LINE_BATCH_BYTES = 16 * 2**20
MAX_COUNT = 2.0**53  # token counts above this are not counts (and overflow Int64 casts)
NUMBER_LIST_RE = r"^\s*\[\s*(-?[0-9][0-9.eE+-]*\s*(,\s*-?[0-9][0-9.eE+-]*\s*)*)?\]\s*$"
INT_LIST_RE = r"^\s*\[\s*(-?[0-9]+\s*(,\s*-?[0-9]+\s*)*)?\]\s*$"

_ENGINES = {
    "vllm": "vllm",
    "sglang": "sglang",
    "sglang-native": "sglang",
    "sglang-oai": "sglang",
    "sglang-oai-chat": "sglang",
    "tgi": "tgi",
    "lmdeploy": "lmdeploy",
    "trt": "trtllm",
    "tensorrt-llm": "trtllm",
    "trtllm": "trtllm",
}


def engine_from_backend(backend: object) -> str | None:
    """The serving engine a benchmark backend name implies (None for generic OpenAI clients)."""
    return _ENGINES.get(str(backend).lower()) if isinstance(backend, str) else None


# ---------------------------------------------------------------- table frames


def _table_schema(table: str) -> dict[str, pl.DataType]:
    arrow = pa.schema([pa.field(c.name, c.type) for c in TABLES[table]])
    return dict(pl.from_arrow(arrow.empty_table()).schema)  # type: ignore[union-attr]


RUNS_SCHEMA = _table_schema("runs")
ARRIVALS_SCHEMA = _table_schema("arrivals")
SUMMARIES_SCHEMA = _table_schema("run_summaries")


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select ``schema``'s columns in order, cast leniently, nulls for the missing ones."""
    if df.height == 0:
        return pl.DataFrame(schema=schema)
    return df.select(
        [
            (pl.col(n).cast(t, strict=False) if n in df.columns else pl.lit(None, dtype=t)).alias(n)
            for n, t in schema.items()
        ]
    )


def _json_default(o: object) -> object:
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)


def to_json(obj: object) -> str:
    """JSON text of run metadata; non-finite floats and odd objects become strings."""

    def clean(o: object) -> object:
        if isinstance(o, float) and not math.isfinite(o):
            return str(o)
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(obj), sort_keys=True, default=_json_default, allow_nan=False)


def as_float(v: object) -> float | None:
    """A scalar the tool wrote as a number, or a numeric string ("inf", "550"); else None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def as_int(v: object) -> int | None:
    f = as_float(v)
    if f is None or not math.isfinite(f) or f != int(f):
        return None
    return int(f)


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


# ---------------------------------------------------------------- validity split


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


# ---------------------------------------------------------------- reading files


def read_all(ctx: ReadContext) -> bytes:
    """The whole decompressed file (for formats that are one JSON document)."""
    return b"".join(iter_blocks(ctx.path))


def decode_text(data: bytes, what: str = "file") -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc})") from exc


def load_json(ctx: ReadContext) -> Any:
    """Parse the file as one JSON document (Python's json: accepts NaN/Infinity)."""
    text = decode_text(read_all(ctx))
    if not text.strip():
        raise InputError("file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON (truncated or corrupt?) at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}"
        ) from exc


def iter_json_documents(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """Concatenated JSON values (one per line or pretty-printed): (line, value, error)."""
    dec = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            return
        line = text.count("\n", 0, pos) + 1
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield line, text[pos : pos + RAW_LIMIT], f"invalid or truncated JSON: {exc.msg}"
            return
        yield line, obj, None
        pos = end


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


# ---------------------------------------------------------------- column expressions


def num(expr: pl.Expr) -> pl.Expr:
    """A text or numeric column as Float64 (null when it is not a number)."""
    return expr.cast(pl.Utf8).str.strip_chars().cast(pl.Float64, strict=False)


def intval(expr: pl.Expr) -> pl.Expr:
    """A whole number as Int64 (null for fractions, text, bools)."""
    f = num(expr)
    ok = f.is_finite() & (f == f.floor()) & (f.abs() <= MAX_COUNT)
    return pl.when(ok).then(f).otherwise(None).cast(pl.Int64, strict=False)


def jpath(col: str, path: str) -> pl.Expr:
    """Value at a JSON path inside a text column (``$.a.b``), as text (JSON text if nested)."""
    return pl.col(col).str.json_path_match(path)


def num_list(expr: pl.Expr, int_only: bool = False) -> pl.Expr:
    """A JSON-text array of numbers as List(Float64) (List(Int64)); null when it is not one."""
    text = expr.cast(pl.Utf8)
    pattern = INT_LIST_RE if int_only else NUMBER_LIST_RE
    dtype = pl.List(pl.Int64) if int_only else pl.List(pl.Float64)
    ok = text.str.contains(pattern)
    return pl.when(ok).then(text).otherwise(pl.lit("null")).fill_null("null").str.json_decode(dtype)


def cum_token_times(first: pl.Expr, gaps: pl.Expr) -> pl.Expr:
    """token_times since arrival from a TTFT and the list of gaps between later chunks."""
    return pl.concat_list([first, gaps]).list.eval(pl.element().cum_sum())


def ones_if_per_token(n_chunks: pl.Expr, output_tokens: pl.Expr) -> pl.Expr:
    """token_counts of 1 each when the chunk count equals output_tokens; else null (unknown)."""
    return (
        pl.when(n_chunks == output_tokens)
        .then(pl.lit(1, pl.Int64).repeat_by(n_chunks))
        .otherwise(None)
    )


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


def _dumps(obj: Any) -> str:
    """JSON text of one element; a number too large for a float (1e309 -> inf) stays text, so
    the reader's checks quarantine it ("not a number") instead of the parser failing."""
    try:
        return json.dumps(obj, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), default=str)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"non-finite number {obj!r}"  # text on purpose: not castable to a float
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def records_frame(records: list[Any], name: str = "records") -> pl.DataFrame:
    """A JSON array of objects as a frame of text columns, one row per element.

    Nested values are kept as JSON text; ``_line`` is the 1-based element index and ``_raw`` the
    element's JSON. Non-object elements come back with every field null (the caller's checks then
    quarantine them).
    """
    payload = "\n".join(
        _dumps(r if isinstance(r, dict) else {"_not_an_object": r}) for r in records
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


def col_or_null(df: pl.DataFrame, name: str, dtype: pl.DataType | None = None) -> pl.Expr:
    return pl.col(name) if name in df.columns else pl.lit(None, dtype=dtype or pl.Utf8())


def parse_datetime_utc(expr: pl.Expr) -> pl.Expr:
    """ISO-like datetime text (optional fraction, optional +HH:MM/Z) as UTC Datetime(us)."""
    text = expr.cast(pl.Utf8).str.strip_chars().str.replace("T", " ", literal=True)
    with_tz = text.str.to_datetime(
        "%Y-%m-%d %H:%M:%S%.f%#z", strict=False, time_unit="us", time_zone="UTC"
    )
    naive = (
        text.str.replace(r"Z$", "")
        .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
        .dt.replace_time_zone("UTC")
    )
    return pl.coalesce(with_tz, naive)


_DURATION_RE = r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\s*(ns|µs|μs|us|ms|s|m|h)\s*$"


def rust_duration(expr: pl.Expr) -> pl.Expr:
    """Rust ``Duration`` debug text (``986.53ms``, ``681.374µs``, ``1.2s``) in seconds."""
    text = expr.cast(pl.Utf8)
    value = text.str.extract(_DURATION_RE, 1).cast(pl.Float64, strict=False)
    unit = text.str.extract(_DURATION_RE, 2)
    scale = (
        pl.when(unit == "ns")
        .then(1e-9)
        .when(unit.is_in(["µs", "μs", "us"]))
        .then(1e-6)
        .when(unit == "ms")
        .then(1e-3)
        .when(unit == "s")
        .then(1.0)
        .when(unit == "m")
        .then(60.0)
        .when(unit == "h")
        .then(3600.0)
        .otherwise(None)
    )
    return value * scale


def head_text(head: bytes) -> str:
    return head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")


def first_line(head: bytes) -> str:
    return head_text(head).split("\n", 1)[0].strip()


def has_suffix(path: Path, *suffixes: str) -> bool:
    name = path.name.lower()
    for ext in (".gz", ".zst", ".zstd"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    return name.endswith(suffixes)


def json_keys_re(*keys: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(f'"{k}"') for k in keys))


# ---------------------------------------------------------------- arrival-only traces


def split_csv(texts_df: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """Split a ``_raw`` column of simple CSV lines (no quoted commas) into text columns.

    ``_nfields`` holds the field count so callers can quarantine ragged lines.
    """
    n = len(names)
    parts = pl.col("_raw").str.split_exact(",", n - 1).struct.rename_fields(list(names))
    return texts_df.with_columns(
        (pl.col("_raw").str.count_matches(",") + 1).alias("_nfields"), parts.alias("_parts")
    ).unnest("_parts")


class ArrivalClock:
    """Origin of ``t_arrival``: the earliest arrival of the first batch (traces are time-sorted)."""

    def __init__(self) -> None:
        self.origin: float | None = None

    def rebase(self, t: pl.Series) -> pl.Series:
        if self.origin is None:
            m = t.min()
            self.origin = float(m) if m is not None else None  # type: ignore[arg-type]
        return t - (self.origin or 0.0)


def arrivals_frame(reader: str, ctx: ReadContext, df: pl.DataFrame) -> pl.DataFrame:
    """Conform a frame with request_id, source_line, t_arrival and optional token columns."""
    df = df.with_columns(
        pl.lit(ctx.default_run_id).alias("run_id"),
        pl.lit(reader).alias("source_format"),
        pl.lit(str(ctx.path)).alias("source_file"),
    )
    return conform(df, ARRIVALS_SCHEMA)


def bad_count(e: pl.Expr) -> pl.Expr:
    """True when a token count is missing, negative or fractional."""
    return e.is_null() | ~e.is_finite() | (e < 0) | (e != e.floor()) | (e > MAX_COUNT)


def csv_header(head: bytes) -> list[str]:
    return [h.strip().strip('"') for h in first_line(head).split(",")]
