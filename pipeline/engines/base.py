"""What every engine offers: our SQL in, a small aggregated result out.

SQL given to an engine is always in our dialect (DuckDB's, ``$name`` parameters); an engine that
speaks another dialect translates it (see :mod:`pipeline.engines.translate`). Results come back
to Python as Arrow or Polars, so only aggregates belong here, never whole tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipeline.query.named import NamedQuery, QueryError, bind, load_query
from pipeline.warehouse.layout import Layout

# The views every engine registers; derived tables (cost_models, ...) come on top.
INPUT_VIEWS = ("requests", "tokens", "quarantine", "runs", "arrivals", "run_summaries")


class EngineError(QueryError):
    """A query failed in the engine (bad SQL, missing column, ...): one line for the user."""


def named_values(query: NamedQuery, params: Mapping[str, object] | None) -> dict[str, object]:
    """Check and complete a named query's parameters.

    Text values (from the command line) are coerced like ``pipeline query --param`` does; values
    that already have a Python type (from fit / report code) keep it.
    """
    given = dict(params or {})
    values = bind(query, {k: v if isinstance(v, str) else str(v) for k, v in given.items()})
    for k, v in given.items():
        if not isinstance(v, str):
            values[k] = v
    return values


_NARROW_INTS = (pl.Int8, pl.Int16, pl.Int32, pl.UInt8, pl.UInt16, pl.UInt32)


def normalize(t: pa.Table) -> pl.DataFrame:
    """Arrow result to Polars with the same dtypes whichever engine produced it.

    DuckDB sums integers into HUGEINT (Arrow decimal(38, 0)), Spark into BIGINT: integer
    decimals become Int64, narrow integers Int64, float32 Float64; zoned timestamps are shown
    in UTC (DuckDB reports its own zone name, e.g. Etc/UTC).
    """
    df = pl.from_arrow(t)
    assert isinstance(df, pl.DataFrame)
    casts = {}
    for name, dtype in df.schema.items():
        integer_decimal = isinstance(dtype, pl.Decimal) and (dtype.scale or 0) == 0
        if integer_decimal or dtype in _NARROW_INTS:
            casts[name] = pl.Int64
        elif dtype == pl.Float32:
            casts[name] = pl.Float64
    if casts:
        df = df.cast(casts)
    zoned = [
        pl.col(n).dt.convert_time_zone("UTC")
        for n, d in df.schema.items()
        if isinstance(d, pl.Datetime) and d.time_zone not in (None, "UTC")
    ]
    return df.with_columns(zoned) if zoned else df


class Engine:
    """Base class: subclasses implement :meth:`arrow`, :meth:`views` and :meth:`close`."""

    name = "?"

    def __init__(self, layout: Layout | None, root: str):
        self.layout = layout  # None when the warehouse is a URI only Spark can reach
        self.root = root

    # -- to implement --------------------------------------------------------------------
    def arrow(self, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
        """Run one statement of our SQL with bound parameters; the result as Arrow."""
        raise NotImplementedError

    def views(self) -> list[str]:
        """Names of the registered views: the input tables and the derived tables."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- shared --------------------------------------------------------------------------
    def sql(self, sql: str, params: Mapping[str, object] | None = None) -> pl.DataFrame:
        """Run our SQL; the (small, aggregated) result as a Polars frame."""
        return normalize(self.arrow(sql, params))

    def named_arrow(
        self,
        query: str | NamedQuery,
        params: Mapping[str, object] | None = None,
        queries_dir: str | Path | None = None,
    ) -> pa.Table:
        q = query if isinstance(query, NamedQuery) else load_query(query, _dir(queries_dir))
        return self.arrow(q.sql, named_values(q, params))

    def named(
        self,
        query: str | NamedQuery,
        params: Mapping[str, object] | None = None,
        queries_dir: str | Path | None = None,
    ) -> pl.DataFrame:
        """Run queries/NAME.sql with its parameters (defaults from the file's header)."""
        return normalize(self.named_arrow(query, params, queries_dir))

    def adhoc(self, sql: str, params: Mapping[str, str] | None = None) -> pa.Table:
        """One read-only statement typed by a user (``pipeline query --sql``)."""
        from pipeline.engines.translate import is_read_only

        if not is_read_only(sql):
            raise QueryError("give exactly one read-only statement (SELECT / WITH ...)")
        if params:
            raise QueryError(f"--param with --sql needs --engine duckdb (not {self.name})")
        self._restrict_adhoc()
        return self.arrow(sql)

    def _restrict_adhoc(self) -> None:
        """Engine-specific: keep user-written SQL to the warehouse's views."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.root}>"


def _dir(d: str | Path | None) -> Path | None:
    return Path(d) if d is not None else None
