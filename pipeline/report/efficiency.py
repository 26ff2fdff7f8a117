"""Achieved FLOP/s and bytes/s per GPU, per bucket, for the roofline chart and the MFU/MBU table.

Prefill points: one per prompt-length octave, from the requests' prefill_s (FLOPs of the bucket's
requests / their summed prefill time). Decode points: one per batch bucket, one step of the mean
batch at the mean context taking TPOT p50. Per GPU = divided by the deployment's GPU count.
Both are estimates from request logs: concurrent prefills share steps, so prefill MFU is a lower
bound; the batch is inferred from overlapping requests.
"""

from __future__ import annotations

import polars as pl

from pipeline.report.catalog_facts import catalog_facts
from pipeline.report.context import Context
from pipeline.report.sections.common import label_expr

SCHEMA = {
    "series": pl.Utf8,
    "gpu": pl.Utf8,
    "phase": pl.Utf8,
    "bucket": pl.Float64,
    "requests": pl.Int64,
    "intensity": pl.Float64,  # FLOP / byte
    "flops_per_gpu": pl.Float64,  # achieved FLOP/s per GPU
    "bytes_per_gpu": pl.Float64,  # achieved bytes/s per GPU
    "mfu": pl.Float64,
    "mbu": pl.Float64,
    "peak_flops": pl.Float64,
    "bandwidth": pl.Float64,
    # Net of the fitted per-step and per-sequence overheads (cost_models): the time the step's
    # FLOPs or bytes had, comparable with the fitted efficiencies; null without a fit.
    "mfu_net": pl.Float64,
    "mbu_net": pl.Float64,
    "fit_mfu": pl.Float64,
    "fit_mbu": pl.Float64,
    "fit_mfu_lo": pl.Float64,
    "fit_mfu_hi": pl.Float64,
    "fit_mbu_lo": pl.Float64,
    "fit_mbu_hi": pl.Float64,
    "assumption": pl.Utf8,
}


def points(ctx: Context) -> tuple[pl.DataFrame, list[str]]:
    """Roofline points for every deployment the catalog knows; and the series it does not."""
    from pipeline.report.fitted import deployment_key, load_fitted

    fitted = load_fitted(ctx)
    rows: list[dict] = []
    unknown: set[str] = set()
    pre = ctx.query("report_prefill_work")
    dec = ctx.query("report_decode_batch")
    for frame, phase in ((pre, "prefill"), (dec, "decode")):
        if frame is None or frame.is_empty():
            continue
        for r in frame.with_columns(label_expr(with_deployment=True)).iter_rows(named=True):
            dep = catalog_facts(
                r["model"], r["gpu"], r["gpu_count"], r["weight_dtype"], r["kv_dtype"]
            )
            if dep is None:
                unknown.add(r["series"])
                continue
            n = dep.gpu_count
            fit = fitted.get(
                phase,
                deployment_key(
                    r["model"], r["gpu"], r["gpu_count"], r["weight_dtype"], r["kv_dtype"]
                ),
            )
            if phase == "prefill":
                if not r["prefill_s"]:
                    continue
                flops = dep.prefill_flops(r["new_tokens"], r["attn_work"])
                nbytes = dep.prefill_bytes(r["requests"], r["new_tokens"], r["cached_tokens"])
                seconds, bucket = r["prefill_s"], r["new_tokens_lo"]
                # each request's prefill: at least one step and its own sequence overhead
                overhead = (
                    r["requests"] * (fit[0].step_overhead + fit[0].seq_overhead) if fit else None
                )
                assumption = "each request's FLOPs over its own prefill time"
            else:
                if not r["tpot_p50"]:
                    continue
                flops = dep.decode_flops(r["batch_mean"], r["context_mean"])
                nbytes = dep.decode_bytes(r["batch_mean"], r["context_mean"])
                seconds, bucket = r["tpot_p50"], r["batch_lo"]
                overhead = (
                    fit[0].step_overhead + r["batch_mean"] * fit[0].seq_overhead if fit else None
                )
                assumption = (
                    f"batch {r['batch_mean']:.1f} (requests in flight in the run), "
                    f"context {r['context_mean']:.0f} tokens, TPOT p50 as the step time"
                )
            net = seconds - overhead if overhead is not None else None
            ok_net = net is not None and net > 0
            ci = fit[1] if fit else {}
            rows.append(
                {
                    "series": r["series"],
                    "gpu": dep.gpu.name,
                    "phase": phase,
                    "bucket": float(bucket),
                    "requests": int(r["requests"]),
                    "intensity": flops / nbytes,
                    "flops_per_gpu": flops / seconds / n,
                    "bytes_per_gpu": nbytes / seconds / n,
                    "mfu": flops / seconds / n / dep.peak_flops,
                    "mbu": nbytes / seconds / n / dep.bandwidth,
                    "peak_flops": dep.peak_flops,
                    "bandwidth": dep.bandwidth,
                    "mfu_net": flops / net / n / dep.peak_flops if ok_net else None,
                    "mbu_net": nbytes / net / n / dep.bandwidth if ok_net else None,
                    "fit_mfu": fit[0].mfu if fit else None,
                    "fit_mbu": fit[0].mbu if fit else None,
                    "fit_mfu_lo": ci.get("mfu_ci_low"),
                    "fit_mfu_hi": ci.get("mfu_ci_high"),
                    "fit_mbu_lo": ci.get("mbu_ci_low"),
                    "fit_mbu_hi": ci.get("mbu_ci_high"),
                    "assumption": f"{dep.gpu_count} x {dep.gpu.name}, {assumption}",
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA), sorted(unknown)


def summary(pts: pl.DataFrame) -> pl.DataFrame:
    """Per deployment and phase: request-weighted MFU and MBU, and the best bucket's."""
    if pts.is_empty():
        return pts
    w = pl.col("requests")
    wn = pl.when(pl.col("mbu_net").is_not_null()).then(w)
    return (
        pts.group_by("series", "gpu", "phase")
        .agg(
            w.sum().alias("requests"),
            ((pl.col("mfu") * w).sum() / w.sum()).alias("mfu"),
            ((pl.col("mbu") * w).sum() / w.sum()).alias("mbu"),
            ((pl.col("mfu_net") * wn).sum() / wn.sum()).alias("mfu_net"),
            ((pl.col("mbu_net") * wn).sum() / wn.sum()).alias("mbu_net"),
            *(
                pl.col(c).first()
                for c in (
                    "fit_mfu",
                    "fit_mbu",
                    "fit_mfu_lo",
                    "fit_mfu_hi",
                    "fit_mbu_lo",
                    "fit_mbu_hi",
                )
            ),
            pl.col("mfu").max().alias("mfu_max"),
            pl.col("mbu").max().alias("mbu_max"),
            ((pl.col("intensity") * w).sum() / w.sum()).alias("intensity"),
        )
        .sort("series", "phase", descending=[False, True])
    )
