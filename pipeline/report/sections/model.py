"""The model on trial: the calibrated step costs with their intervals and marks, and the error
`pipeline validate` measured on these runs (observed vs replayed with a model fitted without
them).

Reads the ``calibration`` and ``validation`` tables (pipeline/schema/derived.py). A parameter at
a bound or one the data cannot identify is shown as such, never as a fitted value. The other
sections that lean on the model (attribution, replay) quote :func:`accuracy_sentence`.
"""

from __future__ import annotations

import math

import polars as pl

from pipeline.report.context import Context
from pipeline.report.html import Col, Section, esc, ms, pct, signed_pct, table

PARAMETERS = (
    "mfu", "mbu", "overlap", "step_overhead_s", "seq_overhead_s", "kv_tokens", "kv_link_share",
)  # fmt: skip
_HEADERS = {
    "mfu": "MFU",
    "mbu": "MBU",
    "overlap": "overlap",
    "step_overhead_s": "step overhead (ms)",
    "seq_overhead_s": "per-sequence (ms)",
    "kv_tokens": "KV capacity (tokens)",
    "kv_link_share": "KV link share (disaggregated)",
}
HELD_OUT = ("leave-one-run-out", "second-half")  # splits that score data the fit did not see


def _value(parameter: str, v: float) -> str:
    if parameter.endswith("_s"):
        return f"{v * 1000:.3g}"
    if parameter == "kv_tokens":
        return f"{v:,.0f}"
    return f"{v:.3f}"


def cell(
    parameter: str, value: float | None, lo: float | None, hi: float | None, status: str
) -> str:
    """One parameter as a reader should take it: a value with its interval, or its mark."""
    if status == "not identifiable" or value is None or not math.isfinite(value):
        return "not identifiable"
    v = _value(parameter, value)
    if status == "at bound":
        return f"{v} (at bound)"
    if status == "lower bound":
        return f">= {v} (lower bound)"
    if status == "recorded":
        return f"{v} (recorded)"
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return f"{v} [{_value(parameter, lo)}, {_value(parameter, hi)}]"
    return v


def _label(row: dict) -> str:
    eng = " ".join(str(x) for x in (row.get("engine"), row.get("engine_version")) if x)
    return f"{row['model']} on {row.get('gpu_count') or 1} x {row['gpu']}" + (
        f" ({eng})" if eng else ""
    )


def parameters_frame(cal: pl.DataFrame) -> pl.DataFrame:
    """One row per calibrated deployment: its scheduler and each parameter as a cell."""
    rows = []
    for _, g in cal.group_by("deployment", maintain_order=True):
        first = g.row(0, named=True)
        row = {
            "deployment": _label(first),
            "scheduler": f"{first['scheduler']} ({first['scheduler_source'] or 'recorded'})",
            "runs": first["runs"],
            "requests": first["requests"],
        }
        by = {r["parameter"]: r for r in g.iter_rows(named=True)}
        for p in PARAMETERS:
            r = by.get(p)
            row[p] = (
                "–" if r is None else cell(p, r["value"], r["ci_low"], r["ci_high"], r["status"])
            )
        rows.append(row)
    return pl.DataFrame(rows)


def accuracy_frame(val: pl.DataFrame) -> pl.DataFrame:
    """Median and worst |error| over runs x {p50, p90} per deployment and split (as
    `pipeline validate` and docs/accuracy.md count them)."""
    v = val.filter(pl.col("error").is_not_null() & pl.col("error").is_finite())
    v = v.with_columns(
        pl.col("metric").str.extract(r"^(ttft|tpot)_p(?:50|90)$").alias("what"),
        pl.col("error").abs().alias("abs_error"),
    ).filter(pl.col("what").is_not_null())
    if v.is_empty():
        return pl.DataFrame()
    ident = ["model", "gpu", "gpu_count", "engine", "engine_version"]
    out = (
        v.group_by("deployment", "split", "what")
        .agg(
            pl.col("abs_error").median().alias("median"),
            pl.col("abs_error").max().alias("worst"),
            pl.col("run_id").n_unique().alias("runs"),
            *[pl.first(c) for c in ident],
        )
        .pivot(on="what", index=["deployment", "split", "runs", *ident], values=["median", "worst"])
    )
    order = {s: i for i, s in enumerate([*HELD_OUT, "profile", "in-sample"])}
    return out.with_columns(
        pl.struct("model", "gpu", "gpu_count", "engine", "engine_version")
        .map_elements(_label, return_dtype=pl.Utf8)
        .alias("label"),
        pl.col("split").replace_strict(order, default=len(order)).alias("_o"),
    ).sort("deployment", "_o")


def accuracy_sentence(ctx: Context) -> str | None:
    """How accurate the model was on this warehouse's runs, held out, in one sentence."""
    if not ctx.has("validation"):
        return None
    acc = accuracy_frame(ctx.table("validation"))
    if acc.is_empty():
        return None
    held = acc.filter(pl.col("split").is_in(HELD_OUT))
    if held.is_empty():
        return (
            "The model has no held-out validation on these runs (only in-sample): its error "
            "on unseen traffic is unknown."
        )
    parts = [
        f"{r['label']}: median |error| TTFT {pct(r.get('median_ttft'))}, TPOT "
        f"{pct(r.get('median_tpot'))} ({r['split']}, {r['runs']} run(s))"
        for r in held.iter_rows(named=True)
    ]
    return "The model behind these numbers, on runs it was not fitted on: " + "; ".join(parts) + "."


