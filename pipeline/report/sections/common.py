"""Helpers the section builders share: series labels and keeping charts to a few series."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import MAX_SERIES


def label_expr(with_deployment: bool = False) -> pl.Expr:
    """'model · GPU' (and '×n' GPUs, dtype when not bf16) as one series name."""
    parts = [pl.col("model"), pl.lit(" · "), pl.col("gpu")]
    if with_deployment:
        parts += [
            pl.when(pl.col("gpu_count") > 1)
            .then(pl.lit(" ×") + pl.col("gpu_count").cast(pl.Utf8))
            .otherwise(pl.lit("")),
            pl.when(pl.col("weight_dtype") != "bf16")
            .then(pl.lit(" ") + pl.col("weight_dtype"))
            .otherwise(pl.lit("")),
        ]
    return pl.concat_str(parts).alias("series")


def top_series(df: pl.DataFrame, weight: str = "requests", n: int = MAX_SERIES) -> pl.DataFrame:
    """Rows of the ``n`` series with the most ``weight`` (charts stay readable)."""
    if df.is_empty() or df["series"].n_unique() <= n:
        return df
    keep = (df.group_by("series").agg(pl.col(weight).sum()).sort(weight, descending=True).head(n))[
        "series"
    ]
    return df.filter(pl.col("series").is_in(keep.implode()))


def dropped_note(df: pl.DataFrame, shown: pl.DataFrame) -> str:
    extra = df["series"].n_unique() - shown["series"].n_unique() if not df.is_empty() else 0
    return f" {extra} smaller series not drawn." if extra > 0 else ""
