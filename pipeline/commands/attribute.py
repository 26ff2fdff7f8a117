"""``pipeline attribute``: what TTFT and decode time are made of; what changed between slices."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import polars as pl

from pipeline.commands._common import (
    console,
    existing_layout,
    model_config_option,
    warehouse_option,
)
from pipeline.commands.options import duckdb_only, output_options, param_option, parse_params
from pipeline.errors import DataError, UserError

# The unit beside every contribution (s, s/token, tokens/s): the metrics are mixed in one table.
SHOW = ["metric", "unit", "factor", "changed", "contribution", "share"]


def _summary(req: pl.DataFrame) -> pl.DataFrame:
    """Mean parts per deployment: the per-request table folded for the terminal."""
    parts = [c for c in req.columns if c.endswith("_s") and c not in ("tpot_s",)]
    return (
        req.group_by("model", "gpu", "gpu_count")
        .agg(pl.len().alias("requests"), *[pl.col(c).mean() for c in parts])
        .sort("model", "gpu", "gpu_count")
    )


@click.command("attribute")
@model_config_option
@warehouse_option
@click.option("--baseline", help="SQL condition on `requests` columns selecting the baseline.")
@click.option("--candidate", help="SQL condition selecting the slice compared with it.")
@param_option("Bind $NAME in the predicates (repeatable).")
@output_options()
@duckdb_only("its counterfactuals are simulated from rows read locally")
@click.option(
    "--max-requests",
    type=click.IntRange(min=50),
    default=None,
    help="Requests of the baseline's busiest server simulated per coalition [default: 2000].",
)
@click.option("--no-fit", is_flag=True, help="Do not run `pipeline fit` when no cost model exists.")
def command(
    warehouse: str | None,
    baseline: str | None,
    candidate: str | None,
    params: tuple[str, ...],
    fmt: str,
    out: Path | None,
    max_requests: int | None,
    no_fit: bool,
) -> None:
    """Split TTFT and decode time per request, and attribute changes between two slices.

    Always writes `attribution_requests` (per request: TTFT = queue + prefill compute + rest;
    decode = weight reads + KV reads + compute + overheads + interference) and
    `attribution_elasticities` (log-log slopes with 95 % intervals). With --baseline and
    --candidate it splits the change in mean and p90 TTFT, mean TPOT and output throughput
    among prompt length, output length, load, model size, hardware, batching, attention,
    quantisation and efficiency (exact Shapley values over simulated counterfactuals) and
    writes them as `attribution` (the report's waterfall).

    \b
    Example:
      pipeline attribute --baseline "arrival_at < '2026-11-01'" \\
                         --candidate "arrival_at >= '2026-11-01'"
      pipeline attribute --baseline "gpu = \\$a" --candidate "gpu = \\$b" \\
                         --param a=H100-SXM --param b=A100-80GB --format json
    """
    from pipeline import attribution

    if (baseline is None) != (candidate is None):
        raise UserError("give both --baseline and --candidate, or neither")
    layout = existing_layout(warehouse)
    try:
        req, el, comp = attribution.attribute(
            layout,
            baseline,
            candidate,
            parse_params(params, typed=True),
            fit_if_missing=not no_fit,
            max_requests=max_requests,
        )
    except attribution.PredicateError as exc:
        raise UserError(str(exc)) from None
    except attribution.AttributionError as exc:
        raise DataError(str(exc)) from None
    err = console()
    if comp is None:
        summary = {"per_request": _summary(req), "elasticities": el}
        _print(summary, fmt, {"requests": req.height}, out)
        return
    for note in comp.notes:
        err.print(f"note: {note}", highlight=False)
    units = dict(comp.frame.select("metric", "unit").unique().iter_rows())
    two = (
        pl.DataFrame([{"metric": m, "unit": units.get(m)} | v for m, v in comp.two_way.items()])
        if comp.two_way
        else pl.DataFrame()
    )
    meta = comp.as_dict()
    meta.pop("attribution")
    # On the terminal `changed` gives way to the unit (80 columns; an unchanged factor shows 0).
    show = [c for c in SHOW if fmt != "table" or c != "changed"]
    frames = {"attribution": comp.frame.select(show), "workload_vs_efficiency": two}
    _print(frames, fmt, meta, out)


def _print(
    frames: dict[str, pl.DataFrame], fmt: str, meta: dict[str, object], out: Path | None
) -> None:
    if fmt == "json":
        body = {k: v.to_dicts() for k, v in frames.items()} | {"meta": meta}
        text = json.dumps(body, indent=1, default=str) + "\n"
        sys.stdout.write(text) if out is None else out.write_text(text)
        return
    if fmt in ("csv", "parquet"):  # one table: the first (the attribution, or per request)
        first = next(iter(frames.values()))
        if fmt == "parquet":
            first.write_parquet(out)  # type: ignore[arg-type]  # --out is checked given
        else:
            text = first.write_csv()
            sys.stdout.write(text) if out is None else out.write_text(text)
        return
    from pipeline.query.output import render_table

    for name, f in frames.items():
        if f.height:
            render_table(f.to_arrow(), title=name)
    for k in ("not_attributable", "coalitions_simulated"):
        if meta.get(k):
            click.echo(f"{k}: {meta[k]}")
