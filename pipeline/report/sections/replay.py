"""Replay what-ifs: the simulator's results for alternative configurations, when present.

Reads the ``replay`` table (one row per scenario, whatever columns the simulator writes) and
notes how many engine steps the ``steps`` table holds.
"""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, sci, table

MAX_COLUMNS = 14


def section_from_frame(frame: pl.DataFrame | None, steps: int | None = None) -> Section:
    s = Section("replay", "Replay what-ifs")
    if (frame is None or frame.is_empty()) and not steps:
        s.absent = "No replay results: `pipeline replay` writes the replay and steps tables."
        return s
    body = ""
    if frame is not None and not frame.is_empty():
        cols = []
        for name, dtype in list(frame.schema.items())[:MAX_COLUMNS]:
            numeric = dtype.is_numeric()
            cols.append(
                Col(
                    name,
                    name,
                    sci if numeric else (lambda v: "–" if v is None else str(v)),
                    numeric,
                )
            )
        body += table(frame, cols, max_rows=50)
    if steps:
        body += (
            f'<p class="note">{esc(f"{steps:,}")} simulated engine steps in the steps table.</p>'
        )
    s.body = body
    s.summary = {"scenarios": 0 if frame is None else frame.height, "steps": steps or 0}
    return s


def build(ctx: Context) -> Section:
    frame = None
    if ctx.has("replay"):
        frame = ctx.table("replay", limit=1000)
    steps = None
    if ctx.has("steps"):
        steps = ctx.count("steps")
    return section_from_frame(frame, steps)
