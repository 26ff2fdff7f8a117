"""Arrival-only traces (CSV lines of timestamps and token counts): splitting, the arrival
clock and the arrivals frame."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from pipeline.readers.base import (
    ReadContext,
)
from pipeline.readers.frames import ARRIVALS_SCHEMA, conform


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
