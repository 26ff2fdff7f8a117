"""Attribution waterfall: how much of a metric's change since the previous period each factor
explains (workload mix, prompt length, batching, attention, ...).

Input (``pipeline attribute`` writes it as the ``attribution`` table; tests build it by hand): a
small frame with a ``factor`` column and either ``contribution`` (in the metric's unit, seconds
for latencies) or ``share`` (fraction of the change); optional ``metric``, ``before``, ``after``.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, pct, sci, table

MAX_METRICS = 4


# Unit of each metric the attribution writes (pipeline/attribution/slices.py METRICS).
UNITS = {"ttft_mean": "s", "ttft_p90": "s", "tpot_mean": "s/token", "output_throughput": "tokens/s"}
_LABEL_CHARS = 48


def _labels(frame: pl.DataFrame) -> tuple[str, str]:
    """The two ends as the user named them (--baseline / --candidate), else the periods."""

    def named(col: str, fallback: str) -> str:
        if col in frame.columns and frame[col].drop_nulls().len():
            text = str(frame[col].drop_nulls()[0])
            short = text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"
            return f"{col}: {short}"
        return fallback

    return named("baseline", "previous period"), named("candidate", "this period")


def waterfall_frame(
    frame: pl.DataFrame, before: float | None = None, after: float | None = None
) -> pl.DataFrame:
    """Bars of a waterfall: the baseline's value, one step per factor, the candidate's value
    (by Shapley's efficiency the steps add up exactly, so it ends where the candidate is)."""
    first, last = _labels(frame)
    if "contribution" in frame.columns:
        contrib = frame["contribution"].cast(pl.Float64)
    elif "share" in frame.columns and before is not None and after is not None:
        contrib = frame["share"].cast(pl.Float64) * (after - before)
    elif "share" in frame.columns:
        contrib = frame["share"].cast(pl.Float64)  # in units of the total change
    else:
        raise ValueError("an attribution frame needs a 'contribution' or a 'share' column")
    steps, level = [], before or 0.0
    if before is not None:
        steps.append({"step": first, "start": 0.0, "end": before, "kind": "level"})
    for factor, c in zip(frame["factor"].cast(pl.Utf8), contrib, strict=True):
        c = float(c or 0.0)
        steps.append(
            {"step": str(factor), "start": level, "end": level + c,
             "kind": "increase" if c > 0 else "decrease"}
        )  # fmt: skip
        level += c
    if after is not None:
        steps.append({"step": last, "start": 0.0, "end": after, "kind": "level"})
    else:
        steps.append({"step": "total change", "start": 0.0, "end": level, "kind": "level"})
    out = pl.DataFrame(steps).with_row_index("order")
    return out.with_columns((pl.col("end") - pl.col("start")).alias("delta"))


def render_waterfall(ctx: Context, frame: pl.DataFrame, metric: str = "metric") -> str:
    """The waterfall chart and table for one metric's attribution frame."""
    before = _scalar(frame, "before")
    after = _scalar(frame, "after")
    wf = waterfall_frame(frame, before, after)
    order = wf["step"].to_list()
    chart = (
        alt.Chart(wf)
        .mark_bar()
        .encode(
            x=alt.X("step:N", sort=order, title=None, axis=alt.Axis(labelAngle=-30)),
            y=alt.Y("start:Q", title=f"{metric} ({UNITS.get(metric, 'metric units')})"),
            y2="end:Q",
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(
                    domain=["level", "increase", "decrease"],
                    range=["#8c8c8c", "#d62728", "#2ca02c"],
                ),
                legend=None,
            ),
            tooltip=["step:N", "start:Q", "end:Q", "delta:Q"],
        )
        .properties(width=560, height=260)
    )
    cols = [Col("factor", "factor")]
    if "contribution" in frame.columns:
        cols.append(Col("contribution", f"contribution ({UNITS.get(metric, '')})", sci, True))
    if "share" in frame.columns:
        cols.append(Col("share", "share of change", pct, True))
    return ctx.chart(chart, f"attribution of {metric}") + table(frame, cols) + _interaction(frame)


def _interaction(frame: pl.DataFrame) -> str:
    """The workload block's effect at either end's deployment, and their difference: the
    symmetric (Shapley) split shows the mean of the two, so a large interaction means the
    factors' shares depend on the order they are changed in."""
    wb, wc = _scalar(frame, "workload_at_baseline"), _scalar(frame, "workload_at_candidate")
    if wb is None or wc is None:
        return ""
    unit = str(frame["unit"][0]) if "unit" in frame.columns and frame.height else ""
    inter = wc - wb
    total = (_scalar(frame, "after") or 0.0) - (_scalar(frame, "before") or 0.0)
    rel = f" ({pct(abs(inter) / abs(total))} of the total change)" if total else ""
    return (
        f"<p class='note'>Interaction: the workload's effect is {sci(wb)} {esc(unit)} with the "
        f"baseline's deployment and {sci(wc)} {esc(unit)} with the candidate's; they differ by "
        f"{sci(inter)} {esc(unit)}{rel}. The bars split that difference evenly between the "
        "workload and efficiency blocks.</p>"
    )


def _scalar(frame: pl.DataFrame, col: str) -> float | None:
    if col not in frame.columns:
        return None
    vals = frame[col].drop_nulls()
    return float(vals[0]) if len(vals) else None


def section_from_frame(ctx: Context, frame: pl.DataFrame | None) -> Section:
    s = Section("attribution", "Attribution of the change between two slices")
    if frame is None or frame.is_empty():
        s.absent = "No attribution yet: `pipeline attribute` writes the attribution table."
        return s
    if "factor" not in frame.columns:
        s.absent = "The attribution table has no 'factor' column; nothing to draw."
        return s
    parts = []
    groups = (
        frame.partition_by("metric", maintain_order=True) if "metric" in frame.columns else [frame]
    )
    for g in groups[:MAX_METRICS]:
        metric = str(g["metric"][0]) if "metric" in g.columns else "change"
        parts.append(f"<h3>{esc(metric)}</h3>" + render_waterfall(ctx, g, metric))
    from pipeline.report.sections.model import note

    # Counterfactuals are replays of the fitted model: say how accurate it was on this data.
    s.body = "".join(parts) + note(ctx)
    s.summary = {"metrics": len(groups), "factors": frame.height}
    return s


def build(ctx: Context) -> Section:
    frame = None
    if ctx.has("attribution"):
        frame = ctx.table("attribution")
    return section_from_frame(ctx, frame)  # type: ignore[arg-type]