_PAIRS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")  # shown as observed / replayed too
_RUN_COLS = [
    Col("run_id", "run"),
    Col("split", "split"),
    Col("ttft_p50", "TTFT p50", signed_pct, True),
    Col("ttft_p90", "TTFT p90", signed_pct, True),
    Col("tpot_p50", "TPOT p50", signed_pct, True),
    Col("tpot_p90", "TPOT p90", signed_pct, True),
    Col("e2e_p90", "E2E p90", signed_pct, True),
    Col("throughput_tok_s", "tokens/s", signed_pct, True),
    Col("ttft_p50_pair", "TTFT p50 observed / replayed (ms)", numeric=True),
    Col("ttft_p90_pair", "TTFT p90 observed / replayed (ms)", numeric=True),
    Col("tpot_p50_pair", "TPOT p50 observed / replayed (ms per token)", numeric=True),
    Col("tpot_p90_pair", "TPOT p90 observed / replayed (ms per token)", numeric=True),
]


def _per_run(val: pl.DataFrame) -> pl.DataFrame:
    """Per held-out run: each metric's error, and the observed and replayed values of p50/p90
    TTFT and TPOT beside them (the numbers the errors are made of)."""
    v = val.filter(pl.col("split") != "in-sample")
    if v.is_empty():
        return v
    err = v.pivot(on="metric", index=["run_id", "split"], values="error")
    pairs = v.filter(pl.col("metric").is_in(_PAIRS))
    if pairs.height:
        text = [
            f"{ms(o)} / {ms(r)}" for o, r in zip(pairs["observed"], pairs["replayed"], strict=True)
        ]
        wide = (
            pairs.select("run_id", "split", (pl.col("metric") + "_pair").alias("metric"))
            .with_columns(pl.Series("text", text))
            .pivot(on="metric", index=["run_id", "split"], values="text")
        )
        err = err.join(wide, on=["run_id", "split"], how="left")
    return err.sort("run_id", "split")


def build(ctx: Context) -> Section:
    s = Section("model", "The model on trial")
    if not ctx.has("calibration") and not ctx.has("validation"):
        s.absent = (
            "No calibrated model: `pipeline fit` calibrates the step costs and scheduler by "
            "replay, and `pipeline validate` measures their error on these runs."
        )
        return s
    body = ""
    n_dep = 0
    if ctx.has("calibration"):
        cal = ctx.table("calibration")
        if not cal.is_empty():
            par = parameters_frame(cal)
            n_dep = par.height
            cols = [Col("deployment", "deployment"), Col("scheduler", "scheduler"),
                    Col("runs", "runs", numeric=True)]  # fmt: skip
            cols += [Col(p, _HEADERS[p]) for p in PARAMETERS]
            body += table(par, cols)
            body += (
                '<p class="note">Calibrated by replay (`pipeline fit`): efficiencies are '
                "fractions of the GPU's peak FLOP/s and bandwidth; [low, high] is a 95 % "
                "interval from the replay residuals. 'at bound' and 'not identifiable' mark "
                "values the data did not determine; they are not fitted values.</p>"
            )
    acc = pl.DataFrame()
    if ctx.has("validation"):
        val = ctx.table("validation")
        acc = accuracy_frame(val)
        if not acc.is_empty():
            body += "<h3>Error on these runs</h3>" + table(
                acc,
                [
                    Col("label", "deployment"),
                    Col("split", "split"),
                    Col("runs", "runs", numeric=True),
                    Col("median_ttft", "TTFT median |error|", pct, True),
                    Col("worst_ttft", "worst", pct, True),
                    Col("median_tpot", "TPOT median |error|", pct, True),
                    Col("worst_tpot", "worst", pct, True),
                ],
            )
            runs = _per_run(val)
            if not runs.is_empty():
                cols = [c for c in _RUN_COLS if c.name in runs.columns]
                body += table(runs, cols, caption="Replayed / observed - 1, per run")
            body += (
                '<p class="note">`pipeline validate`: each run replayed with a model fitted '
                "without it (leave one run out; one run: first half fitted, second half "
                "scored). Median |error| over runs x {p50, p90}. In-sample rows show what the "
                "model can express, not what it predicts.</p>"
            )
    if acc.is_empty():
        body += (
            '<p class="note">Not validated yet: `pipeline validate` measures the model\'s error '
            "on runs it was not fitted on.</p>"
        )
    s.body = body
    held = acc.filter(pl.col("split").is_in(HELD_OUT)) if not acc.is_empty() else acc
    s.summary = {
        "deployments": n_dep,
        "validated": 0 if acc.is_empty() else acc["deployment"].n_unique(),
        "held_out": [
            {k: r.get(k) for k in ("label", "split", "runs", "median_ttft", "median_tpot")}
            for r in held.iter_rows(named=True)
        ],
    }
    return s


def note(ctx: Context) -> str:
    """The accuracy sentence as an HTML note ('' when nothing was validated)."""
    text = accuracy_sentence(ctx)
    return f'<p class="note">{esc(text)}</p>' if text else ""
