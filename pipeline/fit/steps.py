"""Batch reconstruction: the engine steps of one server, rebuilt from request and token logs.

Every engine step starts at the previous step's end (or at an arrival when the engine was idle)
and emits a token for every sequence it decodes, all at its end. So, per server (clock domain):

* with per-token times (``tokens``): emissions that coincide across requests (within ``TOL``)
  are step ends; ``scheduled`` times are step starts. A step is the interval from the previous
  boundary to an emission cluster. Its decoders are the emissions with index >= 1 (context =
  prompt + index - 1); its prefills are the requests scheduled at its start whose first token is
  its end. Steps carrying a prefill chunk we cannot size (a prompt split over several steps) are
  left out, which selects on inputs only and so does not bias the fit.
* with requests only: prefill steps are [scheduled, first_token] (exact without chunking; with
  chunking only when the prompt fit the step's token budget); the decoders in them are the
  requests in flight (first_token <= start < finish), their contexts interpolated along each
  request's own TPOT. Decode observations are whole requests: decode_s over output_tokens - 1
  steps, with the batch and context averaged over its decode window from the requests in flight,
  and the prefill steps that fell inside the window as a second, compute-bound part.

Everything is numpy over sorted arrays (searchsorted, bincount, cumsum); the only Python loop is
one per server.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.fit.core import work_features
from pipeline.physics import StepCost, StepWork

TOL = 50e-6  # seconds: emissions closer than this are one step end (logs round to 1 us)


@dataclass
class Requests:
    """One server's successful requests (absolute times on one clock), any order."""

    sched: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    prompt: np.ndarray  # new prefill tokens are prompt - cached
    cached: np.ndarray
    output: np.ndarray
    arrival: np.ndarray


