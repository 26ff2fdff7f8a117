"""Parity in plain view: each run's figures recomputed from its requests beside the tool's own
summary (queries/report_parity.sql), so a reader sees the numbers are theirs."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, fmt_num, ms, signed_pct, table

# A mean that differs by more than this from the tool's is flagged (percentiles are computed by
# different rules in some tools: nearest-rank in GuideLLM, so they are not flagged).
MEAN_TOLERANCE = 0.01


def _flag(row: dict) -> str:
    d = row.get("difference")
    if d is None or not str(row.get("metric", "")).endswith("_mean"):
        return ""
    return "bad" if abs(d) > MEAN_TOLERANCE else "good"


def build(ctx: Context) -> Section:
    s = Section("parity", "Parity with the tools' own summaries")
    df = ctx.query("report_parity")
    if df is None or df.is_empty():
        s.absent = (
            "No tool summary beside these logs (vLLM, SGLang, AIPerf, llmperf, GuideLLM, "
            "DistServe write one)."
        )
        return s
    cols = [
        Col("run_id", "run"),
        Col("tool", "tool"),
        Col("metric", "metric"),
        Col("tool_metric", "the tool's name for it"),
        Col("requests", "requests", fmt_num, True),
        Col("ours_s", "ours (ms)", ms, True),
        Col("theirs_s", "the tool's (ms)", ms, True),
        Col("difference", "difference", signed_pct, True, css=_flag),
    ]
    means = df.filter(pl.col("metric").str.ends_with("_mean") & pl.col("difference").is_not_null())
    worst = float(means["difference"].abs().max()) if means.height else None
    note = (
        "Ours: successful requests of the run, percentiles by linear interpolation "
        "(docs/metrics.md); GuideLLM's percentiles are nearest-rank and its TPOT includes the "
        "TTFT (not compared). A run with a summary but no per-request rows shows the tool's "
        "figure alone."
    )
    s.body = table(df, cols, max_rows=300) + f'<p class="note">{esc(note)}</p>'
    s.summary = {
        "rows": df.height,
        "runs": df["run_id"].n_unique(),
        "worst_mean_difference": worst,
    }
    return s
