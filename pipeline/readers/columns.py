"""Column expressions: numbers, JSON paths, number lists, token times, datetimes."""

from __future__ import annotations

import polars as pl

from pipeline.readers.units import MAX_COUNT

NUMBER_LIST_RE = r"^\s*\[\s*(-?[0-9][0-9.eE+-]*\s*(,\s*-?[0-9][0-9.eE+-]*\s*)*)?\]\s*$"


INT_LIST_RE = r"^\s*\[\s*(-?[0-9]+\s*(,\s*-?[0-9]+\s*)*)?\]\s*$"


def num(expr: pl.Expr) -> pl.Expr:
    """A text or numeric column as Float64 (null when it is not a number)."""
    return expr.cast(pl.Utf8).str.strip_chars().cast(pl.Float64, strict=False)


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


def bad_count(e: pl.Expr) -> pl.Expr:
    """True when a token count is missing, negative or fractional."""
    return e.is_null() | ~e.is_finite() | (e < 0) | (e != e.floor()) | (e > MAX_COUNT)
