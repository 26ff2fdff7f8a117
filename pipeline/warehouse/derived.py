"""Write a derived table (cost_models, attribution, ...) by the warehouse's commit protocol.

Stage -> lock -> publish, as ingest and replay write-back (``writer.StagedWrite``): the frame is
written and fsynced under ``_staging/<tag>`` (``tag`` locked by this process, so ``recover``
leaves it alone while we live and removes it after a kill); then, holding the table's lock
(``_locks/derived-<table>.lock``, waited for, never "busy": the one lock behaviour of every
writer), it is renamed over ``<table>/<part>.parquet`` and the folder fsynced. The rename is the
commit point: readers see the old file or the new one, never half of either; two writers of
one table publish one after the other, and the later one's frame is what stays.

Every frame is checked against the table's declaration in ``pipeline/schema/derived.py`` first:
the same columns in the same order, each castable to its declared type, and no null where the
contract says never. A producer that drifted from the contract fails here, with the difference
named, before anything reaches the warehouse.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.schema.derived import DERIVED
from pipeline.schema.tables import arrow_schema
from pipeline.warehouse.layout import Layout, fsync_dir
from pipeline.warehouse.writer import crash_point


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
    layout: Layout,
    name: str,
    df: pl.DataFrame | pa.Table | Iterable[pl.DataFrame],
    part: str = "data",
) -> str:
    """Replace <warehouse>/<name>/<part>.parquet with df; readers see old or new, never half.

    Tables declared in the contract are checked and written with their declared schema
    (nullability and column docs included); others (a user's own) as they are. ``df`` may be
    an iterable of frames of a declared table (written as they come, in bounded memory: a
    replay's millions of steps)."""
    if not isinstance(df, pl.DataFrame | pa.Table):
        if name not in DERIVED:
            raise ContractError(f"{name}: only a declared table can be written in batches")
        return _publish(layout, name, part, lambda path: _write_batches(name, df, path))
    if name in DERIVED:
        df = conform(name, df)  # a drifted producer fails before anything is staged
    return _publish(layout, name, part, lambda path: _write_one(df, path))


def _write_one(df: pl.DataFrame | pa.Table, path: Path) -> None:
    if isinstance(df, pa.Table):
        pq.write_table(df, path, compression="zstd")
    else:
        df.write_parquet(path, compression="zstd")


def _write_batches(name: str, frames: Iterable[pl.DataFrame], path: Path) -> None:
    schema = arrow_schema(name)
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for frame in frames:
            writer.write_table(conform(name, frame))  # each batch checked, as a whole frame is


def _publish(layout: Layout, name: str, part: str, write: Callable[[Path], None]) -> str:
    layout.ensure()
    _recover(layout, name)
    tag = f"derived-{name}-{part}-{os.getpid()}"
    staged = layout.staging_dir / tag / f"{part}.parquet"
    dest = layout.root / name / f"{part}.parquet"
    with layout.lock(tag):  # ours alone; recover() skips a staging folder whose lock is held
        staged.parent.mkdir(parents=True, exist_ok=True)
        try:
            write(staged)
            with open(staged, "rb") as f:
                os.fsync(f.fileno())
            crash_point("derived_before_publish")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with layout.lock(f"derived-{name}", blocking=True):
                os.replace(staged, dest)
                fsync_dir(dest.parent)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(staged.parent)
    with contextlib.suppress(OSError):  # a per-process name: nobody else waits on it
        (layout.locks_dir / f"{tag}.lock").unlink()
    return str(dest)


def _recover(layout: Layout, name: str) -> None:
    """Remove what killed writers of ``name`` left in _staging (their locks are free)."""
    for d in layout.staging_dir.glob(f"derived-{name}-*"):
        with layout.lock(d.name) as got:
            if not got:
                continue  # a live writer's
            shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(OSError):
            (layout.locks_dir / f"{d.name}.lock").unlink()
