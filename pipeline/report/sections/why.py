"""Why, in sentences: per deployment, a short paragraph generated from the numbers only.

Observed figures come from queries/report_why.sql (TTFT/TPOT percentiles, queueing's share of the
slowest tenth's TTFT, mean requests in flight, output throughput). Model figures are said to be
the model's and appear only where a model exists: the prefill busy share (the calibrated step
costs, else the step-reconstruction fit in ``cost_models``, applied to the logged prompts), the
replays ``pipeline replay`` stored for the deployment's runs, and the model's held-out error.
A figure the logs do not have is said to be unknown, never filled in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from pipeline.report.context import Context
from pipeline.report.fitted import deployment_key, load_fitted
from pipeline.report.html import Section, esc

QUEUE_MOSTLY = 0.5  # at or above: the slow requests mostly waited
QUEUE_LITTLE = 0.2  # below: the slow requests were slow to compute, not queued
NEAR_CAPACITY = 0.8  # prefill busy share at or above this reads "near its prefill capacity"
MAX_PARAGRAPHS = 20
MAX_REPLAYED = 5  # deployments whose busiest run is replayed on one and two servers
REPLAY_REQUESTS = 3000  # its first requests replayed: the report stays a report


def _s(v: float) -> str:
    return f"{v:.3g} s" if v >= 1 else f"{v * 1000:.3g} ms"


def _calibrated_costs(ctx: Context) -> dict[str, Any]:
    """deployment id -> StepCost from the calibration table (colocated schedulers only)."""
    if not ctx.has("calibration"):
        return {}
    from pipeline.catalog import UnknownName
    from pipeline.fit.calibrate import Deployment, step_cost
    from pipeline.schema import deployment as key

    out = {}
    cal = ctx.table("calibration")
    for (dep_id,), g in cal.group_by("deployment", maintain_order=True):
        first = g.row(0, named=True)
        if first["scheduler"] == "distserve":  # prefill runs on its own instance: not one cost
            continue
        values = {r["parameter"]: r["value"] for r in g.iter_rows(named=True)}
        try:
            out[str(dep_id)] = step_cost(Deployment(**{n: first[n] for n in key.NAMES}), values)
        except (UnknownName, KeyError, TypeError):
            continue  # a model or GPU the catalog lacks: fit already said which
    return out


def prefill_share(cost: Any, prompts: pl.DataFrame, duration_s: float) -> float:
    """Fitted prefill time of every logged prompt, one prompt per step, over the run time."""
    t = np.asarray(
        cost.prefill_time(
            prompts["new_tokens"].to_numpy().astype(float),
            prompts["cached_mean"].to_numpy().astype(float),
        ),
        dtype=float,
    )
    return float((t * prompts["requests"].to_numpy()).sum() / duration_s)


def load_sentence(curve: dict | None) -> str:
    """Across a deployment's runs at several loads: p90 TTFT from the lowest to the highest rate,
    and the knee (the load section's rule), from a row of ``load.knees`` plus ``hi_ttft_p90``."""
    if not curve:
        return ""
    text = (
        f"Across its {curve['runs']} runs ({curve['rate_lo']:.2f}-{curve['rate_hi']:.2f} req/s "
        f"achieved), p90 TTFT goes from {_s(curve['base_ttft_p90'])} to "
        f"{_s(curve['hi_ttft_p90'])}"
    )
    if curve.get("knee_rate") is not None:
        return text + f"; it passes twice its lowest-rate value at {curve['knee_rate']:.2f} req/s."
    return text + ", never twice its lowest-rate value."


def paragraph(
    row: dict,
    share: tuple[float, str] | None,
    replays: list[dict],
    acc: str,
    curve: dict | None = None,
    replicas: dict | None = None,
) -> str:
    """The sentences for one deployment (``row``: one row of report_why)."""
    out = [
        f"p90 TTFT {_s(row['ttft_p90'])} (p50 {_s(row['ttft_p50'])})"
        + (f", p50 TPOT {_s(row['tpot_p50'])} per token" if row.get("tpot_p50") else "")
        + f", over {row['requests']:,} requests in {row['runs']} run(s)."
    ]
    q = row.get("slow_queue_share")
    if row.get("slow_with_queue") and q is not None:
        tail = ""
        if q >= QUEUE_MOSTLY:
            tail = ": they waited for a slot, not for a slow prefill"
        elif q < QUEUE_LITTLE:
            tail = ": their first token was slow to compute, not queued"
        out.append(f"{q * 100:.0f} % of the slowest tenth's TTFT was queueing{tail}.")
    else:
        out.append(
            "The log has no scheduled time: how TTFT splits into queue and prefill is unknown."
        )
    if row.get("mean_in_flight") is not None:
        out.append(
            f"On average {row['mean_in_flight']:.1f} requests were in flight and the server "
            f"produced {row['output_tokens_per_s']:,.0f} output tokens/s."
        )
        if row.get("unclocked_runs"):
            n = row["unclocked_runs"]
            out.append(f"{n} run(s) without arrival times are not in these rates.")
    else:
        out.append("No arrival times: load and throughput are unknown.")
    if curve:
        out.append(load_sentence(curve))
    if share is not None:
        u, source = share
        near = (
            ": near its prefill capacity, so TTFT grows quickly with load"
            if u >= NEAR_CAPACITY
            else ""
        )
        out.append(
            f"By the {source} step costs, prefilling these prompts one per step would keep the "
            f"GPU busy {u * 100:.0f} % of the run time{near}."
        )
    if replicas:
        out.append(replica_sentence(replicas))
    for r in replays:
        change = r.get("ttft_p90_error")
        out.append(
            f"Replay {r['replay_run_id']} of run {r['source_run_id']} gives p90 TTFT "
            f"{_s(r['ttft_p90_replayed'])}"
            + (f" ({change * 100:+.0f} %)" if change is not None else "")
            + "."
        )
    if acc:
        out.append(acc)
    return " ".join(out)


def _first_requests(ctx: Context, run_id: str, deployment: str) -> pl.DataFrame:
    """One deployment's requests of a run (a run may hold several deployments)."""
    rid, dep = run_id.replace("'", "''"), deployment.replace("'", "''")
    return ctx._frame(
        ctx.con.arrow(
            f"""SELECT t_arrival, prompt_tokens, output_tokens, ttft_s FROM requests
            WHERE run_id = '{rid}' AND deployment = '{dep}' AND status = 'ok'
              AND t_arrival IS NOT NULL
              AND prompt_tokens > 0 AND output_tokens IS NOT NULL AND ttft_s IS NOT NULL
            ORDER BY t_arrival LIMIT {REPLAY_REQUESTS}"""
        )
    )


def replica_replay(ctx: Context, cal: pl.DataFrame, run_id: str) -> dict | None:
    """The busiest run's first requests replayed by the calibrated model on one server and on
    two (round-robin, arrivals alternating): p90 TTFT of each, beside the observed p90 of the
    same requests. None for a disaggregated deployment or too few requests."""
    from pipeline.fit.calibrate import Deployment, Run, simulate_run
    from pipeline.schema import deployment as key

    first = cal.row(0, named=True)
    if first["scheduler"] == "distserve":
        return None
    arr = _first_requests(ctx, run_id, str(first["deployment"]))
    if arr.height < 20:
        return None
    values = {r["parameter"]: r["value"] for r in cal.iter_rows(named=True)}
    dep = Deployment(**{n: first[n] for n in key.NAMES})
    t = arr["t_arrival"].to_numpy().astype(float)
    prompt = arr["prompt_tokens"].to_numpy().astype(np.int64)
    output = arr["output_tokens"].to_numpy().astype(np.int64)
    kv = max(int(values.get("kv_tokens") or 0), 1)
    longest = int((prompt + output).max())

    def ttft(idx: np.ndarray) -> np.ndarray:
        run = Run(run_id, t[idx], prompt[idx], output[idx], np.zeros(len(idx)), np.zeros(len(idx)))
        return simulate_run(values, dep, first["scheduler"], run, kv, longest)[0]

    every = np.arange(len(t))
    one = ttft(every)
    two = np.concatenate([ttft(every[0::2]), ttft(every[1::2])])
    return {
        "run_id": run_id,
        "requests": len(t),
        "observed": float(np.percentile(arr["ttft_s"].to_numpy(), 90)),
        "one": float(np.percentile(one, 90)),
        "two": float(np.percentile(two, 90)),
    }


def replica_sentence(r: dict | None) -> str:
    if not r:
        return ""
    return (
        f"Replayed by the calibrated model, the first {r['requests']:,} requests of run "
        f"{r['run_id']} give p90 TTFT {_s(r['one'])} on one server (observed "
        f"{_s(r['observed'])}) and {_s(r['two'])} on two (round-robin)."
    )


def _busiest_runs(ctx: Context) -> dict[str, str]:
    """deployment id -> its run with the highest achieved rate (most requests when one run)."""
    out: dict[str, str] = {}
    curve = ctx.query("report_load_curve")
    if curve is not None and not curve.is_empty():
        for r in curve.sort("request_rate", descending=True).iter_rows(named=True):
            out.setdefault(str(r["deployment"]), str(r["run_id"]))
    sql = (
        "SELECT deployment, run_id, count(*) AS n FROM requests "
        "WHERE status = 'ok' AND t_arrival IS NOT NULL GROUP BY deployment, run_id"
    )
    runs = ctx._frame(ctx.con.arrow(sql))
    for r in runs.sort(["n", "run_id"], descending=[True, False]).iter_rows(named=True):
        out.setdefault(str(r["deployment"]), str(r["run_id"]))
    return out


def _accuracy(ctx: Context) -> dict[str, str]:
    if not ctx.has("validation"):
        return {}
    from pipeline.report.sections.model import HELD_OUT, accuracy_frame

    acc = accuracy_frame(ctx.table("validation"))
    if acc.is_empty():
        return {}
    out: dict[str, str] = {}
    for r in acc.filter(pl.col("split").is_in(HELD_OUT)).iter_rows(named=True):
        if r.get("median_ttft") is None or r.get("median_tpot") is None:
            continue
        out.setdefault(
            str(r["deployment"]),
            f"On runs it was not fitted on ({r['split']}), the model's median |error| is "
            f"{r['median_ttft'] * 100:.1f} % on TTFT and {r['median_tpot'] * 100:.1f} % on TPOT.",
        )
    return out


def _replays(ctx: Context) -> dict[str, list[dict]]:
    if not ctx.has("replay_requests"):
        return {}
    rep = ctx.query("replay_compare")
    if rep is None or rep.is_empty():
        return {}
    runs = ctx._frame(ctx.con.arrow("SELECT DISTINCT run_id, deployment FROM requests"))
    rep = rep.join(runs, left_on="source_run_id", right_on="run_id", how="inner")
    out: dict[str, list[dict]] = {}
    for r in rep.sort("replay_run_id").iter_rows(named=True):
        out.setdefault(str(r["deployment"]), []).append(r)
    return out


def _curves(ctx: Context) -> dict[str, dict]:
    """deployment id -> its load curve's knee row (deployments with runs at several loads)."""
    from pipeline.report.sections.load import knees

    df = ctx.query("report_load_curve")
    if df is None or df.is_empty():
        return {}
    hi = (
        df.sort("request_rate")
        .group_by("deployment")
        .agg(pl.col("ttft_p90").last().alias("hi_ttft_p90"))
    )
    k = knees(df.with_columns(pl.col("deployment").alias("series"))).join(hi, on="deployment")
    return {str(r["deployment"]): r for r in k.iter_rows(named=True)}


def build(ctx: Context) -> Section:
    s = Section("why", "Why, in a few sentences")
    df = ctx.query("report_why")
    if df is None or df.is_empty():
        s.absent = "No successful requests to explain."
        return s
    calibrated = _calibrated_costs(ctx)
    fitted = load_fitted(ctx)
    prompts = ctx.query("report_why_prompts")
    replays, acc, curves = _replays(ctx), _accuracy(ctx), _curves(ctx)
    cal = ctx.table("calibration") if ctx.has("calibration") else None
    busiest = _busiest_runs(ctx) if cal is not None and not cal.is_empty() else {}
    paras, shares, replayed = [], 0, 0
    for row in df.head(MAX_PARAGRAPHS).iter_rows(named=True):
        dep = str(row["deployment"])
        reps = None
        if cal is not None and replayed < MAX_REPLAYED and dep in busiest:
            mine_cal = cal.filter(pl.col("deployment") == dep)
            if not mine_cal.is_empty():
                reps = replica_replay(ctx, mine_cal, busiest[dep])
                replayed += reps is not None
        share = None
        cost, source = calibrated.get(dep), "calibrated"
        if cost is None:
            key = deployment_key(row["model"], row["gpu"], row["gpu_count"],
                                 row["weight_dtype"], row["kv_dtype"])  # fmt: skip
            hit = fitted.get("prefill", key)
            cost, source = (hit[0] if hit else None), "fitted"
        dur = row.get("duration_s")
        mine = prompts.filter(pl.col("deployment") == dep) if prompts is not None else None
        if cost is not None and dur and mine is not None and mine.height:
            u = prefill_share(cost, mine, float(dur))
            if math.isfinite(u):
                share, shares = (u, source), shares + 1
        label = f"{row['model']} on {row['gpu_count']} x {row['gpu']}" + (
            f" ({row['engine']})" if row.get("engine") else ""
        )
        text = paragraph(row, share, replays.get(dep, []), acc.get(dep, ""), curves.get(dep), reps)
        paras.append(f"<p><strong>{esc(label)}</strong> — {esc(text)}</p>")
    more = df.height - len(paras)
    s.body = (
        "".join(paras)
        + (f'<p class="note">{more} smaller deployment(s) not described.</p>' if more > 0 else "")
        + '<p class="note">Generated from the figures on this page: observed ones from the '
        "logs; those said to come from step costs, replays or the model are the model's, "
        "with its measured error where `pipeline validate` ran.</p>"
    )
    s.summary = {"paragraphs": len(paras), "with_prefill_share": shares, "replayed": replayed}
    return s
