"""Where TTFT went: queue, prefill and unattributed time, for all requests and the slowest 10 %."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, fmt_num, ms, pct, table
from pipeline.report.sections.common import label_expr, top_series

PARTS = {"queue_mean": "queue", "prefill_mean": "prefill", "unattributed_mean": "unattributed"}


def build(ctx: Context) -> Section:
    s = Section("ttft-breakdown", "TTFT decomposition: queue, prefill, rest")
    df = ctx.query("report_ttft_decomposition")
    if df is None or df.is_empty():
        s.absent = "No successful requests with a TTFT in this period."
        return s
    with_parts = int(df.filter(pl.col("cohort") == "all requests")["with_queue"].sum())
    if with_parts == 0:
        s.absent = (
            "The logs have no scheduled timestamps (queue_s / prefill_s are empty), "
            "so TTFT cannot be split into queue and prefill."
        )
        return s
    df = df.with_columns(label_expr())
    shown = top_series(df)
    long = shown.unpivot(
        index=["series", "cohort"], on=list(PARTS), variable_name="part", value_name="seconds"
    ).with_columns(pl.col("part").replace_strict(PARTS), (pl.col("seconds") * 1000).alias("ms"))
    chart = (
        alt.Chart(long)
        .mark_bar()
        .encode(
            y=alt.Y("cohort:N", title=None),
            x=alt.X("ms:Q", stack="zero", title="mean TTFT (ms)"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=list(PARTS.values())),
                title="part",
            ),
            row=alt.Row("series:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")),
            tooltip=["series:N", "cohort:N", "part:N", "ms:Q"],
        )
        .properties(width=520, height=50)
    )
    share = df.with_columns(
        (pl.col("queue_mean") / pl.col("ttft_mean")).alias("queue_share"),
        (pl.col("with_queue") / pl.col("requests")).alias("coverage"),
    )
    cols = [
        Col("model", "model"),
        Col("gpu", "GPU"),
        Col("cohort", "requests"),
        Col("requests", "n", fmt_num, True),
        Col("ttft_mean", "TTFT mean (ms)", ms, True),
        Col("queue_mean", "queue (ms)", ms, True),
        Col("prefill_mean", "prefill (ms)", ms, True),
        Col("unattributed_mean", "unattributed (ms)", ms, True),
        Col("queue_share", "queue share", pct, True),
        Col("coverage", "with timestamps", pct, True),
    ]
    s.body = (
        ctx.chart(chart, "TTFT decomposition")
        + '<p class="note">Means add up to the mean TTFT. "Slowest 10 %" are the requests at or '
        "above their model × GPU's p90 TTFT: a large queue share there means waiting for a "
        "slot, not slow prefill.</p>" + table(share, cols)
    )
    s.summary = {
        "queue_share": {
            f"{r['model']} · {r['gpu']} · {r['cohort']}": r["queue_share"]
            for r in share.iter_rows(named=True)
        }
    }
    return s
