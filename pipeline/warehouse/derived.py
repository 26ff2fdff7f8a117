"""Write a derived table (cost_models, attribution, ...) atomically: tmp file, then rename."""

from __future__ import annotations

import os

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.warehouse.layout import Layout


def write_derived(
    layout: Layout, name: str, df: pl.DataFrame | pa.Table, part: str = "data"
) -> str:
    """Replace <warehouse>/<name>/<part>.parquet with df; readers see old or new, never half.

    An Arrow table is written as it is (its declared schema, nullability included)."""
    d = layout.root / name
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{part}.{os.getpid()}.tmp"
    if isinstance(df, pa.Table):
        pq.write_table(df, tmp, compression="zstd")
    else:
        df.write_parquet(tmp, compression="zstd")
    os.replace(tmp, d / f"{part}.parquet")
    return str(d / f"{part}.parquet")
