"""``pipeline fit`` over a warehouse: one prefill and one decode model per group."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.engines import as_engine
from pipeline.fit.core import MIN_STEPS, FittedModel, GroupKey, fit_observations, unit_cost
from pipeline.fit.steps import (
    Requests,
    decode_windows,
    step_observations,
    steps_from_requests,
    steps_from_tokens,
)
from pipeline.schema import deployment

# Group columns as they appear in `requests` (GroupKey order, defaults applied).
KEY_SQL = tuple(deployment.sql_columns())
MAX_REQUESTS = 40_000  # per group: the fit reads whole servers' time windows up to this many
_KEY_NAMES = GroupKey._fields


def groups(con: Any) -> list[tuple[GroupKey, int]]:
    """Groups with a model and GPU, and how many of their successful requests have an arrival
    time (0: a log without arrival times, which the fit leaves out).

    ``con``: an :class:`~pipeline.engines.Engine` or a DuckDB connection of ``connect``.
    """
    cols = ", ".join(f"{c} AS {n}" for c, n in zip(KEY_SQL, _KEY_NAMES, strict=False))
    keys = ", ".join(KEY_SQL)
    df = as_engine(con).sql(
        f"""SELECT {cols}, count(t_arrival) AS n FROM requests
        WHERE status = 'ok' AND model IS NOT NULL AND gpu IS NOT NULL
        GROUP BY {keys} ORDER BY {", ".join(_KEY_NAMES)}"""
    )
    return [(GroupKey(*r[:-1]), int(r[-1])) for r in df.iter_rows()]


NO_CLOCK = (
    "no arrival times in this log: the batch each request saw is unknown, so no step cost is "
    "fitted from it (its TTFT / TPOT are in the queries)"
)


def _where(key: GroupKey) -> tuple[str, dict[str, Any]]:
    parts, params = [], {}
    for i, (sql, value) in enumerate(zip(KEY_SQL, key, strict=False)):
        if value is None:  # no NULL parameter: not every engine types it
            parts.append(f"{sql} IS NULL")
        else:
            parts.append(f"{sql} IS NOT DISTINCT FROM $k{i}")
            params[f"k{i}"] = value
    return " AND ".join(parts), params


# A group's selection: whole time windows per server, the first `limit` requests by arrival
# across the group (ties broken by key, so every engine picks and orders the same rows).
_ORDER = "domain, t_arrival, run_id, request_id"


def _selection(where: str, limit: int) -> str:
    return f"""
        g AS (
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
              -- the batch a request saw needs a common clock: none without arrival times
              AND t_arrival IS NOT NULL
        ),
        sel AS (SELECT * FROM g ORDER BY {_ORDER} LIMIT {int(limit)})"""


def _load(con: Any, key: GroupKey, limit: int) -> pl.DataFrame:
    where, params = _where(key)
    return as_engine(con).sql(
        f"WITH {_selection(where, limit)} SELECT * FROM sel ORDER BY {_ORDER}", params
    )


def _tokens(con: Any, key: GroupKey, limit: int) -> pl.DataFrame:
    """Emissions of the requests :func:`_load` selects; ``rid`` is their row in its result."""
    where, params = _where(key)
    df = as_engine(con).sql(
        f"""
        WITH {_selection(where, limit)},
        r AS (
            SELECT run_id, request_id, t_arrival, prompt_tokens,
                   row_number() OVER (ORDER BY {_ORDER}) - 1 AS rid
            FROM sel
        )
        SELECT r.rid, r.t_arrival + t.t_s AS t, t.token_index,
               r.prompt_tokens + t.token_index - 1 AS ctx, coalesce(t.n_tokens, 1) AS n_tokens
        FROM tokens AS t JOIN r ON t.run_id = r.run_id AND t.request_id = r.request_id
        ORDER BY r.rid, t.token_index
        """,
        params,
    )
    return df.with_columns(pl.col("rid").cast(pl.UInt32))


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


def fit_group(con: Any, key: GroupKey, limit: int = MAX_REQUESTS) -> FittedModel:
    """Reconstruct the steps of one group's servers and fit both phases.

    ``con``: an Engine or a DuckDB connection. Only the group's selection (at most ``limit``
    requests, and their emissions) comes back to Python.
    """
    con = as_engine(con)
    model, gpu = catalog.model(key.model), catalog.gpu(key.gpu)
    cost = unit_cost(model, gpu, key.gpu_count, key.weight_dtype, key.kv_dtype, key.attention)
    reqs = _load(con, key, limit).with_row_index("rid")
    queue_known = reqs["queue_s"].null_count() < reqs.height
    # One emission per output token: each emission is one step (streamed chunks are not).
    use_tokens = bool((reqs["n_emissions"] == reqs["output_tokens"]).all())
    toks = _tokens(con, key, limit) if use_tokens else None
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
    con: Any, limit: int = MAX_REQUESTS
) -> tuple[list[FittedModel], list[tuple[GroupKey, str]]]:
    """Fit every group; returns the fits and (group, reason) for those skipped."""
    con = as_engine(con)
    fits, skipped = [], []
    for key, n in groups(con):
        if n == 0:  # successful requests, none with an arrival time (count(t_arrival) = 0)
            skipped.append((key, NO_CLOCK))
            continue
        try:
            fm = fit_group(con, key, limit)
            if fm.prefill is None and fm.decode is None:  # a group fitted in name only
                skipped.append((key, f"too few steps for a step fit ({n:,} requests with a clock; "
                                     f"each phase needs {MIN_STEPS} steps)"))  # fmt: skip
                continue
            fits.append(fm)
        except catalog.UnknownName as exc:
            skipped.append((key, f"not in the catalog: {exc}"))
        except ValueError as exc:
            skipped.append((key, str(exc)))
    return fits, skipped


def timed_fit(con: Any, limit: int = MAX_REQUESTS) -> dict[str, Any]:
    t0 = time.perf_counter()
    fits, skipped = fit_all(con, limit)
    return {"fits": fits, "skipped": skipped, "seconds": time.perf_counter() - t0}
