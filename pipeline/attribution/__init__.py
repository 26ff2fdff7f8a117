"""Attribution: what TTFT and decode time are made of, and what changed between two slices.

Public API (docs/attribution.md):

    per_request(con, fits) -> polars.DataFrame         attribution_requests rows: the parts of
                                                       each request's TTFT and decode time
    compare(con, baseline, candidate, fits, params)    Shapley split of mean / p90 TTFT, mean
        -> Comparison                                  TPOT and output throughput among factors
    elasticities(per_request_frame) -> DataFrame       log-log slopes with 95 % intervals
    run(layout, baseline=None, candidate=None, ...)    all of it, written as derived tables
"""

from __future__ import annotations

from typing import Any

import duckdb
import polars as pl

from pipeline.attribution.elasticity import SCHEMA as ELASTICITY_SCHEMA
from pipeline.attribution.elasticity import elasticities
from pipeline.attribution.per_request import SCHEMA as REQUESTS_SCHEMA
from pipeline.attribution.per_request import decompose, load_requests
from pipeline.attribution.predicates import PredicateError
from pipeline.attribution.slices import SCHEMA as ATTRIBUTION_SCHEMA
from pipeline.attribution.slices import AttributionError, Comparison, compare_slices
from pipeline.fit.core import FittedModel, GroupKey

TABLES = {
    "attribution": ATTRIBUTION_SCHEMA,
    "attribution_requests": REQUESTS_SCHEMA,
    "attribution_elasticities": ELASTICITY_SCHEMA,
}

__all__ = [
    "TABLES",
    "AttributionError",
    "Comparison",
    "PredicateError",
    "attribute",
    "compare_slices",
    "elasticities",
    "per_request",
    "write_empty_if_absent",
]


def per_request(con: duckdb.DuckDBPyConnection, fits: dict[GroupKey, FittedModel]) -> pl.DataFrame:
    return decompose(load_requests(con), fits)


def attribute(
    layout,  # type: ignore[no-untyped-def]
    baseline: str | None = None,
    candidate: str | None = None,
    params: dict[str, Any] | None = None,
    *,
    fit_if_missing: bool = True,
    max_requests: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, Comparison | None]:
    """Per-request parts and elasticities, and the comparison when both predicates are given.

    Writes ``attribution_requests``, ``attribution_elasticities`` and ``attribution`` (empty
    without a comparison, so that the report and queries always find it). Fits the cost models
    first when the warehouse has none.
    """
    from pipeline.attribution.counterfactual import MAX_REQUESTS
    from pipeline.fit import fit_warehouse, load_fits
    from pipeline.warehouse.derived import write_derived
    from pipeline.warehouse.views import connect

    con = connect(layout)
    fits = load_fits(layout, con)
    if not fits and fit_if_missing:
        fit_warehouse(layout)
        con = connect(layout)
        fits = load_fits(layout, con)
    req = per_request(con, fits)
    el = elasticities(req)
    comp = None
    if baseline is not None and candidate is not None:
        comp = compare_slices(
            con, baseline, candidate, fits, params, max_requests=max_requests or MAX_REQUESTS
        )
    write_derived(layout, "attribution_requests", req)
    write_derived(layout, "attribution_elasticities", el)
    frame = comp.frame if comp is not None else pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    write_derived(layout, "attribution", frame)
    return req, el, comp


def write_empty_if_absent(layout) -> None:  # type: ignore[no-untyped-def]
    """Write the attribution tables empty where they do not exist yet (for `pipeline fit` to
    call, so that named queries over them run on any fitted warehouse)."""
    from pipeline.warehouse.derived import write_derived

    for name, schema in TABLES.items():
        if not any((layout.root / name).glob("*.parquet")):
            write_derived(layout, name, pl.DataFrame(schema=schema))
