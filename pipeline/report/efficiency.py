"""Achieved FLOP/s and bytes/s per GPU, per bucket, for the roofline chart and the MFU/MBU table.

Prefill points: one per prompt-length octave, from the requests' prefill_s (FLOPs of the bucket's
requests / their summed prefill time). Decode points: one per batch bucket, one step of the mean
batch at the mean context taking the median inter-token gap (TPOT p50 where the log has no
per-token times). Per GPU = divided by the deployment's GPU count.
Both are estimates from request logs: concurrent prefills share steps, so prefill MFU is a lower
bound; the batch is inferred from overlapping requests.
"""

from __future__ import annotations

import polars as pl

from pipeline.physics.step_cost import StepWork
from pipeline.report.catalog_facts import catalog_facts
from pipeline.report.context import Context
from pipeline.report.sections.common import label_expr

SCHEMA = {
    "series": pl.Utf8,
    "gpu": pl.Utf8,
    "phase": pl.Utf8,
    "bucket": pl.Float64,
    "requests": pl.Int64,
    # Time the point stands for (prefill: its requests' summed prefill time; decode: requests x
    # step time): the summary's weight, so a mean efficiency is total work over total time.
    "seconds": pl.Float64,
    "net_seconds": pl.Float64,
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
    # Where the fitted value comes from (PhaseFit.source): 'fit', 'at cap' (the 95 % bound),
    # 'other phase' (borrowed), 'unidentified'; only 'fit' is printed as a fitted value.
    "fit_mfu_source": pl.Utf8,
    "fit_mbu_source": pl.Utf8,
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
                # A prefill that overlapped no other one ran on its own: its time is its own
                # work. Overlapping ones share steps, so their sum is a lower bound only.
                alone = bool(r["alone_requests"]) and bool(r["alone_prefill_s"])
                pre = "alone_" if alone else ""
                if not r[f"{pre}prefill_s"]:
                    continue
                count = int(r[f"{pre}requests"])
                new_tokens = r[f"{pre}new_tokens"]
                flops = dep.prefill_flops(new_tokens, r[f"{pre}attn_work"])
                nbytes = dep.prefill_bytes(count, new_tokens, r[f"{pre}cached_tokens"])
                seconds, bucket = r[f"{pre}prefill_s"], r["new_tokens_lo"]
                # each request's prefill: at least one step with its fixed costs (overheads and
                # tensor-parallel all-reduces); linear in the tokens, so n x one mean request
                overhead = (
                    count * float(fit[0].fixed_seconds(StepWork(new_tokens / count, 1.0, 0, 0)))
                    if fit
                    else None
                )
                assumption = (
                    f"{count} of {int(r['requests'])} prefills that overlapped no other one, "
                    "FLOPs over their own time"
                    if alone
                    else "each request's FLOPs over its own prefill time (prefills overlap: "
                    "shared steps, a lower bound)"
                )
            else:
                # The median inter-token gap is a plain decode step; TPOT also carries the
                # prefill chunks that shared the request's steps, so it is the fallback only.
                step, step_name = r["itl_p50"], "median inter-token gap"
                if not step:
                    step, step_name = r["tpot_p50"], "TPOT p50 (prefill steps included)"
                if not step:
                    continue
                flops = dep.decode_flops(r["batch_mean"], r["context_mean"])
                nbytes = dep.decode_bytes(r["batch_mean"], r["context_mean"])
                seconds, bucket = step, r["batch_lo"]
                overhead = (
                    float(
                        fit[0].fixed_seconds(
                            StepWork.decode(r["batch_mean"], r["batch_mean"] * r["context_mean"])
                        )
                    )
                    if fit
                    else None
                )
                assumption = (
                    f"batch {r['batch_mean']:.1f} (requests in flight in the run), "
                    f"context {r['context_mean']:.0f} tokens, {step_name} as the step time"
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
                    "requests": count if phase == "prefill" else int(r["requests"]),
                    "seconds": seconds * (1 if phase == "prefill" else int(r["requests"])),
                    "net_seconds": (net * (1 if phase == "prefill" else int(r["requests"])))
                    if ok_net
                    else None,
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
                    "fit_mfu_source": ci.get("mfu_source"),
                    "fit_mbu_source": ci.get("mbu_source"),
                    "assumption": f"{dep.gpu_count} x {dep.gpu.name}, {assumption}",
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA), sorted(unknown)


def per_deployment(pts: pl.DataFrame) -> pl.DataFrame:
    """Per deployment and phase: time-weighted MFU and MBU (total FLOPs or bytes over total time)
    over the buckets in the phase's own regime, and the best bucket's.

    The regime is the roofline's: MFU from prefill buckets whose FLOP/byte is above the GPU's
    ridge point (peak FLOP/s / bandwidth), MBU from decode buckets below it. A short prompt's
    prefill is bandwidth-bound (more so for MoE, which streams every expert), so its MFU says
    nothing about compute efficiency. Where no bucket is in its regime, all of them count."""
    if pts.is_empty():
        return pts
    ridge = pl.col("peak_flops") / pl.col("bandwidth")
    in_regime = pl.when(pl.col("phase") == "prefill").then(pl.col("intensity") >= ridge)
    in_regime = in_regime.otherwise(pl.col("intensity") < ridge)
    keys = ("series", "gpu", "phase")
    pts = pts.with_columns(in_regime.alias("in_regime")).with_columns(
        (pl.col("in_regime") | ~pl.col("in_regime").any().over(keys)).alias("counted")
    )
    w = pl.col("seconds") * pl.col("counted")
    wn = pl.col("net_seconds") * pl.col("counted")
    return (
        pts.group_by(*keys)
        .agg(
            pl.col("requests").sum().alias("requests"),
            ((pl.col("mfu") * w).sum() / w.sum()).alias("mfu"),
            ((pl.col("mbu") * w).sum() / w.sum()).alias("mbu"),
            # null, not NaN, where no point has a net value (no fit)
            pl.when(wn.sum() > 0).then((pl.col("mfu_net") * wn).sum() / wn.sum()).alias("mfu_net"),
            pl.when(wn.sum() > 0).then((pl.col("mbu_net") * wn).sum() / wn.sum()).alias("mbu_net"),
            *(
                pl.col(c).first()
                for c in (
                    "fit_mfu",
                    "fit_mbu",
                    "fit_mfu_lo",
                    "fit_mfu_hi",
                    "fit_mbu_lo",
                    "fit_mbu_hi",
                    "fit_mfu_source",
                    "fit_mbu_source",
                )
            ),
            pl.col("mfu").max().alias("mfu_max"),
            pl.col("mbu").max().alias("mbu_max"),
            ((pl.col("intensity") * pl.col("seconds")).sum() / pl.col("seconds").sum()).alias(
                "intensity"
            ),
        )
        .sort("series", "phase", descending=[False, True])
    )
