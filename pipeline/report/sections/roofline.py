"""Roofline: arithmetic intensity against achieved FLOP/s per GPU, under each GPU's ceilings."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from pipeline.report.context import Context
from pipeline.report.efficiency import points
from pipeline.report.html import Section, esc
from pipeline.report.sections.common import dropped_note, ranked, top_series, with_selector


def ceilings(pts: pl.DataFrame) -> pl.DataFrame:
    """min(peak FLOP/s, intensity x bandwidth) on a log grid, one line per GPU (and dtype peak)."""
    lo = max(float(pts["intensity"].min()) / 4, 0.1)
    hi = float(pts["intensity"].max()) * 4
    grid = np.geomspace(lo, max(hi, lo * 10), 40)
    rows = []
    for gpu, peak, bw in pts.select("gpu", "peak_flops", "bandwidth").unique().iter_rows():
        rows += [
            {"gpu": gpu, "intensity": float(x), "tflops": min(peak, x * bw) / 1e12} for x in grid
        ]
    return pl.DataFrame(rows)


def build(ctx: Context) -> Section:
    s = Section("roofline", "Roofline: where prefill and decode sit against the hardware")
    pts, unknown = points(ctx)
    if pts.is_empty():
        s.absent = (
            "No roofline: needs requests with prefill_s or TPOT whose model and GPU the catalog "
            f"knows{' (unknown: ' + ', '.join(unknown) + ')' if unknown else ''}."
        )
        return s
    pts = pts.with_columns((pl.col("flops_per_gpu") / 1e12).alias("tflops"))
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)")
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s per GPU")
    roof = (
        alt.Chart(ceilings(pts))
        .mark_line(color="#888", strokeWidth=1.5)
        .encode(x=x, y=y, detail="gpu:N", tooltip=["gpu:N", "intensity:Q", "tflops:Q"])
    )
    dots = (
        alt.Chart(ranked(pts))
        .mark_point(filled=True, size=60)
        .encode(
            x=x,
            y=y,
            color=alt.Color("series:N", title="deployment"),
            shape=alt.Shape("phase:N", title="phase"),
            tooltip=[
                "series:N", "phase:N", "bucket:Q", "requests:Q", "intensity:Q", "tflops:Q",
                alt.Tooltip("mfu:Q", format=".1%"), alt.Tooltip("mbu:Q", format=".1%"),
            ],
        )
    )  # fmt: skip
    dots = with_selector(dots, ranked(pts), "also_roofline")  # beyond 20 series: a menu
    chart = alt.layer(roof, dots).properties(width=640, height=340)
    note = (
        "Grey: each GPU's ceiling, min(peak FLOP/s, intensity × peak HBM bandwidth), from the "
        "catalog. Prefill points are prompt-length octaves, decode points are batch buckets; "
        "decode far below the sloped roof means fixed per-step costs dominate."
    )
    note += dropped_note(pts, top_series(pts), menu=True)
    if unknown:
        note += f" Not drawn (model or GPU not in the catalog): {', '.join(unknown)}."
    s.body = ctx.chart(chart, "Roofline") + f'<p class="note">{esc(note)}</p>'
    s.summary = {"points": pts.height}
    return s
