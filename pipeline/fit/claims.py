"""The seed's claims as checks on any warehouse: what the data say, with a 95 % interval.

``check_claims(con)`` returns one row per claim: claim, verdict ('supported', 'contradicted',
'not enough data'), estimate, ci_low, ci_high, unit, n, detail. Intervals are percentile
bootstraps (B = 300, fixed seed) of medians or ratios of medians, or OLS intervals of a slope.
Verdicts compare the interval, not the point estimate, with what the claim predicts, so a wide
interval gives 'not enough data' rather than a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.engines import as_engine
from pipeline.physics import compute_dtype_for, critical_batch
from pipeline.warehouse.arrow import polars_schema

SUPPORTED, CONTRADICTED, UNKNOWN = "supported", "contradicted", "not enough data"
N_BOOT = 300
MIN_N = 30  # requests per arm below which a comparison is 'not enough data'
LIGHT_QUANTILE = 0.2  # prefill-based checks use requests arriving at the lightest 20 % of load
MAX_ROWS = 300_000  # requests read (whole time windows, earliest first)
COLUMNS = ("claim", "verdict", "estimate", "ci_low", "ci_high", "unit", "n", "detail")

CLAIM_MODEL_SIZE = "TTFT grows about linearly with model size"
CLAIM_INPUT = "TTFT grows with input length (512 -> 2048 prompt tokens)"
CLAIM_LOAD = "TTFT grows with concurrent load (batch size)"
CLAIM_GPU = "A faster GPU lowers TTFT (same model)"
CLAIM_BYTES = "Decode time tracks bytes moved, not FLOPs, below the critical batch"
CLAIM_QUANT_DECODE = "int8/fp8 weights speed up decode"
CLAIM_QUANT_CEILING = "int8/fp8 weights (weight-only) do not raise the compute-bound ceiling"


def _row(claim: str, verdict: str, est: float, lo: float, hi: float, unit: str, n: int,
         detail: str) -> dict[str, Any]:  # fmt: skip
    def f(v: float) -> float | None:
        return None if v is None or not math.isfinite(v) else float(v)

    return {"claim": claim, "verdict": verdict, "estimate": f(est), "ci_low": f(lo),
            "ci_high": f(hi), "unit": unit, "n": int(n), "detail": detail}  # fmt: skip


def _none(claim: str, unit: str, n: int, why: str) -> dict[str, Any]:
    return _row(claim, UNKNOWN, math.nan, math.nan, math.nan, unit, n, why)


def _boot_ratio(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """median(a) / median(b) with a percentile-bootstrap 95 % interval."""
    rng = np.random.default_rng(seed)
    a = a[:5000] if len(a) > 5000 else a
    b = b[:5000] if len(b) > 5000 else b
    ia = rng.integers(0, len(a), (N_BOOT, len(a)))
    ib = rng.integers(0, len(b), (N_BOOT, len(b)))
    r = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    return float(np.median(a) / np.median(b)), *np.quantile(r, [0.025, 0.975]).tolist()


def _ols_slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    n = len(x)
    xm = x - x.mean()
    sxx = float(np.sum(xm * xm))
    if n < 3 or sxx <= 0:
        return math.nan, math.nan, math.nan
    b = float(np.sum(xm * (y - y.mean())) / sxx)
    resid = y - y.mean() - b * xm
    se = math.sqrt(float(np.sum(resid * resid)) / (n - 2) / sxx)
    from scipy.stats import t as student

    q = float(student.ppf(0.975, n - 2))
    return b, b - q * se, b + q * se


def load_claim_requests(con: Any, limit: int = MAX_ROWS) -> pl.DataFrame:
    """Successful requests with the columns the checks need (earliest ``limit`` per warehouse).

    ``con``: an :class:`~pipeline.engines.Engine` or a DuckDB connection of ``connect``.
    """
    return as_engine(con).sql(
        f"""
        SELECT
            model, gpu, coalesce(gpu_count, 1) AS gpu_count,
            coalesce(weight_dtype, 'bf16') AS weight_dtype,
            CASE WHEN clock = 'unix' THEN '' ELSE run_id END || '|' || coalesce(server, '?')
                || '|' || model || '|' || gpu AS domain,
            prompt_tokens, output_tokens, t_arrival, queue_s, prefill_s, ttft_s, tpot_s, e2e_s
        FROM requests
        WHERE status = 'ok' AND ttft_s IS NOT NULL AND model IS NOT NULL AND gpu IS NOT NULL
          AND prompt_tokens IS NOT NULL AND t_arrival IS NOT NULL
        ORDER BY domain, t_arrival, run_id, request_id
        LIMIT {int(limit)}
        """
    )


def _with_load(df: pl.DataFrame) -> pl.DataFrame:
    """Requests in flight on the same server at each arrival, and decoding at first token."""
    parts = []
    for _, f in df.group_by("domain", maintain_order=True):
        a = f["t_arrival"].to_numpy()
        first = a + f["ttft_s"].to_numpy()
        fin = a + f["e2e_s"].fill_null(np.nan).to_numpy()
        fin = np.where(np.isfinite(fin), fin, first)
        sa, sf, sfi = np.sort(a), np.sort(first), np.sort(fin)
        in_flight = np.searchsorted(sa, a, "left") - np.searchsorted(sfi, a, "right")
        decoding = np.searchsorted(sf, first, "right") - np.searchsorted(sfi, first, "right")
        parts.append(f.with_columns(load=pl.Series(in_flight), batch=pl.Series(decoding)))
    return pl.concat(parts) if parts else df.with_columns(load=pl.lit(0), batch=pl.lit(0))


def _prefill_time(df: pl.DataFrame) -> pl.Expr:
    """Prefill seconds: prefill_s where the log has it, else TTFT (queue unknown)."""
    return pl.coalesce("prefill_s", "ttft_s")


def _light(df: pl.DataFrame) -> pl.DataFrame:
    """Requests that arrived in the lightest fifth of their deployment's load: their prefill
    shares the engine least with others, so prefill-time comparisons see the prefill itself."""
    keys = ["model", "gpu", "gpu_count", "weight_dtype"]
    return df.filter(pl.col("load") <= pl.col("load").quantile(LIGHT_QUANTILE).over(keys))


def _peak(gpu: str, weight_dtype: str) -> float:
    g = catalog.gpu(gpu)
    return g.peak_flops(compute_dtype_for(g, weight_dtype))


def claim_model_size(df: pl.DataFrame) -> dict[str, Any]:
    unit = "log-log slope of prefill time per token (x GPU FLOP/s) on active params"
    df = _light(df)
    f = df.filter(pl.col("prompt_tokens") >= 256).with_columns(
        per_tok=_prefill_time(df) / pl.col("prompt_tokens")
    )
    rows = []
    for (model, gpu, tp, wd), g in f.group_by("model", "gpu", "gpu_count", "weight_dtype"):
        if g.height < MIN_N:
            continue
        try:
            p = catalog.model(str(model)).active_params
            norm = _peak(str(gpu), str(wd)) * int(tp)  # type: ignore[arg-type]
        except (catalog.UnknownName, ValueError):
            continue
        rows.append((math.log(p), math.log(float(g["per_tok"].median()) * norm)))  # type: ignore[arg-type]
    sizes = {round(x, 3) for x, _ in rows}
    if len(sizes) < 3:
        return _none(CLAIM_MODEL_SIZE, unit, len(rows), f"needs >= 3 model sizes, has {len(sizes)}")
    x, y = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    b, lo, hi = _ols_slope(x, y)
    if not math.isfinite(lo) or hi - lo > 1.0:
        return _row(CLAIM_MODEL_SIZE, UNKNOWN, b, lo, hi, unit, len(rows), "interval too wide")
    verdict = SUPPORTED if (lo >= 0.7 and hi <= 1.3) else (
        CONTRADICTED if (hi < 0.7 or lo > 1.3) else UNKNOWN)  # fmt: skip
    return _row(CLAIM_MODEL_SIZE, verdict, b, lo, hi, unit, len(rows),
                f"{len(rows)} deployments, {len(sizes)} model sizes; 1 = linear")  # fmt: skip


def claim_input_length(df: pl.DataFrame) -> dict[str, Any]:
    unit = "ratio of median prefill time, 2048 vs 512 prompt tokens (light load)"
    df = _light(df)
    f = df.with_columns(t=_prefill_time(df))
    # The largest deployment with both prompt bands decides (no mixing of GPUs or models).
    best = None
    for _, g in f.group_by("model", "gpu", "gpu_count", "weight_dtype"):
        short = g.filter(pl.col("prompt_tokens").is_between(384, 640))["t"].drop_nulls()
        long = g.filter(pl.col("prompt_tokens").is_between(1536, 2560))["t"].drop_nulls()
        n = min(short.len(), long.len())
        if n >= MIN_N and (best is None or n > best[0]):
            best = (n, short.to_numpy(), long.to_numpy())
    if best is None:
        return _none(CLAIM_INPUT, unit, 0, f"needs >= {MIN_N} requests near 512 and near 2048")
    est, lo, hi = _boot_ratio(best[2], best[1])
    verdict = SUPPORTED if lo > 1.0 else (CONTRADICTED if hi < 1.0 else UNKNOWN)
    return _row(CLAIM_INPUT, verdict, est, lo, hi, unit, len(best[1]) + len(best[2]),
                "4 = linear in prompt length; below 4 where fixed overheads weigh in")  # fmt: skip


def claim_load(df: pl.DataFrame) -> dict[str, Any]:
    unit = "ratio of median TTFT, top vs bottom quartile of requests in flight at arrival"
    best = None
    for _, g in df.group_by("model", "gpu", "gpu_count", "weight_dtype"):
        if g.height < 4 * MIN_N:
            continue
        q1, q3 = g["load"].quantile(0.25), g["load"].quantile(0.75)
        lo_arm = g.filter(pl.col("load") <= q1)["ttft_s"].to_numpy()
        hi_arm = g.filter(pl.col("load") >= q3)["ttft_s"].to_numpy()
        spread = q3 is not None and q1 is not None and q3 > q1
        if (
            spread
            and min(len(lo_arm), len(hi_arm)) >= MIN_N
            and (best is None or g.height > best[0])
        ):
            best = (g.height, lo_arm, hi_arm, q1, q3)
    if best is None:
        return _none(CLAIM_LOAD, unit, 0, "needs a deployment whose load varies")
    est, lo, hi = _boot_ratio(best[2], best[1])
    verdict = SUPPORTED if lo > 1.0 else (CONTRADICTED if hi < 1.0 else UNKNOWN)
    return _row(CLAIM_LOAD, verdict, est, lo, hi, unit, best[0],
                f"in flight <= {best[3]:.0f} vs >= {best[4]:.0f}")  # fmt: skip


def claim_gpu(df: pl.DataFrame) -> dict[str, Any]:
    unit = "ratio of median prefill time per token, lower-peak GPU / higher-peak GPU"
    df = _light(df)
    f = df.filter(pl.col("prompt_tokens") >= 256).with_columns(
        per_tok=_prefill_time(df) / pl.col("prompt_tokens")
    )
    best = None
    for (model, _tp, wd), g in f.group_by("model", "gpu_count", "weight_dtype"):
        gpus = []
        for (gpu,), h in g.group_by("gpu"):
            try:
                gpus.append(
                    (_peak(str(gpu), str(wd)), str(gpu), h["per_tok"].drop_nulls().to_numpy())
                )
            except (catalog.UnknownName, ValueError):
                continue
        gpus = [x for x in gpus if len(x[2]) >= MIN_N]
        if len(gpus) >= 2:
            gpus.sort()
            slow, fast = gpus[0], gpus[-1]
            if slow[0] < fast[0] and (best is None or len(slow[2]) + len(fast[2]) > best[0]):
                best = (len(slow[2]) + len(fast[2]), slow, fast, model)
    if best is None:
        return _none(CLAIM_GPU, unit, 0, "needs one model on >= 2 GPUs with different peaks")
    _, slow, fast, model = best
    est, lo, hi = _boot_ratio(slow[2], fast[2])
    verdict = SUPPORTED if lo > 1.0 else (CONTRADICTED if hi < 1.0 else UNKNOWN)
    return _row(CLAIM_GPU, verdict, est, lo, hi, unit, best[0],
                f"{model}: {slow[1]} vs {fast[1]}; peak ratio {fast[0] / slow[0]:.2f}")  # fmt: skip


def claim_bytes(df: pl.DataFrame) -> dict[str, Any]:
    unit = "elasticity of TPOT with decode batch below B* (1 = FLOP-bound, ~0 = bytes-bound)"
    best = None
    for (_model, gpu, _tp, wd), g in df.group_by("model", "gpu", "gpu_count", "weight_dtype"):
        try:
            bstar = critical_batch(catalog.gpu(str(gpu)), str(wd))
        except (catalog.UnknownName, ValueError):
            continue
        h = g.filter(pl.col("tpot_s") > 0, pl.col("batch") >= 1, pl.col("batch") < bstar)
        enough = h.height >= 2 * MIN_N and h["batch"].n_unique() >= 3
        if enough and (best is None or h.height > best[0].height):
            best = (h, bstar)
    if best is None:
        return _none(CLAIM_BYTES, unit, 0, "needs decode requests at several batch sizes below B*")
    h, bstar = best
    x = np.log(h["batch"].to_numpy().astype(np.float64))
    y = np.log(h["tpot_s"].to_numpy())
    b, lo, hi = _ols_slope(x, y)
    if not math.isfinite(lo):
        return _none(CLAIM_BYTES, unit, h.height, "no spread in batch")
    verdict = SUPPORTED if hi < 0.5 else (CONTRADICTED if lo > 0.8 else UNKNOWN)
    return _row(CLAIM_BYTES, verdict, b, lo, hi, unit, h.height,
                f"batches up to {float(h['batch'].max()):.0f} (B* = {bstar:.0f})")  # fmt: skip


def _quant_pairs(df: pl.DataFrame) -> list[tuple[str, str, int, str, pl.DataFrame, pl.DataFrame]]:
    out = []
    for (model, gpu, tp), g in df.group_by("model", "gpu", "gpu_count"):
        base = g.filter(pl.col("weight_dtype").is_in(["bf16", "fp16"]))
        for q in ("int8", "fp8"):
            quant = g.filter(pl.col("weight_dtype") == q)
            if base.height >= MIN_N and quant.height >= MIN_N:
                out.append((str(model), str(gpu), int(tp), q, base, quant))  # type: ignore[arg-type]
    return out


def claim_quant_decode(df: pl.DataFrame) -> dict[str, Any]:
    unit = "ratio of median TPOT, 16-bit / quantised weights, batch below 32"
    pairs = _quant_pairs(df)
    if not pairs:
        return _none(CLAIM_QUANT_DECODE, unit, 0, "needs one model x GPU with bf16 and int8/fp8")
    model, gpu, _, q, base, quant = max(pairs, key=lambda p: p[4].height + p[5].height)
    a = base.filter(pl.col("batch") < 32)["tpot_s"].drop_nulls().to_numpy()
    b = quant.filter(pl.col("batch") < 32)["tpot_s"].drop_nulls().to_numpy()
    if min(len(a), len(b)) < MIN_N:
        return _none(CLAIM_QUANT_DECODE, unit, len(a) + len(b), "too few small-batch decodes")
    est, lo, hi = _boot_ratio(a, b)
    verdict = SUPPORTED if lo > 1.0 else (CONTRADICTED if hi <= 1.0 else UNKNOWN)
    return _row(CLAIM_QUANT_DECODE, verdict, est, lo, hi, unit, len(a) + len(b),
                f"{model} on {gpu}, {q}; weights are half the bytes, so at most 2")  # fmt: skip


def claim_quant_ceiling(df: pl.DataFrame) -> dict[str, Any]:
    unit = "ratio of median prefill time per token (prompts >= 1024), 16-bit / quantised"
    pairs = _quant_pairs(df)
    if not pairs:
        return _none(CLAIM_QUANT_CEILING, unit, 0, "needs one model x GPU with bf16 and int8/fp8")
    model, gpu, _, q, base, quant = max(pairs, key=lambda p: p[4].height + p[5].height)
    base, quant = _light(base), _light(quant)

    def per_tok(f: pl.DataFrame) -> np.ndarray:
        f = f.filter(pl.col("prompt_tokens") >= 1024)
        return (f.select(_prefill_time(f) / pl.col("prompt_tokens")).to_series().drop_nulls()
                .to_numpy())  # fmt: skip

    a, b = per_tok(base), per_tok(quant)
    if min(len(a), len(b)) < MIN_N:
        return _none(CLAIM_QUANT_CEILING, unit, len(a) + len(b), "too few long prompts")
    est, lo, hi = _boot_ratio(a, b)
    w8a8 = compute_dtype_for(catalog.gpu(gpu), q) != "bf16"
    note = f"{model} on {gpu}, {q} ({'W8A8: compute runs in ' + q if w8a8 else 'weight-only'})"
    verdict = SUPPORTED if (lo >= 0.85 and hi <= 1.15) else (CONTRADICTED if lo > 1.15 else UNKNOWN)
    return _row(CLAIM_QUANT_CEILING, verdict, est, lo, hi, unit, len(a) + len(b), note)


CHECKS: tuple[Callable[[pl.DataFrame], dict[str, Any]], ...] = (
    claim_model_size,
    claim_input_length,
    claim_load,
    claim_gpu,
    claim_bytes,
    claim_quant_decode,
    claim_quant_ceiling,
)


def check_claims(con: Any, limit: int = MAX_ROWS) -> pl.DataFrame:
    """Run every claim check on the warehouse behind ``con``; one row per claim."""
    df = _with_load(load_claim_requests(con, limit))
    rows = [check(df) for check in CHECKS]
    return pl.DataFrame(
        rows,
        schema=polars_schema("claims"),  # pipeline/schema/derived.py
    )
