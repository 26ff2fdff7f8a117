"""Write a derived table (cost_models, attribution, ...) atomically: tmp file, then rename.

Every frame is checked against the table's declaration in ``pipeline/schema/derived.py`` first:
the same columns in the same order, each castable to its declared type, and no null where the
contract says never. A producer that drifted from the contract fails here, with the difference
named, before anything reaches the warehouse.
"""

from __future__ import annotations

import os

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.schema.derived import DERIVED
from pipeline.schema.tables import arrow_schema
from pipeline.warehouse.layout import Layout


class ContractError(ValueError):
    """A derived frame that does not match its table's declaration (a bug, not user data)."""


def conform(name: str, df: pl.DataFrame | pa.Table) -> pa.Table:
    """``df`` as an Arrow table of the declared schema of derived table ``name``."""
    table = df if isinstance(df, pa.Table) else df.to_arrow()
    schema = arrow_schema(name)
    if table.column_names != schema.names:
        missing = [c for c in schema.names if c not in table.column_names]
        extra = [c for c in table.column_names if c not in schema.names]
        raise ContractError(
            f"{name}: columns differ from pipeline/schema/derived.py (missing {missing}, "
            f"not declared {extra}, or another order)"
        )
    for f in schema:
        if not f.nullable and table.column(f.name).null_count:
            raise ContractError(f"{name}.{f.name} is declared never null but has nulls")
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise ContractError(f"{name}: a column does not cast to its declared type: {e}") from e


def write_derived(
    layout: Layout, name: str, df: pl.DataFrame | pa.Table, part: str = "data"
) -> str:
    """Replace <warehouse>/<name>/<part>.parquet with df; readers see old or new, never half.

    Tables declared in the contract are checked and written with their declared schema
    (nullability and column docs included); others (a user's own) as they are."""
    d = layout.root / name
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{part}.{os.getpid()}.tmp"
    if name in DERIVED:
        df = conform(name, df)
    if isinstance(df, pa.Table):
        pq.write_table(df, tmp, compression="zstd")
    else:
        df.write_parquet(tmp, compression="zstd")
    os.replace(tmp, d / f"{part}.parquet")
    return str(d / f"{part}.parquet")
