"""Latency against load: for deployments with runs at several loads (a rate sweep), each run's
p50/p90/p99 TTFT and TPOT against its achieved request rate and output throughput, with the SLO
lines and the knee; where the deployment has a calibrated model, the replayed curve beside the
points, extended past the highest observed rate.

Knee (issue 14): the lowest achieved rate whose p90 TTFT exceeds twice the p90 TTFT of the
lowest-rate run. The replayed curve serves the highest-rate run's requests (lengths and arrival
pattern) again with arrivals compressed or stretched in time to each rate, through the same
scheduler and step costs `pipeline fit` calibrated (``fit.calibrate.simulate_run``); it is a
model's prediction and is drawn as a line, never as observed points.
"""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, fmt_num, ms, table
from pipeline.report.sections.common import (
    dropped_note,
    label_expr,
    ranked,
    top_series,
    with_selector,
)

KNEE_FACTOR = 2.0
REPLAY_SCALES = 8  # rates on the replayed curve
REPLAY_BEYOND = 1.5  # ... up to this multiple of the replayed run's offered rate
MAX_REPLAY_REQUESTS = 3000  # per replayed point: the report stays a report, not a benchmark


def knees(df: pl.DataFrame) -> pl.DataFrame:
    """Per deployment: runs, rate range and the knee rate (null when no run is past it)."""
    rows = []
    for (dep,), g in df.sort("request_rate").group_by("deployment", maintain_order=True):
        base = g["ttft_p90"][0]
        past = g.filter(pl.col("ttft_p90") > KNEE_FACTOR * base)
        rows.append(
            {
                "deployment": dep,
                "series": g["series"][0],
                "runs": g.height,
                "rate_lo": g["request_rate"].min(),
                "rate_hi": g["request_rate"].max(),
                "base_ttft_p90": base,
                "knee_rate": past["request_rate"][0] if past.height else None,
                # the knee run's output throughput: the knee on the throughput axis
                "knee_output_throughput": (
                    past["output_throughput"][0]
                    if past.height and "output_throughput" in past.columns
                    else None
                ),
            }
        )
    return pl.DataFrame(rows)


def _run_arrays(ctx: Context, run_id: str, deployment: str) -> pl.DataFrame:
    """One deployment's requests of a run (a run may hold several deployments)."""
    rid, dep = run_id.replace("'", "''"), deployment.replace("'", "''")
    return ctx._frame(
        ctx.con.arrow(
            f"""SELECT t_arrival, prompt_tokens, output_tokens FROM requests
            WHERE run_id = '{rid}' AND deployment = '{dep}' AND status = 'ok'
              AND t_arrival IS NOT NULL
              AND prompt_tokens > 0 AND output_tokens IS NOT NULL
            ORDER BY t_arrival"""
        )
    )