def _cluster(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted times -> (cluster id per time, start index of each cluster)."""
    new = np.empty(len(t), dtype=bool)
    if len(t):
        new[0] = True
        new[1:] = np.diff(t) > TOL
    ids = np.cumsum(new) - 1
    return ids, np.flatnonzero(new)


def _nearest(bounds: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the boundary within TOL of each t, -1 where none."""
    i = np.clip(np.searchsorted(bounds, t), 1, max(len(bounds) - 1, 1))
    lo = np.clip(i - 1, 0, len(bounds) - 1)
    hi = np.clip(i, 0, len(bounds) - 1)
    pick = np.where(np.abs(bounds[lo] - t) <= np.abs(bounds[hi] - t), lo, hi)
    ok = np.abs(bounds[pick] - t) <= TOL
    return np.where(ok, pick, -1)


def _prefill_work(r: Requests) -> dict[str, np.ndarray]:
    t = (r.prompt - r.cached).astype(np.float64)
    s = r.cached.astype(np.float64)
    return {"T": t, "pairs": t * (s + t / 2.0), "kv": s + t, "score": t * t}


def steps_from_tokens(
    r: Requests,
    emit_t: np.ndarray,
    emit_ctx: np.ndarray,
    emit_decode: np.ndarray,
    *,
    budget: float | None,
) -> pl.DataFrame:
    """Exact steps of one server from its emissions (absolute time, context, is-decode)."""
    order = np.argsort(emit_t, kind="stable")
    et, ectx, edec = emit_t[order], emit_ctx[order], emit_decode[order]
    cid, starts = _cluster(et)
    n_c = len(starts)
    c_time = np.add.reduceat(et, starts) / np.diff(np.append(starts, len(et))) if n_c else et
    B = np.bincount(cid, weights=edec.astype(np.float64), minlength=n_c)
    sumC = np.bincount(cid, weights=np.where(edec, ectx, 0.0), minlength=n_c)
    # Boundaries: emission clusters plus scheduled times that are not one.
    extra = r.sched[_nearest(c_time, r.sched) < 0] if n_c else r.sched
    extra = np.unique(extra)
    if len(extra):
        _eid, estart = _cluster(extra)
        extra = extra[estart]
    bt = np.concatenate([c_time, extra])
    is_emit = np.concatenate([np.ones(n_c, bool), np.zeros(len(extra), bool)])
    b_B = np.concatenate([B, np.zeros(len(extra))])
    b_C = np.concatenate([sumC, np.zeros(len(extra))])
    o = np.argsort(bt, kind="stable")
    bt, is_emit, b_B, b_C = bt[o], is_emit[o], b_B[o], b_C[o]
    nb = len(bt)
    sb = _nearest(bt, r.sched)
    fb = _nearest(bt, r.first)
    valid = (sb >= 0) & (fb > sb)
    # Prefilling during step k (start k-1): sched_b <= k-1 < first_b.
    sched_cum = np.cumsum(np.bincount(sb[valid], minlength=nb))
    first_cum = np.cumsum(np.bincount(fb[valid], minlength=nb))
    active = np.zeros(nb)
    active[1:] = sched_cum[:-1] - first_cum[:-1]
    exact = valid & (fb == sb + 1)
    w = _prefill_work(r)
    n_ex = np.bincount(fb[exact], minlength=nb).astype(np.float64)
    agg = {k: np.bincount(fb[exact], weights=v[exact], minlength=nb) for k, v in w.items()}
    k = np.arange(1, nb)
    keep = is_emit[k] & (active[k] == n_ex[k]) & ((b_B[k] + n_ex[k]) > 0)
    if budget is not None:
        keep &= (b_B[k] + agg["T"][k]) <= budget
    k = k[keep]
    return pl.DataFrame(
        {
            "time_s": bt[k] - bt[k - 1],
            "tokens": b_B[k] + agg["T"][k],
            "seqs": b_B[k] + n_ex[k],
            "attn_pairs": b_C[k] + agg["pairs"][k],
            "kv_tokens": b_C[k] + agg["kv"][k],
            "score_elems": agg["score"][k],
            "batch": b_B[k],
            "prefills": n_ex[k],
            "n_steps": np.ones(len(k)),
        }
    )


def steps_from_requests(r: Requests, *, chunked: bool, budget: float | None) -> pl.DataFrame:
    """Prefill steps (exact step, estimated decoders) from requests alone."""
    n = len(r.sched)
    dec = r.output > 1
    tpot = np.where(dec, (r.finish - r.first) / np.maximum(r.output - 1, 1), np.inf)
    # In-flight decoders at t: first <= t < finish. Sorted event arrays for counting.
    f_o = np.argsort(r.first)
    fin_o = np.argsort(r.finish)
    f_s, fin_s = r.first[f_o], r.finish[fin_o]

    def cum(order: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(v[order])])

    p = r.prompt.astype(np.float64)
    inv = np.where(dec, 1.0 / np.where(np.isfinite(tpot) & (tpot > 0), tpot, np.inf), 0.0)
    one = dec.astype(np.float64)
    sums = {
        name: (cum(f_o, v), cum(fin_o, v))
        for name, v in (("n", one), ("p", p * one), ("b", inv), ("a", r.first * inv))
    }

    def inflight(t: np.ndarray, name: str) -> np.ndarray:
        a, b = sums[name]
        return (
            a[np.searchsorted(f_s, t + TOL, "right")] - b[np.searchsorted(fin_s, t + TOL, "right")]
        )

    # Requests scheduled together form one step; all must complete together, nobody else
    # prefilling across it.
    key_s = np.round(r.sched / TOL).astype(np.int64)
    frame = pl.DataFrame({"ks": key_s, "sched": r.sched, "first": r.first, **_prefill_work(r)})
    g = (
        frame.group_by("ks")
        .agg(
            pl.col("sched").min().alias("start"),
            pl.col("first").min().alias("end"),
            (pl.col("first").max() - pl.col("first").min()).alias("spread"),
            pl.len().alias("prefills"),
            pl.col("T").sum(),
            pl.col("pairs").sum(),
            pl.col("kv").sum(),
            pl.col("score").sum(),
        )
        .filter(pl.col("spread") <= TOL, pl.col("end") > pl.col("start"))
    )
    start = g["start"].to_numpy()
    end = g["end"].to_numpy()
    # Others prefilling across this step (scheduled before it, first token after its start).
    s_sorted = np.sort(r.sched)
    fs_sorted = np.sort(r.first)
    before = np.searchsorted(s_sorted, start - TOL, "left")
    done = np.searchsorted(fs_sorted, start + TOL, "right")
    others = before - done
    B = inflight(start, "n")
    ctx = inflight(start, "p") + start * inflight(start, "b") - inflight(start, "a")
    T = g["T"].to_numpy()
    ok = others <= 0
    if chunked and budget is not None:
        ok &= budget >= (B + T)
    del n
    return pl.DataFrame(
        {
            "time_s": end - start,
            "tokens": B + T,
            "seqs": B + g["prefills"].to_numpy(),
            "attn_pairs": ctx + g["pairs"].to_numpy(),
            "kv_tokens": ctx + g["kv"].to_numpy(),
            "score_elems": g["score"].to_numpy(),
            "batch": B,
            "context": ctx,
            "prefills": g["prefills"].to_numpy().astype(np.float64),
            "n_steps": np.ones(len(start)),
            "start": start,
            "end": end,
            "exact": ok,
        }
    ).sort("start")


