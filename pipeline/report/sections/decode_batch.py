"""Decode: TPOT against the batch it ran in, under the bandwidth roofline of its GPU.

The batch is estimated from the logs (requests decoding on the same server at the same time).
The roofline line is the physics floor of one decode step at that batch (weights + KV read at
peak HBM bandwidth, or FLOPs at peak compute, whichever is slower), from the catalog; the fitted
line (dotted) is ``pipeline fit``'s step-cost model when there is one.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from pipeline.report.catalog_facts import catalog_facts
from pipeline.report.context import Context
from pipeline.report.fitted import deployment_key, load_fitted
from pipeline.report.html import Section, esc
from pipeline.report.sections.common import (
    dropped_note,
    label_expr,
    ranked,
    top_series,
    with_selector,
)


def _lines(ctx: Context, df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Roofline floor and fitted step time on a batch grid, per deployment drawn."""
    fitted = load_fitted(ctx)
    rows, unknown = [], []
    keys = ["series", "model", "gpu", "gpu_count", "weight_dtype", "kv_dtype"]
    for g in (
        df.group_by(keys, maintain_order=True)
        .agg(
            (pl.col("context_mean") * pl.col("requests")).sum() / pl.col("requests").sum(),
            pl.col("batch_mean").max().alias("bmax"),
        )
        .iter_rows(named=True)
    ):
        dep = catalog_facts(g["model"], g["gpu"], g["gpu_count"], g["weight_dtype"], g["kv_dtype"])
        grid = np.geomspace(1, max(4.0, g["bmax"] * 1.5), 16)
        ctx_len = float(g["context_mean"])
        if dep is None:
            unknown.append(g["series"])
        else:
            rows += [
                {"series": g["series"], "batch": float(b), "line": "roofline",
                 "ms": dep.decode_floor_s(b, ctx_len) * 1000}
                for b in grid
            ]  # fmt: skip
        fit = fitted.get(
            "decode",
            deployment_key(g["model"], g["gpu"], g["gpu_count"], g["weight_dtype"], g["kv_dtype"]),
        )  # the deployment's own fit: two fits that differ in TP or dtype never overwrite
        cost = fit[0] if fit else None
        if cost is not None:
            ys = np.asarray(cost.decode_step_time(grid, grid * ctx_len), dtype=float)
            rows += [
                {"series": g["series"], "batch": float(b), "line": "fitted", "ms": float(y) * 1000}
                for b, y in zip(grid, ys, strict=True)
            ]
    schema = {"series": pl.Utf8, "batch": pl.Float64, "line": pl.Utf8, "ms": pl.Float64}
    return pl.DataFrame(rows, schema=schema), unknown


def build(ctx: Context) -> Section:
    s = Section("decode-batch", "Decode: TPOT against batch size, with the bandwidth roofline")
    df = ctx.query("report_decode_batch")
    if df is None or df.is_empty():
        s.absent = "No successful requests with a TPOT (more than one output token) in this period."
        return s
    df = df.with_columns(label_expr(with_deployment=True))
    shown = top_series(df)
    obs = (
        ranked(df)
        .unpivot(
            index=["series", "rank", "batch_mean", "requests", "context_mean"],
            on=["tpot_p50", "tpot_p90"],
            variable_name="stat",
            value_name="seconds",
        )
        .with_columns(
            pl.col("stat").str.replace("tpot_", ""), (pl.col("seconds") * 1000).alias("ms")
        )
    )
    color = alt.Color("series:N", title="deployment")
    x = alt.X("batch_mean:Q", scale=alt.Scale(type="log"), title="decode batch (estimated)")
    y = alt.Y("ms:Q", scale=alt.Scale(type="log"), title="TPOT / step time (ms)")
    observed = (
        alt.Chart(obs)
        .mark_line(point=True)
        .encode(
            x=x,
            y=y,
            color=color,
            strokeDash=alt.StrokeDash("stat:N", title="percentile"),
            tooltip=["series:N", "stat:N", "batch_mean:Q", "ms:Q", "requests:Q", "context_mean:Q"],
        )
    )
    layers = [with_selector(observed, obs, "also_decode_batch")]  # beyond 20: a menu
    lines, unknown = _lines(ctx, shown)
    if lines.height:
        layers.append(
            alt.Chart(lines)
            .mark_line(strokeWidth=1.5, opacity=0.7)
            .encode(
                x=alt.X("batch:Q", scale=alt.Scale(type="log")),
                y=alt.Y("ms:Q", scale=alt.Scale(type="log")),
                color=color,
                strokeDash=alt.StrokeDash(
                    "line:N", scale=alt.Scale(domain=["roofline", "fitted"], range=[[6, 3], [2, 2]])
                ),
                tooltip=["series:N", "line:N", "batch:Q", "ms:Q"],
            )
        )
    chart = (
        alt.layer(*layers).resolve_scale(strokeDash="independent").properties(width=640, height=320)
    )
    notes = [
        "TPOT p50 / p90 per batch bucket; thin lines: the roofline floor of one decode step "
        "at the deployment's mean context (catalog peak bandwidth and FLOP/s), and the fitted "
        "step time when `pipeline fit` has run."
    ]
    if unknown:
        notes.append(
            f"No roofline for {', '.join(unknown)}: model or GPU not in the catalog "
            "(add it to pipeline_catalog.toml)."
        )
    s.body = ctx.chart(chart, "TPOT against batch size") + "".join(
        f'<p class="note">{esc(n)}{esc(dropped_note(df, shown, menu=True)) if i == 0 else ""}</p>'
        for i, n in enumerate(notes)
    )
    s.summary = {"buckets": df.height, "no_roofline": unknown}
    return s