def replayed(ctx: Context, df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The calibrated model's curve per deployment that has a calibration; and notes."""
    from pipeline.fit.calibrate import Deployment, Run, simulate_run, tpot_of
    from pipeline.schema import deployment as key

    empty = pl.DataFrame(
        schema={"series": pl.Utf8, "request_rate": pl.Float64,
                "output_throughput": pl.Float64, "stat": pl.Utf8,
                "ttft": pl.Float64, "tpot": pl.Float64}
    )  # fmt: skip
    if not ctx.has("calibration"):
        return empty, []
    cal = ctx.table("calibration")
    rows, notes = [], []
    for (dep_id,), g in df.sort("request_rate").group_by("deployment", maintain_order=True):
        c = cal.filter(pl.col("deployment") == dep_id)
        if c.is_empty():
            continue
        first = c.row(0, named=True)
        if first["scheduler"] == "distserve":
            notes.append(f"{g['series'][0]}: no replayed curve for a disaggregated deployment")
            continue
        values = {r["parameter"]: r["value"] for r in c.iter_rows(named=True)}
        dep = Deployment(**{n: first[n] for n in key.NAMES})
        top = g.row(g.height - 1, named=True)
        arr = _run_arrays(ctx, top["run_id"], str(dep_id)).head(MAX_REPLAY_REQUESTS)
        if arr.height < 20:
            continue
        t = arr["t_arrival"].to_numpy().astype(float)
        t = t - t[0]
        prompt = arr["prompt_tokens"].to_numpy().astype(np.int64)
        output = arr["output_tokens"].to_numpy().astype(np.int64)
        kv = int(values.get("kv_tokens") or 0)
        longest = int((prompt + output).max())
        span = float(t[-1]) if t[-1] > 0 else 1.0
        base_rate = (len(t) - 1) / span  # the top run's offered rate (its requests replayed)
        # Offered rates up to REPLAY_BEYOND x the replayed run's *offered* rate: a saturated
        # top run achieves less than it was offered (DistServe's 4 req/s run: 2.48 req/s), and
        # scaling the achieved rate left every replay offered less than the real run was.
        lo = float(g["request_rate"].min())
        hi = max(float(g["request_rate"].max()), base_rate) * REPLAY_BEYOND
        for rate in np.geomspace(max(lo * 0.8, 1e-6), hi, REPLAY_SCALES):
            arrival = t * (base_rate / rate)
            run = Run("replay", arrival, prompt, output, np.zeros_like(arrival), arrival * 0)
            ttft, e2e = simulate_run(values, dep, first["scheduler"], run, max(kv, 1), longest)
            duration = float(np.max(run.arrival + e2e))  # run.arrival starts at 0
            tpot = tpot_of(ttft, e2e, run.output)
            achieved = run.n / duration if duration > 0 else math.nan
            tokens = float(run.output.sum()) / duration if duration > 0 else math.nan
            for p in (50, 90, 99):
                rows.append(
                    {
                        "series": g["series"][0],
                        "request_rate": achieved,
                        "output_throughput": tokens,
                        "stat": f"p{p}",
                        "ttft": float(np.percentile(ttft, p)),
                        "tpot": float(np.percentile(tpot, p)) if len(tpot) else math.nan,
                    }
                )
    return (pl.DataFrame(rows, schema=empty.schema) if rows else empty), notes


def _chart(
    ctx: Context,
    obs: pl.DataFrame,
    rep: pl.DataFrame,
    k: pl.DataFrame,
    what: str,
    x: str,
    slo: float,
) -> str:
    unit = "ms" if what == "ttft" else "ms per token"
    title = f"{what.upper()} ({unit})"
    stats = [f"{what}_p50", f"{what}_p90", f"{what}_p99"]
    long = (
        ranked(obs)
        .unpivot(
            index=["series", "rank", x, "run_id"], on=stats, variable_name="stat", value_name="s"
        )
        .with_columns(pl.col("stat").str.replace(f"{what}_", ""), (pl.col("s") * 1000).alias("ms"))
    )
    xt = "achieved request rate (req/s)" if x == "request_rate" else "output throughput (tok/s)"
    color = alt.Color("series:N", title="deployment")
    dash = alt.StrokeDash("stat:N", title="percentile")
    points = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:Q", title=xt),
            y=alt.Y("ms:Q", title=title, scale=alt.Scale(type="log")),
            color=color,
            strokeDash=dash,
            tooltip=["series:N", "run_id:N", "stat:N", f"{x}:Q", "ms:Q"],
        )
    )
    # Beyond 20 deployments: the 20 with the most requests, a menu for any other one (the
    # replayed curves and knees are the drawn deployments' only).
    layers = [with_selector(points, long, f"also_load_{what}_{x}")]
    if rep.height:  # the replayed curve, on either axis (it records both)
        r = rep.with_columns((pl.col(what) * 1000).alias("ms")).filter(pl.col("ms") > 0)
        layers.append(
            alt.Chart(r)
            .mark_line(strokeWidth=1, opacity=0.6, strokeDash=[2, 2])
            .encode(
                x=f"{x}:Q",
                y=alt.Y("ms:Q", scale=alt.Scale(type="log")),
                color=color,
                detail="stat:N",
                tooltip=["series:N", "stat:N", f"{x}:Q", "ms:Q"],
            )
        )
    knee_x = "knee_rate" if x == "request_rate" else "knee_output_throughput"
    marked = k.filter(pl.col(knee_x).is_not_null()) if knee_x in k.columns else k.head(0)
    if marked.height:  # the knee, a vertical rule per deployment (its run's x on this axis)
        layers.append(
            alt.Chart(marked.select("series", knee_x))
            .mark_rule(strokeDash=[1, 2], strokeWidth=2)
            .encode(x=f"{knee_x}:Q", color=color, tooltip=["series:N", f"{knee_x}:Q"])
        )
    slo_frame = pl.DataFrame({"ms": [slo * 1000], "label": [f"SLO {slo * 1000:g} ms"]})
    layers.append(
        alt.Chart(slo_frame).mark_rule(color="#d62728", strokeDash=[6, 3]).encode(y="ms:Q")
    )
    return ctx.chart(alt.layer(*layers).properties(width=300, height=240), f"{what} vs {x}")


