"""Distributions: CDFs of TTFT, TPOT, ITL and E2E (log time axis) per deployment, and per run
where a deployment has a handful of runs (2-6), and of the workload's prompt and output lengths
(queries/report_distributions.sql: 14 quantiles each)."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Section, esc
from pipeline.report.sections.common import (
    dropped_note,
    label_expr,
    ranked,
    top_series,
    with_selector,
)

# p of the query's q00..q13 columns (its header says the same).
PS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
CHARTS = (
    ("ttft", "TTFT (s)", True),
    ("tpot", "TPOT (s per token)", True),
    ("itl", "ITL (s, single-token gaps)", True),
    ("e2e", "E2E latency (s)", True),
    ("prompt_tokens", "prompt length (tokens)", True),
    ("output_tokens", "output length (tokens)", True),
)


def long_frame(df: pl.DataFrame) -> pl.DataFrame:
    """One row per (metric, series, quantile): value and cumulative probability."""
    qs = [f"q{i:02d}" for i in range(len(PS))]
    base = df.with_columns(label_expr(with_deployment=True)).with_columns(
        pl.when(pl.col("run") != "")
        .then(pl.col("series") + " · " + pl.col("run"))
        .otherwise(pl.col("series"))
        .alias("series")
    )
    out = base.unpivot(index=["metric", "series", "n"], on=qs, variable_name="q", value_name="x")
    p = pl.col("q").replace_strict(dict(zip(qs, PS, strict=True)), return_dtype=pl.Float64)
    return out.with_columns(p.alias("p")).filter(pl.col("x") > 0).drop("q")


def build(ctx: Context) -> Section:
    s = Section("distributions", "Distributions: TTFT, TPOT, ITL, E2E and the workload")
    df = ctx.query("report_distributions")
    if df is None or df.is_empty():
        s.absent = "No successful requests to draw distributions of."
        return s
    pts = long_frame(df)
    parts, shown_series = [], set()
    for metric, title, log in CHARTS:
        m = pts.filter(pl.col("metric") == metric)
        if m.is_empty():
            parts.append(f'<p class="note">{esc(title)}: not in these logs.</p>')
            continue
        shown = top_series(m, weight="n")
        shown_series |= set(shown["series"].unique().to_list())
        data = ranked(m, weight="n")
        chart = (
            alt.Chart(data)
            .mark_line(point=True)
            .encode(
                x=alt.X("x:Q", title=title, scale=alt.Scale(type="log") if log else alt.Undefined),
                y=alt.Y(
                    "p:Q",
                    title="share of requests at or below (CDF)",
                    scale=alt.Scale(domain=[0, 1]),
                ),
                color=alt.Color("series:N", title="deployment"),
                tooltip=["series:N", "x:Q", "p:Q", "n:Q"],
            )
            .properties(width=520, height=220)
        )
        chart = with_selector(chart, data, f"also_{metric}")
        parts.append(ctx.chart(chart, f"CDF of {title}") + dropped_note(m, shown, menu=True))
    s.body = "".join(parts) + (
        '<p class="note">Quantiles p1 … p99.9 by linear interpolation (docs/metrics.md) of '
        "successful requests, per deployment (all its runs) and, where a deployment has 2-6 "
        "runs, per run (the series named with the run); time axes are logarithmic.</p>"
    )
    s.summary = {"series": len(shown_series), "metrics": int(pts["metric"].n_unique())}
    return s
