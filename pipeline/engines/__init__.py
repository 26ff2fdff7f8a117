"""Query engines over the warehouse: DuckDB in process, or Apache Spark for fleet-scale data.

::

    from pipeline.engines import open_engine

    with open_engine("spark", "warehouse") as eng:        # or "duckdb"; a Layout works too
        df = eng.named("latency_percentiles")               # polars.DataFrame
        df = eng.named("throughput_by_window", {"window_s": 30})
        df = eng.sql("SELECT model, count(*) AS n FROM requests WHERE day >= $d GROUP BY 1",
                     {"d": "2026-11-01"})
        t = eng.arrow("SELECT ...")                          # pyarrow.Table

SQL is always written once, in DuckDB's dialect with ``$name`` parameters; the Spark engine
translates it with sqlglot. Results are collected to the driver, so ask for aggregates.
"""

from __future__ import annotations

import os
from typing import Any

from pipeline.engines.base import INPUT_VIEWS, Engine, EngineError
from pipeline.warehouse.layout import Layout, warehouse_path

ENGINES = ("duckdb", "spark")

__all__ = ["ENGINES", "INPUT_VIEWS", "Engine", "EngineError", "as_engine", "open_engine"]


def open_engine(
    name: str = "duckdb",
    warehouse: Layout | str | os.PathLike[str] | None = None,
    **options: Any,
) -> Engine:
    """Open ``name`` ("duckdb" or "spark") over a warehouse folder, Layout or (Spark) URI.

    Spark options: ``spark=`` an existing SparkSession, ``files="manifest"|"directory"``,
    ``master=`` (default $PIPELINE_SPARK_MASTER or local[*]), ``conf={...}`` for a new session.
    DuckDB options: ``database=`` (default in memory).
    """
    if isinstance(warehouse, Layout):
        layout_or_root: Layout | str = warehouse
    else:
        text = os.fspath(warehouse) if warehouse is not None else None
        remote = bool(text) and "://" in str(text)
        layout_or_root = str(text) if remote else Layout(warehouse_path(text))
    if name == "duckdb":
        from pipeline.engines.duckdb_engine import DuckDBEngine

        if not isinstance(layout_or_root, Layout):
            raise EngineError("the duckdb engine reads local warehouses; use --engine spark")
        return DuckDBEngine(layout_or_root, **options)
    if name == "spark":
        from pipeline.engines.spark_engine import SparkEngine

        return SparkEngine(layout_or_root, **options)
    raise EngineError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def as_engine(con: Any) -> Engine:
    """An Engine as it is, or an open DuckDB connection wrapped in one (left open on close).

    Lets code written against the Engine API (fit, report) still take the DuckDB connections
    that :func:`pipeline.warehouse.views.connect` returns.
    """
    if isinstance(con, Engine):
        return con
    from pipeline.engines.duckdb_engine import DuckDBEngine

    return DuckDBEngine(None, con=con)
