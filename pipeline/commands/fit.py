"""``pipeline fit``: prefill and decode cost models (MFU, MBU, overheads) from the warehouse."""

from __future__ import annotations

import click

from pipeline.commands._common import console, engine_option, layout_for, warehouse_option
from pipeline.engines import EngineError
from pipeline.errors import DataError, UserError


@click.command("fit")
@warehouse_option
@click.option(
    "--max-requests",
    type=click.IntRange(min=100),
    default=None,
    help="Requests read per group (earliest whole time windows) [default: 40000].",
)
@click.option("--no-claims", is_flag=True, help="Do not write the claims table.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@engine_option("Engine for the fit's SQL (spark: only each group's selection comes back)")
def command(
    warehouse: str | None, max_requests: int | None, no_claims: bool, quiet: bool, engine: str
) -> None:
    """Fit MFU, MBU and overheads per GPU x model x GPU count x engine configuration.

    Rebuilds the batch of every engine step from per-token times (or from the requests in
    flight when there are none), fits a prefill and a decode step-time model with a robust
    (Huber) estimator, and writes the `cost_models` table (and `claims`). Other stages read it
    with `pipeline.fit.load(layout)`.

    \b
    Example:
      pipeline fit --warehouse warehouse/
      pipeline fit --warehouse warehouse/ --engine spark
      pipeline query cost_mfu_mbu
    """
    from pipeline.fit import fit_warehouse

    if warehouse and "://" in warehouse:
        if engine != "spark":
            raise UserError(f"{warehouse}: a URI warehouse is read with --engine spark")
        where = warehouse
    else:
        where = layout_for(warehouse)
        if not where.root.exists():
            raise DataError(f"no warehouse at {where.root}; run `pipeline ingest` first")
    try:
        fits = fit_warehouse(where, limit=max_requests, claims=not no_claims, engine=engine)
    except EngineError as exc:
        raise DataError(str(exc)) from None
    out = console(quiet)
    if not fits:
        out.print("fit: no group had enough data; wrote an empty cost_models table")
        return
    for fm in fits:
        k = fm.key
        parts = [f"{k.model} on {k.gpu_count} x {k.gpu}"]
        for p in (fm.prefill, fm.decode):
            if p is not None:
                parts.append(
                    f"{p.phase}: MFU {p.mfu:.1%} MBU {p.mbu:.1%} "
                    f"step {p.step_overhead * 1e3:.2f} ms, n {p.n}, MAPE {p.mape_test:.1%}"
                )
        out.print(" | ".join(parts))
