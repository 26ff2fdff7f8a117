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
from pipeline.fit.store import load

__all__ = [
    "FittedModel",
    "GroupKey",
    "PhaseFit",
    "fit_frame",
    "fit_observations",
    "fit_warehouse",
    "load",
]


def fit_warehouse(layout, *, limit: int | None = None, claims: bool = True):  # type: ignore[no-untyped-def]
    """Fit every group in ``layout``'s warehouse and write ``cost_models`` (and ``claims``).

    Always writes the table, empty when nothing could be fitted, so that queries reading it work
    on any warehouse that has been fitted. Returns the fits.
    """
    from pipeline.fit import claims as claims_mod
    from pipeline.fit import run, store
    from pipeline.warehouse.derived import write_derived
    from pipeline.warehouse.views import connect

    con = connect(layout)
    fits, _skipped = run.fit_all(con, limit or run.MAX_REQUESTS)
    store.write(layout, fits)
    if claims:
        write_derived(layout, "claims", claims_mod.check_claims(connect(layout)))
    return fits