def summary_knees(sw: pl.DataFrame) -> pl.DataFrame:
    """Per summary-only sweep: the highest TTFT percentile every run records, and the knee
    by the same rule on it (issue 14: "or the highest recorded percentile")."""
    rows = []
    for (sweep,), g in sw.sort("request_rate").group_by("series", maintain_order=True):
        col = next(c for c in ("ttft_p99", "ttft_p90", "ttft_p50") if g[c].is_not_null().all())
        base = g[col][0]
        past = g.filter(pl.col(col) > KNEE_FACTOR * base)
        rows.append(
            {
                "series": sweep,
                "runs": g.height,
                "percentile": col.removeprefix("ttft_"),
                "base": base,
                "knee_rate": past["request_rate"][0] if past.height else None,
                "knee_output_throughput": (
                    past["output_throughput"][0]
                    if past.height and "output_throughput" in past.columns
                    else None
                ),
            }
        )
    return pl.DataFrame(rows)


def _summary_chart(sw: pl.DataFrame, k: pl.DataFrame, what: str, x: str, slo: float):  # type: ignore[no-untyped-def]
    """One summary-only sweep chart: the percentiles of ``what`` the summaries record against
    achieved rate or output throughput, the SLO rule and each sweep's knee (by its TTFT, at its
    run's rate or throughput). None when no run records ``what`` or the x."""
    cols = [c for c in (f"{what}_p50", f"{what}_p90", f"{what}_p99") if c in sw.columns]
    long = (
        sw.filter(pl.col(x).is_not_null())
        .unpivot(index=["series", x, "run_id"], on=cols, variable_name="stat", value_name="s")
        .filter(pl.col("s").is_not_null())
        .with_columns(pl.col("stat").str.replace(f"{what}_", ""), (pl.col("s") * 1000).alias("ms"))
    )
    if long.is_empty():
        return None
    unit = {"ttft": "ms", "tpot": "ms per token", "itl": "ms between tokens"}[what]
    xt = "achieved request rate (req/s)" if x == "request_rate" else "output throughput (tok/s)"
    color = alt.Color("series:N", title="sweep (summary file)")
    layers = [
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:Q", title=xt),
            y=alt.Y("ms:Q", title=f"{what.upper()} ({unit})", scale=alt.Scale(type="log")),
            color=color,
            strokeDash=alt.StrokeDash("stat:N", title="percentile"),
            tooltip=["series:N", "run_id:N", "stat:N", f"{x}:Q", "ms:Q"],
        ),
        alt.Chart(pl.DataFrame({"ms": [slo * 1000]}))
        .mark_rule(color="#d62728", strokeDash=[6, 3])
        .encode(y="ms:Q"),
    ]
    knee_x = "knee_rate" if x == "request_rate" else "knee_output_throughput"
    marked = k.filter(pl.col(knee_x).is_not_null()) if knee_x in k.columns else k.head(0)
    if marked.height:  # the knee, as on the per-request curves (its run's x on this axis)
        layers.append(
            alt.Chart(marked.select("series", knee_x))
            .mark_rule(strokeDash=[1, 2], strokeWidth=2)
            .encode(x=f"{knee_x}:Q", color=color, tooltip=["series:N", f"{knee_x}:Q"])
        )
    return alt.layer(*layers).properties(width=300, height=240)


def summary_sweeps(ctx: Context) -> tuple[str, dict]:
    """Sweeps known only from the tools' summaries: TTFT and TPOT (ITL where a summary holds no
    TPOT, as SGLang's) against achieved rate and output throughput, with the SLOs and knees.
    Summaries carry no times, so they appear in the all-data report only."""
    if not ctx.has("run_summaries") or ctx.period.start is not None or ctx.period.end is not None:
        return "", {}
    sw = ctx.query("report_load_summaries")
    if sw is None or sw.is_empty():
        return "", {}
    sw = sw.with_columns(
        pl.col("source_file").str.split("/").list.last().alias("series"),
    )
    k = summary_knees(sw)
    o = ctx.options
    # ITL for the sweeps whose summaries hold no TPOT (SGLang's), per sweep: a vLLM sweep beside
    # an SGLang one keeps both their per-token charts.
    with_tpot = sw.group_by("series").agg(
        pl.any_horizontal(pl.col("tpot_p50", "tpot_p99").is_not_null()).any().alias("has")
    )
    no_tpot = with_tpot.filter(~pl.col("has"))["series"].implode()
    frames = {"ttft": sw, "tpot": sw, "itl": sw.filter(pl.col("series").is_in(no_tpot))}
    charts = {
        f"{what.upper()} vs {'rate' if x == 'request_rate' else 'throughput'}": _summary_chart(
            frames[what], k, what, x, slo
        )
        for what, slo in (("ttft", o.slo_ttft), ("tpot", o.slo_tpot), ("itl", o.slo_tpot))
        for x in ("request_rate", "output_throughput")
    }
    html = (
        "<h3>Sweeps known from the tools' summaries only</h3>"
        + "".join(
            ctx.chart(c, f"{name} (tool summaries)") for name, c in charts.items() if c is not None
        )
        + table(
            k,
            [
                Col("series", "sweep"),
                Col("runs", "runs", fmt_num, True),
                Col("percentile", "percentile used"),
                Col("base", "at the lowest rate (ms)", ms, True),
                Col("knee_rate", "knee (req/s)", lambda v: "none" if v is None else fmt_num(v, 2)),
            ],
        )
        + '<p class="note">No per-request rows: the percentiles are the ones the tool wrote '
        "(a summary may hold only medians); the knee uses the highest percentile every run of "
        "the sweep records. Achieved rate = completed / duration from the summary.</p>"
    )
    return html, {"summary_sweeps": k.height, "summary_runs": sw.height}


