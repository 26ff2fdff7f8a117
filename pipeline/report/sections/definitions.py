"""Definitions of every figure in the report (docs/metrics.md), so the page stands alone."""

from __future__ import annotations

from pipeline.report.context import Context
from pipeline.report.html import Section, esc

TERMS = (
    (
        "TTFT",
        "first token − arrival. Queue = scheduled − arrival; prefill = first token − scheduled.",
    ),
    ("TPOT", "(finish − first token) / (output tokens − 1), per request with more than one token."),
    ("ITL", "every gap between successive emissions, pooled over requests (per chunk)."),
    ("E2E", "finish − arrival."),
    ("Percentiles", "linear interpolation (numpy's default), as vLLM's benchmarks report them."),
    ("Throughput", "output tokens per second of run time (last finish − first arrival per run)."),
    ("Goodput", "requests per second of run time that met both the TTFT and the TPOT objective."),
    ("MFU / MBU", "achieved FLOP/s or HBM bytes/s per GPU ÷ the catalog's dense peak."),
    ("Roofline", "min(peak FLOP/s, arithmetic intensity × peak HBM bandwidth)."),
    (
        "Decode batch",
        "requests decoding on the same server in the second a request began decoding.",
    ),
)


def build(ctx: Context) -> Section:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in TERMS)
    return Section("definitions", "Definitions", body=f"<dl>{items}</dl>")
