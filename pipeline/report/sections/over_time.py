"""Over time: per run, arrival rate, requests in flight, waiting requests (where the log has a
scheduled time), output throughput and p90 TTFT per window, on one shared time axis (seconds since
each run's first arrival; queries/report_over_time.sql). Runs without arrival times have no time
axis: they are listed, never drawn.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.context import MAX_SERIES, Context
from pipeline.report.html import Section, esc
from pipeline.report.sections.common import label_expr, series_order

# Runs beyond the MAX_SERIES drawn whose windows the page embeds for the 'also show' menu (each
# run is ~40 windows x 5 panels; more would cost page size the other views need at fleet scale).
MENU_RUNS = 20

# (column, panel title with its unit)
PANELS = (
    ("arrivals_per_s", "arrivals (req/s)"),
    ("in_flight", "in flight (requests)"),
    ("waiting", "waiting (requests)"),
    ("output_tokens_per_s", "output throughput (tok/s)"),
    ("ttft_p90", "p90 TTFT (s)"),
)


def series_frame(df: pl.DataFrame) -> pl.DataFrame:
    """A series per run: the deployment's label, and the run where that label has several
    (several runs of one deployment, or two deployments that differ in a part the label omits)."""
    df = df.with_columns(label_expr(with_deployment=True))
    several = df.group_by("series").agg(pl.col("run_id").n_unique().alias("n_runs"))
    return (
        df.join(several, on="series")
        .with_columns(
            pl.when(pl.col("n_runs") > 1)
            .then(pl.col("series") + " · " + pl.col("run_id"))
            .otherwise(pl.col("series"))
            .alias("series")
        )
        .drop("n_runs")
    )


def _unclocked(ctx: Context) -> list[str]:
    sql = "SELECT DISTINCT run_id FROM requests WHERE t_arrival IS NULL ORDER BY run_id"
    return [str(r) for r in ctx._frame(ctx.con.arrow(sql))["run_id"].to_list()]


def _summary_only(ctx: Context) -> list[str]:
    """Runs known only from a tool's summary (no per-request rows, so no time axis); the
    all-data report only, since summaries carry no times to select a period by."""
    if not ctx.has("run_summaries") or ctx.period.start is not None or ctx.period.end is not None:
        return []
    sql = (
        "SELECT DISTINCT run_id FROM run_summaries "
        "WHERE run_id NOT IN (SELECT DISTINCT run_id FROM requests) ORDER BY run_id"
    )
    return [str(r) for r in ctx._frame(ctx.con.arrow(sql))["run_id"].to_list()]


_UNCLOCKED = "have no arrival times in their logs and no time axis"
_SUMMARY_ONLY = "are known only from their tools' summaries (no per-request rows, no time axis)"


def _not_drawn(ids: list[str], why: str, quote=str) -> str:  # type: ignore[no-untyped-def]
    """'N run(s) <why>, so they are not drawn: a, b and K more.' (the first 20 by id; ``quote``
    escapes the ids where the sentence goes into HTML as is)."""
    more = f" and {len(ids) - 20} more" if len(ids) > 20 else ""
    return f"{len(ids)} run(s) {why}, so they are not drawn: {quote(', '.join(ids[:20]))}{more}."


def build(ctx: Context) -> Section:
    s = Section("over_time", "Over time: load, queue, throughput and TTFT")
    df = ctx.query("report_over_time")
    unclocked = _unclocked(ctx)
    summarised = _summary_only(ctx)
    listed_summaries = (
        f'<p class="note">{_not_drawn(summarised, _SUMMARY_ONLY, esc)}</p>' if summarised else ""
    )
    listed = f'<p class="note">{_not_drawn(unclocked, _UNCLOCKED, esc)}</p>' if unclocked else ""
    if df is None or df.is_empty():
        s.absent = (
            "No run with arrival times: nothing to draw over time."
            + (f" {len(unclocked)} run(s) have no arrival times." if unclocked else "")
            + (" " + _not_drawn(summarised, _SUMMARY_ONLY) if summarised else "")
        )
        return s
    df = series_frame(df)
    runs = df.group_by("series").agg(pl.col("requests").first())  # one total per run
    order = series_order(runs)
    keep = order.head(MAX_SERIES)["series"]
    embedded = order.head(MAX_SERIES + MENU_RUNS)
    extra = embedded.filter(pl.col("rank") > MAX_SERIES)["series"].to_list()
    shown = df.join(embedded, on="series")
    drawn = shown.filter(pl.col("rank") <= MAX_SERIES)
    dropped = runs.height - keep.len()
    long = shown.unpivot(
        index=["series", "rank", "t_s", "window_s"],
        on=[c for c, _ in PANELS],
        variable_name="what",
    ).filter(pl.col("value").is_not_null())
    menu = "also_over_time"
    pick = (
        alt.param(
            name=menu,
            value="(none)",
            bind=alt.binding_select(options=["(none)", *extra], name="also show "),
        )
        if extra
        else None
    )
    x = alt.X("t_s:Q", title="time since the run's first arrival (s)")
    panels = []
    for col, title in PANELS:
        part = long.filter(pl.col("what") == col)
        if part.is_empty():
            continue
        panels.append(
            alt.Chart(part)
            .mark_line(point=True, interpolate="step-after" if col != "ttft_p90" else "linear")
            .encode(
                x=x,
                y=alt.Y("value:Q", title=title),
                color=alt.Color("series:N", title="run"),
                tooltip=["series:N", "t_s:Q", "window_s:Q", "value:Q"],
            )
            .properties(width=560, height=120)
        )
        if pick is not None:  # the drawn runs, plus the one the menu picks
            panels[-1] = panels[-1].transform_filter(
                f"datum.rank <= {MAX_SERIES} || datum.series == {menu}"
            )
    no_wait = drawn.group_by("series").agg(pl.col("waiting").is_null().all().alias("none"))
    n_no_wait = int(no_wait["none"].sum())
    chart = alt.vconcat(*panels).resolve_scale(x="shared")
    if pick is not None:
        chart = chart.add_params(pick)
    s.body = (
        ctx.chart(chart, "over time")
        + listed
        + listed_summaries
        + '<p class="note">Per window of each run (its length in the tooltip: a round number '
        "near a fortieth of the run): arrivals per second; requests in flight (arrived, not "
        "finished) and waiting (arrived, not scheduled) at the window's end; output tokens of "
        "the requests that finished in it, per second; p90 TTFT of the requests that arrived "
        "in it."
        + (
            f" {n_no_wait} run(s) log no scheduled time: their waiting requests are unknown, "
            "not drawn."
            if n_no_wait
            else ""
        )
        + (
            f" {dropped} smaller run(s) not drawn"
            + (
                f"; the 'also show' menu under the chart draws any one of the next {len(extra)}"
                if extra
                else ""
            )
            + "."
            if dropped > 0
            else ""
        )
        + "</p>"
    )
    s.summary = {
        "runs": int(df["run_id"].n_unique()),
        "drawn": int(keep.len()),
        "unclocked": len(unclocked),
        "without_waiting": n_no_wait,
        "panels": len(panels),
    }
    return s
