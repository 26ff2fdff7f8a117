"""Headline figures by model x GPU: volume, failures, latency percentiles, throughput, goodput."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, fmt_num, ms, pct, table

LATENCY = ("ttft", "tpot", "itl", "e2e")
MAX_SUMMARY_SERIES = 50  # model x GPU rows listed in the JSON summary


def headline_frame(ctx: Context, prev: bool = False) -> pl.DataFrame | None:
    """report_headline joined with latency_percentiles, one row per model x GPU."""
    head = ctx.query("report_headline", ctx.slo_params(), prev=prev)
    if head is None:
        return None
    lat = ctx.query("latency_percentiles", prev=prev)
    lat = lat.drop([c for c in ("requests", "output_tokens") if c in lat.columns])
    return head.join(lat, on=["model", "gpu"], how="left")


def _cards(df: pl.DataFrame) -> str:
    req = int(df["requests"].sum())
    failed = int(df["errors"].sum() + df["cancelled"].sum())
    dur = float(df["duration_s"].sum() or 0)
    out_tok = int(df["output_tokens"].sum())
    good = int(df["good"].sum())
    items = [
        ("requests", fmt_num(req)),
        ("failed", f"{fmt_num(failed)} ({pct(failed / req if req else None)})"),
        ("prompt tokens", fmt_num(df["prompt_tokens"].sum())),
        ("output tokens", fmt_num(out_tok)),
        ("output tok/s", fmt_num(out_tok / dur if dur and not _unclocked(df) else None, 1)),
        ("SLO attainment", pct(good / req if req else None)),
    ]
    cells = "".join(
        f'<div class="card"><div class="v" data-figure="{esc(k)}">{esc(v)}</div>'
        f'<div class="k">{esc(k)}</div></div>'
        for k, v in items
    )
    return f'<div class="cards">{cells}</div>'


def _unclocked(df: pl.DataFrame) -> bool:
    """Some run has no arrival times: a total rate over all runs would mix in zeros."""
    return "runs_without_clock" in df.columns and bool(df["runs_without_clock"].sum())


def build(ctx: Context) -> Section:
    s = Section("headline", "Headline figures")
    df = headline_frame(ctx)
    if df is None or df.is_empty():
        s.absent = "No requests in this period."
        return s
    o = ctx.options
    volume = [
        Col("model", "model"),
        Col("gpu", "GPU"),
        Col("requests", "requests", fmt_num, True),
        Col("errors", "errors", fmt_num, True),
        Col("cancelled", "cancelled", fmt_num, True),
        Col("failure_rate", "failed", pct, True),
        Col("prompt_tokens", "prompt tok", fmt_num, True),
        Col("output_tokens", "output tok", fmt_num, True),
        Col("requests_per_s", "req/s", lambda v: fmt_num(v, 2), True),
        Col("tool_requests_per_s", "req/s (tool's own)", lambda v: fmt_num(v, 2), True),
        Col("output_tokens_per_s", "output tok/s", lambda v: fmt_num(v, 1), True),
        Col("goodput_per_s", "goodput req/s", lambda v: fmt_num(v, 2), True),
        Col("slo_attainment", "SLO met", pct, True),
    ]
    latency = [Col("model", "model"), Col("gpu", "GPU")] + [
        Col(f"{m}_p{p}", f"{m.upper()} p{p}", ms, True) for m in LATENCY for p in (50, 90, 99)
    ]
    no_clock = int(df["runs_without_clock"].sum() or 0) if "runs_without_clock" in df.columns else 0
    clock_note = (
        f'<p class="note">{no_clock} run(s) have no arrival times in their logs: their rates, '
        "windows, concurrency and batches are unknown (shown as –), never computed from zeros; "
        "where the tool wrote its own rate it is shown beside ours.</p>"
        if no_clock
        else ""
    )
    s.body = (
        _cards(df)
        + clock_note
        + table(df, volume, "Volume, throughput and goodput")
        + f'<p class="note">Goodput counts requests that finished with TTFT ≤ '
        f"{esc(ms(o.slo_ttft))} ms and TPOT ≤ {esc(ms(o.slo_tpot))} ms "
        "(--slo-ttft / --slo-tpot); throughput is per second of run time.</p>"
        + table(df, latency, "Latency percentiles (ms) of successful requests")
    )
    s.summary = {
        "requests": int(df["requests"].sum()),
        "failed": int(df["errors"].sum() + df["cancelled"].sum()),
        "output_tokens": int(df["output_tokens"].sum()),
        "series": df.height,
        # per model x GPU (the largest first): requests and TTFT percentiles in seconds
        "by_series": [
            {k: r.get(k) for k in ("model", "gpu", "requests", "ttft_p50", "ttft_p90")}
            for r in df.sort("requests", "model", "gpu", descending=[True, False, False])
            .head(MAX_SUMMARY_SERIES)
            .iter_rows(named=True)
        ],
    }
    return s
