"""The seed's claims as checked on this data: claim, verdict, estimate and confidence interval.

Input (written as the ``claims`` table by the module that checks them; tests build it by hand):
columns ``claim``, ``verdict``, ``estimate``, ``ci_low``, ``ci_high``; optional ``unit``,
``detail``.
"""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, sci, table

GOOD = {"supported", "holds", "confirmed", "true", "yes", "consistent"}
BAD = {"refuted", "contradicted", "fails", "false", "no", "inconsistent"}


def _verdict_css(row: dict) -> str:
    v = str(row.get("verdict") or "").strip().lower()
    return "good" if v in GOOD else ("bad" if v in BAD else "")


def section_from_frame(frame: pl.DataFrame | None) -> Section:
    s = Section("claims", "The seed's claims, as checked on this data")
    if frame is None or frame.is_empty():
        s.absent = "No claims checked yet: the claims table is absent."
        return s
    missing = {"claim", "verdict"} - set(frame.columns)
    if missing:
        s.absent = f"The claims table lacks column(s) {', '.join(sorted(missing))}."
        return s
    cols = [Col("claim", "claim"), Col("verdict", "verdict", css=_verdict_css)]
    for name, header in (("estimate", "estimate"), ("ci_low", "CI low"), ("ci_high", "CI high")):
        if name in frame.columns:
            cols.append(Col(name, header, sci, True))
    for name in ("unit", "detail"):
        if name in frame.columns:
            cols.append(Col(name, name))
    verdicts = frame["verdict"].cast(pl.Utf8).str.to_lowercase()
    s.body = table(frame, cols)
    s.summary = {
        "claims": frame.height,
        "supported": int(verdicts.is_in(list(GOOD)).sum()),
        "refuted": int(verdicts.is_in(list(BAD)).sum()),
    }
    return s


def build(ctx: Context) -> Section:
    frame = None
    if ctx.has("claims"):
        frame = ctx.table("claims")
    return section_from_frame(frame)
