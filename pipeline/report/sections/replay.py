"""Replay what-ifs: replayed runs against the runs they replay, when `pipeline replay` wrote any.

Reads ``replay_compare`` (``replay_requests`` paired with the observed ``requests``) and counts
the simulated engine steps in ``replay_steps``. Simulated rows live only in the replay tables, so
nothing here can leak into the observed sections.
"""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, ms, signed_pct, table

_SHOWN = (
    ("replay_run_id", "replay", None),
    ("source_run_id", "of run", None),
    ("requests", "requests", None),
    ("ttft_p50_observed", "TTFT p50 observed (ms)", ms),
    ("ttft_p50_replayed", "replayed (ms)", ms),
    ("ttft_p90_observed", "TTFT p90 observed (ms)", ms),
    ("ttft_p90_replayed", "replayed (ms)", ms),
    ("tpot_p50_observed", "TPOT p50 observed (ms)", ms),
    ("tpot_p50_replayed", "replayed (ms)", ms),
    ("ttft_p90_error", "TTFT p90 change", signed_pct),
    ("tpot_p50_error", "TPOT p50 change", signed_pct),
)


def section_from_frame(
    frame: pl.DataFrame | None, steps: int | None = None, accuracy: str = ""
) -> Section:
    s = Section("replay", "Replay what-ifs")
    if (frame is None or frame.is_empty()) and not steps:
        s.absent = (
            "No replay results: `pipeline replay` writes replay_requests, replay_runs and "
            "replay_steps."
        )
        return s
    body = ""
    if frame is not None and not frame.is_empty():
        cols = [
            Col(name, label, fmt or (lambda v: "–" if v is None else str(v)), fmt is not None)
            for name, label, fmt in _SHOWN
            if name in frame.columns
        ]
        body += table(frame, cols, max_rows=50)
        body += (
            '<p class="note">Simulated by `pipeline replay` and stored apart from the observed '
            "data; the change is replayed / observed - 1 on the same requests.</p>"
        )
    if steps:
        body += f'<p class="note">{esc(f"{steps:,}")} simulated engine steps in replay_steps.</p>'
    s.body = body + accuracy  # what-ifs are replays of the model: its measured error beside them
    s.summary = {"scenarios": 0 if frame is None else frame.height, "steps": steps or 0}
    return s


def build(ctx: Context) -> Section:
    frame = ctx.query("replay_compare") if ctx.has("replay_requests") else None
    steps = ctx.count("replay_steps") if ctx.has("replay_steps") else None
    from pipeline.report.sections.model import note

    return section_from_frame(frame, steps, note(ctx))
