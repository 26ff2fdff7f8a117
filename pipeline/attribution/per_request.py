"""Per request: what its TTFT and its decode time are made of.

    TTFT   = queue + prefill compute + rest
    decode = weight reads + KV reads + compute + overheads + interference

* queue = scheduled - arrival, as logged (``queue_s``).
* prefill compute = the fitted prefill model's time for this prompt on this deployment alone:
  the uncached tokens in chunks of the step budget when prefill is chunked, each chunk on top of
  the ones before (``FittedModel.step_cost('prefill')``).
* rest = TTFT - queue - prefill compute: interference (decodes and other prefills sharing its
  steps), recompute after preemption, per-step overheads and model error. It is the residual,
  so the parts add up to the observed TTFT exactly (up to float rounding), and it may be
  negative where the model over-predicts.
* decode: the request runs (output_tokens - 1) decode steps; the batch and summed context it
  shared them with are time averages over its decode window (:mod:`windows`). One step of the
  fitted decode model at that batch and context splits into weight bytes / bandwidth, KV bytes
  / bandwidth, compute beyond the memory time (max(compute, memory) = memory + excess), and
  fixed per-step and per-sequence overheads. interference = decode_s - steps x that step: the
  prefill chunks that shared its steps (chunked prefill / mixed steps), preemption stalls, and
  model error, again the residual.

Missing fields: no ``queue_s`` (no scheduled time) -> the queue cannot be told apart from
prefill interference and stays in the rest (``ttft_rest_covers`` says so); no fitted model or
prompt length -> prefill compute is unknown and the rest also covers it; no output tokens or
decode time -> no decode parts. Each row's ``ttft_rest_covers`` / ``decode_rest_covers`` name
what the residual holds.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.attribution.windows import decode_means, in_flight_at_arrival
from pipeline.fit.core import FittedModel, GroupKey
from pipeline.physics import StepCost, StepWork
from pipeline.schema import deployment
from pipeline.warehouse.arrow import polars_schema

# Group columns as `pipeline fit` forms them (the deployment key, GroupKey order).
KEY_SQL = tuple(deployment.sql_columns())
DOMAIN_SQL = "CASE WHEN clock = 'unix' THEN '' ELSE run_id END || '|' || coalesce(server, '?')"

SCHEMA: dict[str, Any] = polars_schema("attribution_requests")  # pipeline/schema/derived.py

TTFT_PARTS = ("ttft_queue_s", "ttft_prefill_compute_s", "ttft_rest_s")
DECODE_PARTS = (
    "decode_weights_s",
    "decode_kv_s",
    "decode_compute_s",
    "decode_overhead_s",
    "decode_interference_s",
)


def load_requests(con: duckdb.DuckDBPyConnection, where: str = "TRUE", params=None) -> pl.DataFrame:  # type: ignore[no-untyped-def]
    """Successful requests with the columns attribution needs (``where`` is a checked predicate)."""
    keys = ", ".join(f"{c} AS k_{n}" for c, n in zip(KEY_SQL, GroupKey._fields, strict=True))
    rel = con.sql(
        f"""
        SELECT run_id, request_id, {DOMAIN_SQL} AS domain, t_arrival, {keys},
               prompt_tokens, coalesce(cached_tokens, 0) AS cached_tokens, output_tokens,
               queue_s, ttft_s, decode_s, e2e_s, tpot_s
        FROM requests
        WHERE status = 'ok' AND ({where})
        """,
        params=params or {},
    )
    return pl.from_arrow(rel.to_arrow_table())  # type: ignore[return-value]


def with_windows(df: pl.DataFrame) -> pl.DataFrame:
    """Add ``load`` (in flight at arrival), ``decode_batch`` and ``decode_sum_context`` per
    request, one numpy pass per clock domain (server)."""
    parts = []
    for (_d,), g in df.with_row_index("_i").group_by("domain", maintain_order=True):
        if g["t_arrival"].null_count():  # no arrival times: no load, no batch (never from zeros)
            nulls = pl.Series([None] * g.height, dtype=pl.Float64)
            parts.append(
                pl.DataFrame(
                    {
                        "_i": g["_i"],
                        "load": nulls,
                        "decode_batch": nulls,
                        "decode_sum_context": nulls,
                    }
                )
            )
            continue
        arr = g["t_arrival"].to_numpy().astype(np.float64)
        origin = float(np.min(arr))
        arr = arr - origin
        ttft = g["ttft_s"].fill_null(np.nan).to_numpy()
        e2e = g["e2e_s"].fill_null(np.nan).to_numpy()
        first, finish = arr + ttft, arr + e2e
        prompt = g["prompt_tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        out = g["output_tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        b, c = decode_means(first, finish, prompt, np.nan_to_num(out, nan=0.0))
        load = in_flight_at_arrival(arr, finish)
        parts.append(
            pl.DataFrame({"_i": g["_i"], "load": load, "decode_batch": b, "decode_sum_context": c})
        )
    w = (
        pl.concat(parts)
        if parts
        else pl.DataFrame(
            schema={
                "_i": pl.UInt32,
                "load": pl.Float64,
                "decode_batch": pl.Float64,
                "decode_sum_context": pl.Float64,
            }
        )
    )
    out = df.with_row_index("_i").join(w, on="_i", how="left").sort("_i").drop("_i")
    return out.with_columns(pl.col("load", "decode_batch", "decode_sum_context").fill_nan(None))


def isolated_prefill(
    cost: StepCost, new: np.ndarray, cached: np.ndarray, chunk: float
) -> np.ndarray:
    """Seconds to prefill ``new`` tokens on top of ``cached`` alone: steps of at most ``chunk``
    tokens, each attending to everything before it (one loop per chunk index, not per request)."""
    new = np.maximum(new, 0.0)
    total = np.zeros_like(new)
    done = np.zeros_like(new)
    if not np.isfinite(chunk):
        return np.asarray(cost.prefill_time(new, cached), dtype=np.float64)
    while True:
        todo = np.minimum(new - done, chunk)
        live = todo > 0
        if not live.any():
            return total
        t = np.asarray(cost.prefill_time(np.where(live, todo, 1.0), cached + done), float)
        total += np.where(live, t, 0.0)
        done += np.where(live, todo, 0.0)


def decode_step_parts(
    cost: StepCost, batch: np.ndarray, sum_ctx: np.ndarray
) -> dict[str, np.ndarray]:
    """One decode step split into weights, KV, compute beyond memory, and fixed overheads."""
    work = StepWork.decode(batch, sum_ctx)
    weights = np.asarray(cost.memory_seconds(StepWork.decode(batch, np.zeros_like(sum_ctx))))
    memory = np.asarray(cost.memory_seconds(work), dtype=np.float64)
    compute = np.asarray(cost.compute_seconds(work), dtype=np.float64)
    fixed = np.asarray(cost.fixed_seconds(work), dtype=np.float64) * np.ones_like(batch)
    return {
        "weights": weights * np.ones_like(batch),
        "kv": memory - weights,
        "compute": np.maximum(compute - memory, 0.0),
        "overhead": fixed,
    }


def _covers(queue_known: pl.Expr, prefill_known: pl.Expr) -> pl.Expr:
    return (
        pl.when(queue_known & prefill_known)
        .then(pl.lit("interference+overheads"))
        .when(prefill_known)
        .then(pl.lit("queue+interference+overheads (no scheduled time: queue not separable)"))
        .when(queue_known)
        .then(pl.lit("prefill+interference+overheads (no fitted model or prompt length)"))
        .otherwise(pl.lit("queue+prefill+interference+overheads (neither separable)"))
    )


def _predict_group(g: pl.DataFrame, fm: FittedModel | None) -> pl.DataFrame:
    """Model-based parts of one deployment's requests (null columns without a fit)."""
    n = g.height
    nan = np.full(n, np.nan)
    cols: dict[str, np.ndarray] = {"pre": nan}
    cols |= {k: nan for k in ("weights", "kv", "compute", "overhead")}
    if fm is not None:
        key = fm.key
        chunk = float(key.max_batched_tokens or 8192) if key.chunked_prefill else np.inf
        prompt = g["prompt_tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        cached = g["cached_tokens"].cast(pl.Float64).fill_null(0.0).to_numpy()
        cached = np.minimum(cached, np.maximum(prompt - 1, 0))  # the last token is recomputed
        ok = np.isfinite(prompt)
        pre = isolated_prefill(
            fm.step_cost("prefill"),
            np.where(ok, prompt - cached, 1.0),
            np.where(ok, cached, 0.0),
            chunk,
        )
        cols["pre"] = np.where(ok, pre, np.nan)
        b = g["decode_batch"].fill_null(np.nan).to_numpy()
        c = g["decode_sum_context"].fill_null(np.nan).to_numpy()
        ok = np.isfinite(b) & np.isfinite(c)
        parts = decode_step_parts(
            fm.step_cost("decode"), np.where(ok, b, 1.0), np.where(ok, c, 0.0)
        )
        steps = (g["output_tokens"].cast(pl.Float64).fill_null(np.nan) - 1).to_numpy()
        for k, v in parts.items():
            cols[k] = np.where(ok, v * steps, np.nan)
    return pl.DataFrame({k: pl.Series(k, v, pl.Float64) for k, v in cols.items()}).fill_nan(None)


def decompose(df: pl.DataFrame, fits: dict[GroupKey, FittedModel]) -> pl.DataFrame:
    """The attribution_requests rows (SCHEMA) of ``load_requests`` output, via ``with_windows``."""
    if df.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    df = with_windows(df)
    key_cols = [f"k_{n}" for n in GroupKey._fields]
    parts = []
    for key_vals, g in df.group_by(key_cols, maintain_order=True):
        fm = fits.get(GroupKey(*key_vals))
        pred = _predict_group(g, fm)
        try:
            params = catalog.model(str(key_vals[0])).params if key_vals[0] else None
        except catalog.UnknownName:
            params = None
        parts.append(
            pl.concat([g, pred], how="horizontal").with_columns(
                pl.lit(fm is not None).alias("fitted"),
                pl.lit(params, pl.Int64).alias("model_params"),
            )
        )
    df = pl.concat(parts, how="vertical_relaxed")
    q, pre = pl.col("queue_s"), pl.col("pre")
    steps = pl.col("output_tokens") - 1
    dec_known = pl.col("weights").is_not_null() & pl.col("decode_s").is_not_null() & (steps >= 1)
    dec_sum = pl.col("weights") + pl.col("kv") + pl.col("compute") + pl.col("overhead")
    ttft = pl.col("ttft_s")
    out = df.with_columns(
        ttft_queue_s=pl.when(ttft.is_not_null()).then(q),
        ttft_prefill_compute_s=pl.when(ttft.is_not_null()).then(pre),
        ttft_rest_s=ttft - q.fill_null(0.0) - pre.fill_null(0.0),
        ttft_rest_covers=pl.when(ttft.is_not_null()).then(
            _covers(q.is_not_null(), pre.is_not_null())
        ),
        decode_steps=pl.when(steps >= 1).then(steps),
        decode_context=pl.col("decode_sum_context") / pl.col("decode_batch"),
        decode_weights_s=pl.when(dec_known).then(pl.col("weights")),
        decode_kv_s=pl.when(dec_known).then(pl.col("kv")),
        decode_compute_s=pl.when(dec_known).then(pl.col("compute")),
        decode_overhead_s=pl.when(dec_known).then(pl.col("overhead")),
        decode_interference_s=pl.when(dec_known).then(pl.col("decode_s") - dec_sum),
        decode_rest_covers=pl.when(dec_known)
        .then(pl.lit("prefill interference+preemption+model error"))
        .when(pl.col("decode_s").is_not_null() & (steps >= 1))
        .then(pl.lit("not separable: no fitted model or no decode window")),
        model=pl.col("k_model"),
        gpu=pl.col("k_gpu"),
        gpu_count=pl.col("k_gpu_count"),
    )
    return out.select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
