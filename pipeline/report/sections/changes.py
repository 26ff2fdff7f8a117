"""Changes against the comparison period, with regressions flagged.

A latency percentile that rose by more than ``--regression`` (default 10 %), a throughput,
goodput or SLO attainment that fell by more than it, or a failure rate that rose by more than it
and by at least one percentage point, is a regression. A percentile is judged only when both
periods have at least TAIL = 50 requests beyond it (100 for p50, 500 for p90, 5,000 for p99):
a tail percentile of fewer requests moves by more than 10 % between samples of identical
traffic. Otherwise it is marked "too few requests".
"""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, fmt_num, ms, pct, signed_pct, table
from pipeline.report.sections.headline import headline_frame

TAIL = 50  # requests beyond a percentile needed to judge its change

# column, label, direction (+1: higher is worse, -1: lower is worse), formatter
METRICS = (
    ("ttft_p50", "TTFT p50 (ms)", 1, ms),
    ("ttft_p90", "TTFT p90 (ms)", 1, ms),
    ("ttft_p99", "TTFT p99 (ms)", 1, ms),
    ("tpot_p50", "TPOT p50 (ms)", 1, ms),
    ("tpot_p90", "TPOT p90 (ms)", 1, ms),
    ("itl_p90", "ITL p90 (ms)", 1, ms),
    ("e2e_p90", "E2E p90 (ms)", 1, ms),
    ("failure_rate", "failed", 1, pct),
    ("output_tokens_per_s", "output tok/s", -1, lambda v: fmt_num(v, 1)),
    ("goodput_per_s", "goodput req/s", -1, lambda v: fmt_num(v, 2)),
    ("slo_attainment", "SLO met", -1, pct),
)


def _quantile(col: str) -> float | None:
    """0.9 for 'ttft_p90'; None for metrics that are not percentiles."""
    tail = col.rsplit("_p", 1)
    return int(tail[1]) / 100 if len(tail) == 2 and tail[1].isdigit() else None


def _row(r: dict, label: str, col: str, a: float, b: float, change, verdict: str) -> dict:
    return {
        "model": r["model"], "gpu": r["gpu"], "metric": label, "column": col,
        "previous": float(b), "current": float(a), "change": change, "verdict": verdict,
    }  # fmt: skip


def compare_periods(cur: pl.DataFrame, prev: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """One row per model x GPU x metric present in both periods, with change and verdict."""
    rows = []
    both = cur.join(prev, on=["model", "gpu"], how="inner", suffix="_prev")
    for r in both.iter_rows(named=True):
        for col, label, direction, _ in METRICS:
            a, b = r.get(col), r.get(f"{col}_prev")
            if a is None or b is None:
                continue
            change = (a - b) / b if b else None
            q = _quantile(col)
            if q is not None and min(r["requests"], r["requests_prev"]) < TAIL / (1 - q):
                rows.append(_row(r, label, col, a, b, change, "too few requests"))
                continue
            worse = change is not None and direction * change > threshold
            if col == "failure_rate":
                worse = worse and (a - b) >= 0.01
            better = change is not None and -direction * change > threshold
            verdict = "regression" if worse else ("improvement" if better else "")
            rows.append(_row(r, label, col, a, b, change, verdict))
    schema = {
        "model": pl.Utf8, "gpu": pl.Utf8, "metric": pl.Utf8, "column": pl.Utf8,
        "previous": pl.Float64, "current": pl.Float64, "change": pl.Float64, "verdict": pl.Utf8,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def build(ctx: Context) -> Section:
    s = Section("changes", "Changes since the previous period")
    if ctx.prev_con is None or ctx.prev_period is None:
        s.absent = (
            "No comparison period: give --since/--until (or --compare-with START..END) "
            "to compare with the period before."
        )
        s.summary = {"regressions": None}
        return s
    cur = headline_frame(ctx)
    prev = headline_frame(ctx, prev=True)
    if prev is None or prev.is_empty():
        s.absent = f"No requests in the comparison period ({ctx.prev_period.label()})."
        s.summary = {"regressions": None}
        return s
    if cur is None or cur.is_empty():
        s.absent = "No requests in this period to compare."
        s.summary = {"regressions": None}
        return s
    threshold = ctx.options.regression
    diff = compare_periods(cur, prev, threshold)
    fmts = {m[0]: m[3] for m in METRICS}
    regress = diff.filter(pl.col("verdict") == "regression")
    shown = diff.with_columns(
        pl.struct("column", "previous")
        .map_elements(lambda r: fmts[r["column"]](r["previous"]), return_dtype=pl.Utf8)
        .alias("previous_txt"),
        pl.struct("column", "current")
        .map_elements(lambda r: fmts[r["column"]](r["current"]), return_dtype=pl.Utf8)
        .alias("current_txt"),
    ).sort([pl.col("verdict") == "regression", pl.col("change").abs()], descending=[True, True])
    cols = [
        Col("model", "model"),
        Col("gpu", "GPU"),
        Col("metric", "metric"),
        Col("previous_txt", "previous", numeric=True),
        Col("current_txt", "this period", numeric=True),
        Col("change", "change", signed_pct, True),
        Col(
            "verdict",
            "",
            css=lambda r: (
                "bad"
                if r["verdict"] == "regression"
                else ("good" if r["verdict"] == "improvement" else "")
            ),
        ),
    ]
    head = (
        f'<p class="flag bad" data-regressions="{regress.height}">'
        f"{regress.height} regression{'s' if regress.height != 1 else ''} "
        f"against {esc(ctx.prev_period.label())} (threshold {threshold * 100:.0f} %).</p>"
        if regress.height
        else f'<p class="flag good" data-regressions="0">No regressions against '
        f"{esc(ctx.prev_period.label())} (threshold {threshold * 100:.0f} %).</p>"
    )
    only = set(map(tuple, cur.select("model", "gpu").rows())) ^ set(
        map(tuple, prev.select("model", "gpu").rows())
    )
    note = (
        f'<p class="note">{len(only)} model × GPU pair(s) appear in only one of the two periods '
        "and are not compared.</p>"
        if only
        else ""
    )
    s.body = head + table(shown, cols) + note
    s.summary = {
        "regressions": regress.height,
        "regressed": [
            f"{r['model']} · {r['gpu']}: {r['metric']} {r['change'] * 100:+.1f} %"
            for r in regress.iter_rows(named=True)
        ],
    }
    return s
