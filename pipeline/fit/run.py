"""``pipeline fit`` over a warehouse: one prefill and one decode model per group."""

from __future__ import annotations

import time
from typing import Any

import duckdb
import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey, fit_observations, unit_cost
from pipeline.fit.steps import (
    Requests,
    decode_windows,
    step_observations,
    steps_from_requests,
    steps_from_tokens,
)

# Group columns as they appear in `requests` (GroupKey order).
KEY_SQL = (
    "model", "gpu", "coalesce(gpu_count, 1)", "max_num_seqs", "max_batched_tokens",
    "chunked_prefill", "attention", "coalesce(weight_dtype, 'bf16')", "coalesce(kv_dtype, 'bf16')",
)  # fmt: skip
MAX_REQUESTS = 40_000  # per group: the fit reads whole servers' time windows up to this many
_KEY_NAMES = GroupKey._fields


def groups(con: duckdb.DuckDBPyConnection) -> list[tuple[GroupKey, int]]:
    """Groups with a model and GPU, and their successful-request counts."""
    cols = ", ".join(f"{c} AS {n}" for c, n in zip(KEY_SQL, _KEY_NAMES, strict=False))
    rows = con.execute(
        f"""SELECT {cols}, count(*) AS n FROM requests
        WHERE status = 'ok' AND model IS NOT NULL AND gpu IS NOT NULL
        GROUP BY ALL ORDER BY ALL"""
    ).fetchall()
    return [(GroupKey(*r[:-1]), int(r[-1])) for r in rows]


def _where(key: GroupKey) -> tuple[str, dict[str, Any]]:
    parts, params = [], {}
    for i, (sql, value) in enumerate(zip(KEY_SQL, key, strict=False)):
        parts.append(f"{sql} IS NOT DISTINCT FROM $k{i}")
        params[f"k{i}"] = value
    return " AND ".join(parts), params


def _load(con: duckdb.DuckDBPyConnection, key: GroupKey, limit: int) -> pl.DataFrame:
    where, params = _where(key)
    # Whole time windows per server: the first `limit` requests by arrival across the group.
    rel = con.sql(
        f"""
        WITH g AS (
            SELECT
                run_id, request_id,
                CASE WHEN clock = 'unix' THEN '' ELSE run_id END || '|' || coalesce(server, '?')
                    AS domain,
                t_arrival, queue_s, ttft_s, e2e_s,
                prompt_tokens, coalesce(cached_tokens, 0) AS cached_tokens, output_tokens,
                coalesce(n_emissions, 0) AS n_emissions
            FROM requests
            WHERE {where} AND status = 'ok' AND ttft_s IS NOT NULL AND e2e_s IS NOT NULL
              AND prompt_tokens IS NOT NULL AND output_tokens IS NOT NULL
        )
        SELECT * FROM g ORDER BY domain, t_arrival LIMIT {int(limit)}
        """,
        params=params,
    )
    return pl.from_arrow(rel.to_arrow_table())  # type: ignore[return-value]


def _tokens(con: duckdb.DuckDBPyConnection, reqs: pl.DataFrame) -> pl.DataFrame:
    con.register(
        "_fit_reqs",
        reqs.select("run_id", "request_id", "rid", "t_arrival", "prompt_tokens").to_arrow(),
    )
    try:
        rel = con.sql(
            """
            SELECT r.rid, r.t_arrival + t.t_s AS t, t.token_index,
                   r.prompt_tokens + t.token_index - 1 AS ctx, coalesce(t.n_tokens, 1) AS n_tokens
            FROM tokens AS t JOIN _fit_reqs AS r USING (run_id, request_id)
            """
        )
        return pl.from_arrow(rel.to_arrow_table())  # type: ignore[return-value]
    finally:
        con.unregister("_fit_reqs")