def decode_windows(r: Requests, cost: StepCost, prefill_steps: pl.DataFrame) -> pl.DataFrame:
    """Decode observations from requests alone: one per request over its decode window.

    The window's prefill-carrying steps whose span is known (``prefill_steps``: start, end,
    batch, context) are taken out of the window's time and step count; what remains are
    decode-only steps whose batch and summed context are the window's time averages of the
    requests in flight (contexts interpolated along each request's TPOT).
    """
    dec = (r.output > 2) & (r.finish > r.first)
    tpot = np.where(dec, (r.finish - r.first) / np.maximum(r.output - 1, 1), np.nan)
    ps = prefill_steps.sort("start")
    p_start, p_end = ps["start"].to_numpy(), ps["end"].to_numpy()
    ev = np.unique(np.concatenate([r.first[dec], r.finish[dec], p_start, p_end]))
    m = len(ev)
    idx_f = np.searchsorted(ev, r.first)
    idx_e = np.searchsorted(ev, r.finish)

    def delta(weights: np.ndarray) -> np.ndarray:
        return (
            np.bincount(idx_f[dec], weights=weights[dec], minlength=m + 1)[:m]
            - np.bincount(idx_e[dec], weights=weights[dec], minlength=m + 1)[:m]
        )

    inv = np.where(dec, 1.0 / np.where(dec, tpot, 1.0), 0.0)
    B = np.cumsum(delta(np.ones(len(dec))))  # decoders on [ev_i, ev_{i+1})
    A = np.cumsum(delta(r.prompt - r.first * inv))
    S = np.cumsum(delta(inv))  # summed context on [ev_i, ev_{i+1}) is A + S t
    t0 = ev
    t1 = np.append(ev[1:], ev[-1]) if m else ev
    # Time inside known prefill steps is taken out of the integrals and counted separately.
    i_ps, i_pe = np.searchsorted(ev, p_start), np.searchsorted(ev, p_end)
    in_pf = np.zeros(m + 1)
    np.add.at(in_pf, i_ps, 1.0)
    np.add.at(in_pf, i_pe, -1.0)
    dec_only = (np.cumsum(in_pf)[:m] <= 0).astype(np.float64)
    dt = (t1 - t0) * dec_only
    cum = {
        "time": np.concatenate([[0.0], np.cumsum(dt)]),
        "B": np.concatenate([[0.0], np.cumsum(B * dt)]),
        "C": np.concatenate(
            [[0.0], np.cumsum(dec_only * (A * (t1 - t0) + S * (t1**2 - t0**2) / 2))]
        ),
    }
    # Prefill steps per event index (counted at their end).
    pf_n = np.bincount(i_pe, minlength=m + 1)[:m].astype(np.float64)
    cum["pf"] = np.concatenate([[0.0], np.cumsum(pf_n)])
    sel = np.flatnonzero(dec)
    i0, i1 = idx_f[sel], idx_e[sel]
    t_dec = cum["time"][i1] - cum["time"][i0]
    n_pf = cum["pf"][i1 + 1] - cum["pf"][i0 + 1]  # prefill steps ending in (first, finish]
    n_d = (r.output[sel] - 1).astype(np.float64) - n_pf
    safe = np.maximum(t_dec, 1e-12)
    Bbar = (cum["B"][i1] - cum["B"][i0]) / safe
    Cbar = (cum["C"][i1] - cum["C"][i0]) / safe
    f1 = work_features(cost, StepWork.decode(Bbar, np.maximum(Cbar, 0.0)))
    out = pl.DataFrame(
        {
            "time_s": t_dec,
            "n_steps": n_d,
            "seqs": n_d * Bbar,
            "c1": n_d * f1["c1"],
            "m1": n_d * f1["m1"],
            "comm_s": n_d * f1["comm_s"],
            "batch": Bbar,
        }
    )
    return out.filter(pl.col("time_s") > 0, pl.col("n_steps") >= 2, pl.col("batch") >= 1)


def step_observations(steps: pl.DataFrame, cost: StepCost) -> pl.DataFrame:
    """Add the ideal compute / memory / all-reduce seconds of each reconstructed step."""
    work = StepWork(
        steps["tokens"].to_numpy(),
        steps["seqs"].to_numpy(),
        steps["attn_pairs"].to_numpy(),
        steps["kv_tokens"].to_numpy(),
        steps["score_elems"].to_numpy(),
    )
    return steps.with_columns(**{k: pl.Series(k, v) for k, v in work_features(cost, work).items()})
