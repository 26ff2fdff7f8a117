"""Elasticities: log-log OLS slopes with heteroskedasticity-robust (HC1) 95 % intervals.

A slope b of log y on log x says y grows as x^b: b = 1 for TTFT against prompt length in the
compute-bound regime (quadratic attention pushes it above 1 for long prompts), b ~ 0 for TPOT
against batch size below the critical batch (weights dominate the bytes read per step).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from pipeline.warehouse.arrow import polars_schema

MIN_N = 10


def ols(y: np.ndarray, xs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Slopes of y on the columns of xs (intercept added) with HC1 95 % intervals.

    Returns name -> {slope, ci_low, ci_high, se, n, r2}; empty when under MIN_N rows or singular.
    """
    names = list(xs)
    x = np.column_stack([np.ones(len(y))] + [xs[k] for k in names])
    n, p = x.shape
    if n < max(MIN_N, p + 2):
        return {}
    xtx = x.T @ x
    if np.linalg.cond(xtx) > 1e12:
        return {}
    inv = np.linalg.inv(xtx)
    beta = inv @ x.T @ y
    resid = y - x @ beta
    meat = (x * resid[:, None] ** 2).T @ x
    cov = inv @ meat @ inv * n / (n - p)
    tss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / tss if tss > 0 else math.nan
    t = float(stats.t.ppf(0.975, n - p))
    out = {}
    for j, name in enumerate(names, start=1):
        se = math.sqrt(max(cov[j, j], 0.0))
        b = float(beta[j])
        out[name] = {
            "slope": b,
            "ci_low": b - t * se,
            "ci_high": b + t * se,
            "se": se,
            "n": n,
            "r2": r2,
        }
    return out


SCHEMA: dict[str, Any] = polars_schema("attribution_elasticities")  # pipeline/schema/derived.py


def _logs(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    ok = pl.all_horizontal([(pl.col(c).is_not_null()) & (pl.col(c) > 0) for c in cols])
    return df.filter(ok).select([pl.col(c).cast(pl.Float64).log().alias(c) for c in cols])


def _rows(gpu, model, metric, fit, controls) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    rows = []
    for name, r in fit.items():
        rows.append(
            {
                "gpu": gpu,
                "model": model,
                "metric": metric,
                "regressor": name,
                "controls": ", ".join(c for c in controls if c != name) or None,
                "elasticity": r["slope"],
                "ci_low": r["ci_low"],
                "ci_high": r["ci_high"],
                "std_error": r["se"],
                "n": r["n"],
                "r2": r["r2"],
            }
        )
    return rows


def elasticities(per_request: pl.DataFrame) -> pl.DataFrame:
    """Per GPU x model: log TTFT on log prompt tokens and log load (requests in flight at
    arrival); log TPOT on log decode batch and log mean context per sequence. Per GPU across
    models: log TTFT on log model parameters, controlling for log prompt tokens."""
    rows: list[dict[str, Any]] = []
    df = per_request.filter(pl.col("gpu").is_not_null() & pl.col("model").is_not_null())
    for (gpu, model), g in df.group_by("gpu", "model", maintain_order=True):
        ttft = _logs(g, ["ttft_s", "prompt_tokens", "load"])
        if ttft.height:
            xs = {
                "prompt_tokens": ttft["prompt_tokens"].to_numpy(),
                "load": ttft["load"].to_numpy(),
            }
            if np.ptp(xs["load"]) == 0:
                del xs["load"]
            fit = ols(ttft["ttft_s"].to_numpy(), xs)
            rows += _rows(gpu, model, "ttft", fit, list(xs))
        tpot = _logs(g, ["tpot_s", "decode_batch", "decode_context"])
        if tpot.height:
            xs = {
                "decode_batch": tpot["decode_batch"].to_numpy(),
                "decode_context": tpot["decode_context"].to_numpy(),
            }
            fit = ols(tpot["tpot_s"].to_numpy(), xs)
            rows += _rows(gpu, model, "tpot", fit, list(xs))
    for (gpu,), g in df.group_by("gpu", maintain_order=True):
        if g["model_params"].n_unique() < 2:
            continue
        t = _logs(g, ["ttft_s", "model_params", "prompt_tokens"])
        xs = {
            "model_params": t["model_params"].to_numpy(),
            "prompt_tokens": t["prompt_tokens"].to_numpy(),
        }
        fit = ols(t["ttft_s"].to_numpy(), xs)
        fit = {k: v for k, v in fit.items() if k == "model_params"}
        rows += _rows(gpu, "(all models)", "ttft", fit, list(xs))
    return pl.DataFrame(rows, schema=SCHEMA) if rows else pl.DataFrame(schema=SCHEMA)
