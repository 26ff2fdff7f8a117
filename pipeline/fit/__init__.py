"""``pipeline fit``: MFU, MBU and overheads of prefill and decode, fitted from serving logs.

Public API (docs/cost-models.md):

    fit_warehouse(layout) -> list[FittedModel]       fit every group, write cost_models (+ claims)
    load(layout) -> dict[GroupKey, FittedModel]      read cost_models back
    FittedModel.step_cost(phase) -> StepCost         the simulator's cost model, fitted
    fit_frame(frame, model, gpu, tp, ...)            fit a table of measured step times
    claims.check_claims(con) -> polars.DataFrame     the seed's claims as checks
"""

from __future__ import annotations

from pipeline.fit.core import FittedModel, GroupKey, PhaseFit, fit_observations
from pipeline.fit.frame import fit_frame
from pipeline.fit.store import load_fits

__all__ = [
    "FittedModel",
    "GroupKey",
    "PhaseFit",
    "fit_frame",
    "fit_observations",
    "fit_warehouse",
    "load_fits",
]


def fit_warehouse(  # type: ignore[no-untyped-def]
    layout,
    *,
    limit: int | None = None,
    claims: bool = True,
    engine: str = "duckdb",
    engine_options: dict | None = None,
    on_skip=None,
):
    """Fit every group in ``layout``'s warehouse and write ``cost_models`` (and ``claims``).

    Always writes the table, empty when nothing could be fitted, so that queries reading it work
    on any warehouse that has been fitted. Returns the fits.

    ``engine`` ("duckdb" or "spark", :func:`pipeline.engines.open_engine` with
    ``engine_options``) runs the fit's SQL: group counts, then each group's selection (at most
    ``limit`` requests and their emissions), which is all that comes back to Python. ``layout``
    may be a Spark-readable URI with ``engine="spark"``; the tables are then written with Spark.
    ``on_skip(key, reason)`` hears of every group left out (a model or GPU the catalog lacks,
    too little data), so that a caller can say so.
    """
    from pipeline.engines import open_engine
    from pipeline.fit import claims as claims_mod
    from pipeline.fit import run, store

    with open_engine(engine, layout, **(engine_options or {})) as eng:
        fits, skipped = run.fit_all(eng, limit or run.MAX_REQUESTS)
        for key, why in skipped:
            if on_skip is not None:
                on_skip(key, why)
        tables = {store.TABLE: store.to_frame(fits)}
        if claims:
            tables["claims"] = claims_mod.check_claims(eng)
        for name, frame in tables.items():
            _write(eng, name, frame)
    return fits


def _write(eng, name: str, frame) -> None:  # type: ignore[no-untyped-def]
    """A derived table next to the warehouse: atomically for a local one, else with Spark."""
    from pipeline.warehouse.derived import write_derived

    if eng.layout is not None:
        write_derived(eng.layout, name, frame)
        return
    from pipeline.engines.spark_engine import _join

    df = eng.spark.createDataFrame(frame.to_arrow())  # a URI: only the Spark engine opens one
    df.coalesce(1).write.mode("overwrite").parquet(_join(eng.root, name))
