"""MFU / MBU by deployment and phase (estimated from the logs and the catalog)."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import Context
from pipeline.report.efficiency import per_deployment, points
from pipeline.report.html import Col, Section, esc, fmt_num, pct, table


def _flag(row: dict) -> str:
    return "bad" if (row.get("mfu") or 0) > 1 or (row.get("mbu") or 0) > 1 else ""


# How a value the fit did not estimate is shown instead of as a fitted value.
NOT_FITTED = {
    "at cap": "{v} (at bound)",
    "other phase": "{v} (the other phase's: not identifiable here)",
    "unidentified": "not identifiable",
}


def _fitted_text(df, name: str):  # type: ignore[no-untyped-def]
    """'54.0 % [53.9, 54.1]': the fitted efficiency and its 95 % interval, '–' without a fit; a
    value at the fit's bound or borrowed from the other phase says so (NOT_FITTED)."""
    out = []
    for r in df.iter_rows(named=True):
        v, lo, hi = r[f"fit_{name}"], r[f"fit_{name}_lo"], r[f"fit_{name}_hi"]
        src = r.get(f"fit_{name}_source") or "fit"
        if v is None:
            out.append("–")
        elif src != "fit":
            out.append(NOT_FITTED.get(src, "{v} (" + src + ")").format(v=pct(v)))
        elif lo is None or hi is None:
            out.append(pct(v))
        else:
            out.append(f"{pct(v)} [{lo * 100:.1f}, {hi * 100:.1f}]")
    return out


def _evidence(pts) -> str:  # type: ignore[no-untyped-def]
    """Above 100 %: which buckets, on which assumption, instead of a guess at the cause."""
    bad = pts.filter((pts["mfu"] > 1) | (pts["mbu"] > 1))
    if bad.is_empty():
        return ""
    items = "".join(
        f"<li>{esc(r['series'])}, {esc(r['phase'])} bucket {esc(fmt_num(r['bucket'], 1))} "
        f"({esc(fmt_num(r['requests']))} requests): MFU {esc(pct(r['mfu']))}, MBU "
        f"{esc(pct(r['mbu']))}, assuming {esc(r['assumption'])}</li>"
        for r in bad.sort("mbu", descending=True).head(10).iter_rows(named=True)
    )
    return (
        f'<div class="flag bad"><p>{bad.height} bucket(s) above 100 % of the catalog peak. '
        "Physically impossible, so an assumption behind them is wrong: the logged GPU, GPU "
        "count or dtype, or the batch estimate (requests in flight) for these buckets:</p>"
        f"<ul>{items}</ul></div>"
    )


def build(ctx: Context) -> Section:
    s = Section("efficiency", "MFU and MBU")
    pts, unknown = points(ctx)
    if pts.is_empty():
        s.absent = (
            "No MFU / MBU: needs requests with prefill_s or TPOT whose model and GPU the catalog "
            "knows."
        )
        return s
    df = per_deployment(pts)
    df = df.with_columns(
        pl.Series("fit_mfu_text", _fitted_text(df, "mfu")),
        pl.Series("fit_mbu_text", _fitted_text(df, "mbu")),
    )
    cols = [
        Col("series", "deployment"),
        Col("phase", "phase"),
        Col("requests", "requests", fmt_num, True),
        Col("mfu", "MFU achieved", pct, True, css=_flag),
        Col("mbu", "MBU achieved", pct, True, css=_flag),
        Col("mfu_net", "MFU net of overheads", pct, True),
        Col("mbu_net", "MBU net of overheads", pct, True),
        Col("fit_mfu_text", "MFU fitted [95 %]", numeric=True),
        Col("fit_mbu_text", "MBU fitted [95 %]", numeric=True),
        Col("mfu_max", "best-bucket MFU", pct, True),
        Col("mbu_max", "best-bucket MBU", pct, True),
        Col("intensity", "FLOP/byte", lambda v: fmt_num(v, 1), True),
    ]
    warn = _evidence(pts)
    note = (
        "Per run and deployment (never across runs sharing a server name); time-weighted over "
        "the buckets in the phase's roofline regime: MFU from prefill buckets above the GPU's "
        "ridge point (FLOP/byte), MBU from decode buckets below it. Achieved: prefill MFU "
        "divides the FLOPs of the prefills that overlapped no other one by their own time "
        "(where every prefill overlapped, all of them: shared steps, a lower bound); requests "
        "counts the prefills used. Decode MBU reads the weights once per step plus the KV of the "
        "estimated batch (Databricks' definition) in one median inter-token gap (TPOT p50 where "
        "the log has no per-token times: it also holds the prefill chunks mixed into decode "
        "steps). Net of overheads: the same, minus the fitted fixed costs of each step "
        "(per-step and per-sequence overheads, tensor-parallel all-reduces). Fitted: "
        "`pipeline fit`'s estimate from the reconstructed steps, with its 95 % interval."
    )
    if unknown:
        note += f" Not listed (not in the catalog): {', '.join(unknown)}."
    s.body = warn + table(df, cols) + f'<p class="note">{esc(note)}</p>'
    s.summary = {
        f"{r['series']} · {r['phase']}": {
            k: r[k] for k in ("mfu", "mbu", "mfu_net", "mbu_net", "fit_mfu", "fit_mbu")
        }
        for r in df.iter_rows(named=True)
    }
    return s
