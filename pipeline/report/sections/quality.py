"""Data quality: what was quarantined and why, clock problems, runs missing metadata, failures."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, fmt_num, table

ISSUES = (
    "no_wall_clock",
    "missing_model",
    "missing_gpu",
    "missing_gpu_count",
    "negative_times",
    "ok_without_ttft",
)
CLOCK_WORDS = ("before", "clock", "timestamp", "negative")


def _quarantine(ctx: Context) -> tuple[str, dict]:
    q = ctx.query("quarantine_reasons")
    if q is None or q.is_empty():
        return '<p class="good">No quarantined records in the warehouse.</p>', {"quarantined": 0}
    by_reason = (
        q.with_columns(
            # "first token 0.2 s before arrival" and the like: group by the words, not the numbers
            pl.col("reason").str.replace_all(r"-?\d+(\.\d+)?", "N").alias("reason")
        )
        .group_by("reason")
        .agg(
            pl.col("records").sum(),
            pl.col("source_file").n_unique().alias("files"),
            pl.col("source_file").first().alias("example_file"),
            pl.col("first_line").min().alias("first_line"),
        )
        .with_columns(
            pl.col("reason").str.to_lowercase().str.contains("|".join(CLOCK_WORDS)).alias("clock")
        )
        .sort("records", descending=True)
    )
    total = int(by_reason["records"].sum())
    clock = int(by_reason.filter(pl.col("clock"))["records"].sum())
    cols = [
        Col("reason", "reason"),
        Col("records", "records", fmt_num, True),
        Col("files", "files", fmt_num, True),
        Col("example_file", "example file"),
        Col("first_line", "first line", fmt_num, True),
    ]
    html = (
        f'<p data-quarantined="{total}">{esc(f"{total:,}")} quarantined record(s) in the '
        f"warehouse (all periods), {esc(f'{clock:,}')} of them clock or ordering problems.</p>"
        + table(by_reason, cols, max_rows=25)
    )
    return html, {"quarantined": total, "clock_problems": clock}


def _runs(ctx: Context) -> tuple[str, dict]:
    runs = ctx.query("report_run_quality")
    if runs is None or runs.is_empty():
        return "", {}
    flagged = runs.filter(
        pl.any_horizontal([pl.col(c) > 0 for c in ISSUES]) | (pl.col("clock") == "relative")
    )
    relative = int((runs["clock"] == "relative").sum())
    summary = {
        "runs": runs.height,
        "runs_flagged": flagged.height,
        "relative_clock_runs": relative,
        "missing_gpu": int(runs["missing_gpu"].sum()),
        "missing_model": int(runs["missing_model"].sum()),
        "negative_times": int(runs["negative_times"].sum()),
    }
    if flagged.is_empty():
        return (
            f'<p class="good">All {runs.height} run(s) have wall clocks and full metadata.</p>',
            summary,
        )
    cols = [
        Col("run_id", "run"),
        Col("source_format", "format"),
        Col("clock", "clock"),
        Col("requests", "requests", fmt_num, True),
        Col("no_wall_clock", "no wall clock", fmt_num, True),
        Col("missing_model", "no model", fmt_num, True),
        Col("missing_gpu", "no GPU", fmt_num, True),
        Col("missing_gpu_count", "no GPU count", fmt_num, True),
        Col("negative_times", "negative times", fmt_num, True),
        Col("ok_without_ttft", "ok, no TTFT", fmt_num, True),
    ]
    html = (
        f"<p>{flagged.height} of {runs.height} run(s) need attention: relative clocks cannot be "
        "placed in time or compared across runs, and rows without model or GPU are grouped as "
        "'?' (fill them with <code>pipeline ingest --set gpu=...</code>).</p>"
        + table(flagged, cols, max_rows=50)
    )
    return html, summary


def _errors(ctx: Context) -> tuple[str, dict]:
    err = ctx.query("report_errors")
    if err is None or err.is_empty():
        return '<p class="good">No failed or cancelled requests in this period.</p>', {}
    cols = [
        Col("model", "model"),
        Col("gpu", "GPU"),
        Col("status", "status"),
        Col("error", "reason (numbers as N)"),
        Col("example", "example"),
        Col("requests", "requests", fmt_num, True),
    ]
    return "<h3>Failures</h3>" + table(err, cols, max_rows=20), {}


def build(ctx: Context) -> Section:
    s = Section("quality", "Data quality")
    parts, summary = [], {}
    for fn in (_quarantine, _runs, _errors):
        html, info = fn(ctx)
        parts.append(html)
        summary.update(info)
    s.body = "<h3>Quarantine</h3>" + parts[0] + "<h3>Runs</h3>" + parts[1] + parts[2]
    s.summary = summary
    return s
