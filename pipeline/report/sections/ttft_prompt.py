"""TTFT against prompt length (octave buckets), with the fitted prefill curves when fitted."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from pipeline.report.context import Context
from pipeline.report.fitted import load_fitted
from pipeline.report.html import Section, esc
from pipeline.report.sections.common import (
    dropped_note,
    label_expr,
    ranked,
    top_series,
    with_selector,
)

GRID = np.geomspace(16, 32768, 24)


def curves(ctx: Context, series: pl.DataFrame) -> pl.DataFrame:
    """Fitted prefill time on a prompt-length grid for the series drawn."""
    fitted = load_fitted(ctx)
    rows = []
    for model, gpu, name in series.select("model", "gpu", "series").unique().iter_rows():
        cost = fitted.prefill.get((model, gpu))
        if cost is None:
            continue
        ys = np.asarray(cost.prefill_time(GRID), dtype=float)
        rows += [
            {"series": name, "prompt_tokens": float(x), "seconds": float(y)}
            for x, y in zip(GRID, ys, strict=True)
        ]
    return pl.DataFrame(
        rows, schema={"series": pl.Utf8, "prompt_tokens": pl.Float64, "seconds": pl.Float64}
    )


def build(ctx: Context) -> Section:
    s = Section("ttft-prompt", "TTFT against prompt length")
    df = ctx.query("ttft_by_prompt_length")
    if df is None or df.is_empty():
        s.absent = "No successful requests with a TTFT in this period."
        return s
    df = df.with_columns(label_expr())
    shown = top_series(df)
    long = (
        ranked(df)
        .unpivot(
            index=["series", "rank", "mean_prompt_tokens", "requests"],
            on=["ttft_p50", "ttft_p90"],
            variable_name="stat",
            value_name="seconds",
        )
        .with_columns(
            pl.col("stat").str.replace("ttft_", ""), (pl.col("seconds") * 1000).alias("ms")
        )
    )
    x = alt.X("mean_prompt_tokens:Q", scale=alt.Scale(type="log"), title="prompt tokens (mean)")
    y = alt.Y("ms:Q", scale=alt.Scale(type="log"), title="TTFT (ms)")
    color = alt.Color("series:N", title="model · GPU")
    observed = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=x,
            y=y,
            color=color,
            strokeDash=alt.StrokeDash("stat:N", title="percentile"),
            tooltip=["series:N", "stat:N", "mean_prompt_tokens:Q", "ms:Q", "requests:Q"],
        )
    )
    observed = with_selector(observed, long, "also_ttft_prompt")  # beyond 20: a menu
    fit = curves(ctx, shown)
    layers = [observed]
    if fit.height:
        fit = fit.with_columns((pl.col("seconds") * 1000).alias("ms"))
        layers.append(
            alt.Chart(fit)
            .mark_line(strokeWidth=1, opacity=0.8, strokeDash=[2, 2])
            .encode(
                x=alt.X("prompt_tokens:Q", scale=alt.Scale(type="log")),
                y=alt.Y("ms:Q", scale=alt.Scale(type="log")),
                color=color,
                tooltip=["series:N", "prompt_tokens:Q", "ms:Q"],
            )
        )
    chart = alt.layer(*layers).properties(width=640, height=320)
    fitted = load_fitted(ctx)
    fit_note = (
        "Dotted: the fitted prefill time (cost_models)."
        if fit.height
        else "No fitted prefill curves: run `pipeline fit` to add them."
    )
    if fitted.ambiguous:
        fit_note += (
            f" {fitted.ambiguous} model x GPU key(s) have several fitted deployments (another"
            " engine, TP or limits): no fitted curve is drawn for them."
        )
    s.body = (
        ctx.chart(chart, "TTFT against prompt length")
        + f'<p class="note">p50 (solid) and p90 (dashed) TTFT per prompt-length octave. '
        f"{esc(fit_note)}{esc(dropped_note(df, shown, menu=True))}</p>"
    )
    s.summary = {
        "buckets": df.height,
        "fitted_curves": fit["series"].n_unique(),
        "fitted_ambiguous": fitted.ambiguous,
    }
    return s
