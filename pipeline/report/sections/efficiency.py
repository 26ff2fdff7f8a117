"""MFU / MBU by deployment and phase (estimated from the logs and the catalog)."""

from __future__ import annotations

from pipeline.report.context import Context
from pipeline.report.efficiency import points, summary
from pipeline.report.html import Col, Section, esc, num, pct, table


def _flag(row: dict) -> str:
    return "bad" if (row.get("mfu") or 0) > 1 or (row.get("mbu") or 0) > 1 else ""


def build(ctx: Context) -> Section:
    s = Section("efficiency", "MFU and MBU")
    pts, unknown = points(ctx)
    if pts.is_empty():
        s.absent = (
            "No MFU / MBU: needs requests with prefill_s or TPOT whose model and GPU the catalog "
            "knows."
        )
        return s
    df = summary(pts)
    cols = [
        Col("series", "deployment"),
        Col("phase", "phase"),
        Col("requests", "requests", num, True),
        Col("mfu", "MFU", pct, True, css=_flag),
        Col("mbu", "MBU", pct, True, css=_flag),
        Col("mfu_max", "best-bucket MFU", pct, True),
        Col("mbu_max", "best-bucket MBU", pct, True),
        Col("intensity", "FLOP/byte", lambda v: num(v, 1), True),
    ]
    over = df.filter((df["mfu"] > 1) | (df["mbu"] > 1)).height
    warn = (
        f'<p class="flag bad">{over} row(s) above 100 %: the logged model, GPU, GPU count or '
        "dtype does not match what served the requests.</p>"
        if over
        else ""
    )
    note = (
        "Request-weighted over buckets. Prefill MFU divides each request's FLOPs by its own "
        "prefill time, so prefills that shared a step make it a lower bound; decode MBU reads "
        "weights once per step plus the KV of the estimated batch (Databricks' definition)."
    )
    if unknown:
        note += f" Not listed (not in the catalog): {', '.join(unknown)}."
    s.body = warn + table(df, cols) + f'<p class="note">{esc(note)}</p>'
    s.summary = {
        f"{r['series']} · {r['phase']}": {"mfu": r["mfu"], "mbu": r["mbu"]}
        for r in df.iter_rows(named=True)
    }
    return s
