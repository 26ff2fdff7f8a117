"""Write a derived table (cost_models, attribution, ...) atomically: tmp file, then rename."""

from __future__ import annotations

import os

import polars as pl

from pipeline.warehouse.layout import Layout


def write_derived(layout: Layout, name: str, df: pl.DataFrame, part: str = "data") -> str:
    """Replace <warehouse>/<name>/<part>.parquet with df; readers see old or new, never half."""
    d = layout.root / name
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{part}.{os.getpid()}.tmp"
    df.write_parquet(tmp, compression="zstd")
    os.replace(tmp, d / f"{part}.parquet")
    return str(d / f"{part}.parquet")