def _requests(f: pl.DataFrame, queue_known: bool, origin: float) -> Requests:
    # Times relative to the server's first arrival: squares of unix times lose all precision.
    arr = f["t_arrival"].to_numpy() - origin
    q = f["queue_s"].fill_null(0.0).to_numpy() if queue_known else np.zeros(f.height)
    return Requests(
        sched=arr + q,
        first=arr + f["ttft_s"].to_numpy(),
        finish=arr + f["e2e_s"].to_numpy(),
        prompt=f["prompt_tokens"].to_numpy(),
        cached=f["cached_tokens"].to_numpy(),
        output=f["output_tokens"].to_numpy(),
        arrival=arr,
    )


def fit_group(
    con: duckdb.DuckDBPyConnection, key: GroupKey, limit: int = MAX_REQUESTS
) -> FittedModel:
    """Reconstruct the steps of one group's servers and fit both phases."""
    model, gpu = catalog.model(key.model), catalog.gpu(key.gpu)
    cost = unit_cost(model, gpu, key.gpu_count, key.weight_dtype, key.kv_dtype, key.attention)
    reqs = _load(con, key, limit).with_row_index("rid")
    queue_known = reqs["queue_s"].null_count() < reqs.height
    # One emission per output token: each emission is one step (streamed chunks are not).
    use_tokens = bool((reqs["n_emissions"] == reqs["output_tokens"]).all())
    toks = _tokens(con, reqs) if use_tokens else None
    if toks is not None and toks.height and int(toks["n_tokens"].max()) > 1:
        toks, use_tokens = None, False  # streamed chunks of several tokens: not one per step
    budget = float(key.max_batched_tokens) if key.max_batched_tokens else None
    chunked = bool(key.chunked_prefill) if key.chunked_prefill is not None else True
    pre_parts, dec_parts = [], []
    method = "tokens" if use_tokens else "requests"
    for (_domain,), f in reqs.group_by("domain", maintain_order=True):
        origin = float(f["t_arrival"].min())  # type: ignore[arg-type]
        r = _requests(f, queue_known, origin)
        if use_tokens and toks is not None:
            e = toks.join(f.select("rid"), on="rid", how="semi")
            steps = steps_from_tokens(
                r,
                e["t"].to_numpy() - origin,
                e["ctx"].cast(pl.Float64).to_numpy(),
                (e["token_index"] >= 1).to_numpy(),
                budget=budget if chunked else None,
            )
            obs = step_observations(steps, cost)
            pre_parts.append(obs.filter(pl.col("prefills") > 0))
            dec_parts.append(obs.filter(pl.col("prefills") == 0))
        else:
            steps = steps_from_requests(r, chunked=chunked, budget=budget)
            pre_parts.append(step_observations(steps.filter(pl.col("exact")), cost))
            dec_parts.append(decode_windows(r, cost, steps))
    pre = pl.concat(pre_parts, how="diagonal_relaxed") if pre_parts else None
    dec = pl.concat(dec_parts, how="diagonal_relaxed") if dec_parts else None
    extra = {
        "method": method,
        "queue_known": queue_known,
        "requests_used": reqs.height,
        "max_batch_seen": float(dec["batch"].max()) if dec is not None and dec.height else None,
    }
    return fit_observations(key, model, gpu, pre, dec, extra)


def fit_all(
    con: duckdb.DuckDBPyConnection, limit: int = MAX_REQUESTS
) -> tuple[list[FittedModel], list[tuple[GroupKey, str]]]:
    """Fit every group; returns the fits and (group, reason) for those skipped."""
    fits, skipped = [], []
    for key, _n in groups(con):
        try:
            fits.append(fit_group(con, key, limit))
        except catalog.UnknownName as exc:
            skipped.append((key, f"not in the catalog: {exc}"))
        except ValueError as exc:
            skipped.append((key, str(exc)))
    return fits, skipped


def timed_fit(con: duckdb.DuckDBPyConnection, limit: int = MAX_REQUESTS) -> dict[str, Any]:
    t0 = time.perf_counter()
    fits, skipped = fit_all(con, limit)
    return {"fits": fits, "skipped": skipped, "seconds": time.perf_counter() - t0}
