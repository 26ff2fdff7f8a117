"""Arrow <-> Polars conversions for the warehouse tables."""

from __future__ import annotations

from functools import cache

import polars as pl
import pyarrow as pa

from pipeline.schema.tables import DERIVED, TABLES, arrow_schema


@cache
def polars_dtype(t: pa.DataType) -> pl.DataType:
    return pl.from_arrow(pa.table({"x": pa.array([], type=t)})).schema["x"]


def polars_schema(table: str) -> dict[str, pl.DataType]:
    """The Polars schema of a stored or derived table (producers build their frames with it)."""
    return {c.name: polars_dtype(c.type) for c in {**TABLES, **DERIVED}[table]}


def empty_frame(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema=polars_schema(table))


def to_arrow(df: pl.DataFrame, table: str) -> pa.Table:
    """A frame with the table's columns, as Arrow in exactly the table's schema."""
    schema = arrow_schema(table)
    at = df.select(schema.names).to_arrow()
    return at.cast(schema) if at.schema != schema else at