def build(ctx: Context) -> Section:
    s = Section("load", "Latency against load")
    df = ctx.query("report_load_curve")
    extra, extra_summary = summary_sweeps(ctx)
    if df is None or df.is_empty():
        if extra:
            s.body, s.summary = extra, {"deployments": 0, "runs": 0, **extra_summary}
            return s
        s.absent = (
            "No deployment has runs at several loads (a rate sweep): latency-vs-load curves "
            "need two runs or more of one deployment with arrival times."
        )
        return s
    df = df.with_columns(label_expr(with_deployment=True))
    # Two deployments with the same label (another engine, say) stay two series.
    dup = df.group_by("series").agg(pl.col("deployment").n_unique().alias("n"))
    if (dup["n"] > 1).any():
        df = df.with_columns((pl.col("series") + " [" + pl.col("deployment") + "]").alias("series"))
    shown = top_series(df)
    rep, notes = replayed(ctx, shown)
    o = ctx.options
    k = knees(df)
    k_shown = k.filter(pl.col("series").is_in(shown["series"].unique().implode()))
    charts = (
        _chart(ctx, df, rep, k_shown, "ttft", "request_rate", o.slo_ttft)
        + _chart(ctx, df, rep, k_shown, "tpot", "request_rate", o.slo_tpot)
        + _chart(ctx, df, rep, k_shown, "ttft", "output_throughput", o.slo_ttft)
        + _chart(ctx, df, rep, k_shown, "tpot", "output_throughput", o.slo_tpot)
    )

    def knee(v: object) -> str:
        return "none within the runs" if v is None else fmt_num(v, 2)

    knee_table = table(
        k,
        [
            Col("series", "deployment"),
            Col("runs", "runs", fmt_num, True),
            Col("rate_lo", "lowest rate (req/s)", lambda v: fmt_num(v, 2), True),
            Col("rate_hi", "highest rate (req/s)", lambda v: fmt_num(v, 2), True),
            Col("base_ttft_p90", "p90 TTFT at the lowest (ms)", ms, True),
            Col("knee_rate", "knee (req/s)", knee, True),
        ],
    )
    note = (
        "Points: each run's percentiles from its requests (solid p50, dashed p90/p99); red: the "
        f"SLO (--slo-ttft {o.slo_ttft * 1000:g} ms, --slo-tpot {o.slo_tpot * 1000:g} ms). Knee: "
        f"the lowest rate whose p90 TTFT exceeds {KNEE_FACTOR:g}x its value at the lowest rate "
        "(dotted vertical rule)."
    )
    if rep.height:
        note += (
            " Dotted: the calibrated model replaying the highest-rate run's requests at other "
            f"offered rates up to {REPLAY_BEYOND:g}x that run's offered rate, drawn at "
            "the rate and output throughput it achieves (past capacity they stop growing while "
            "latency does); the knee's rule sits at its run's rate or throughput; a "
            "prediction, whose measured error is in 'The model on trial'."
        )
    for n in notes:
        note += f" {n}."
    note += dropped_note(df, shown, menu=True)
    s.body = charts + knee_table + f'<p class="note">{esc(note)}</p>' + extra
    s.summary = extra_summary | {
        "deployments": k.height,
        "runs": df.height,
        "knees": {r["series"]: r["knee_rate"] for r in k.iter_rows(named=True)},
        "replayed_points": rep.height,
    }
    return s
