"""Fit from a plain table of measured times: (phase, batch, tokens, context, time) rows.

This is how measured step tables (Splitwise's ``perf_model.csv``, a profiler sweep) are fitted,
with the same code the warehouse path uses (:func:`pipeline.fit.core.fit_observations`).

Rows:
    phase    'prefill' or 'decode'
    batch    sequences in the step
    tokens   prefill: new tokens per sequence (decode rows: ignored, one per sequence)
    context  prefill: tokens already cached per sequence; decode: context per sequence
    time_s   measured step time in seconds
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.catalog import GPU, Model
from pipeline.fit.core import FittedModel, GroupKey, fit_observations, unit_cost, work_features
from pipeline.physics import StepCost, StepWork


def observations(frame: pl.DataFrame, cost: StepCost) -> dict[str, pl.DataFrame]:
    """Observation frames per phase from (phase, batch, tokens, context, time_s) rows."""
    out: dict[str, pl.DataFrame] = {}
    for phase in ("prefill", "decode"):
        f = frame.filter(pl.col("phase") == phase)
        b = f["batch"].cast(pl.Float64).to_numpy()
        ctx = f["context"].cast(pl.Float64).fill_null(0.0).to_numpy()
        if phase == "prefill":
            t = f["tokens"].cast(pl.Float64).to_numpy()
            work = StepWork(b * t, b, b * t * (ctx + t / 2.0), b * (ctx + t), b * t * t)
        else:
            work = StepWork.decode(b, b * ctx)
        feats = work_features(cost, work)
        out[phase] = pl.DataFrame(
            {
                "time_s": f["time_s"].cast(pl.Float64).to_numpy(),
                "n_steps": np.ones(f.height),
                "seqs": b,
                **feats,
            }
        )
    return out


def physically_possible(obs: pl.DataFrame) -> pl.Series:
    """A measured time below the roofline at 100 % MFU and MBU (plus all-reduces) is impossible."""
    floor = pl.max_horizontal("c1", "m1") + pl.col("comm_s")
    return obs.select((pl.col("time_s") >= floor).alias("ok"))["ok"]


def fit_frame(
    frame: pl.DataFrame,
    model: Model,
    gpu: GPU,
    tp: int = 1,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    attention: str | None = None,
    drop_impossible: bool = True,
) -> FittedModel:
    """Fit prefill and decode models of one (model, GPU, TP) group from a measured table.

    Rows whose time is below the 100 %-efficiency roofline are physically impossible (a logging
    or measurement error) and are dropped when ``drop_impossible``; the count is kept in
    ``extra['dropped_impossible']``.
    """
    cost = unit_cost(model, gpu, tp, weight_dtype, kv_dtype, attention)
    obs = observations(frame, cost)
    dropped = 0
    if drop_impossible:
        for phase, o in obs.items():
            keep = physically_possible(o)
            dropped += int((~keep).sum())
            obs[phase] = o.filter(keep)
    key = GroupKey(model.name, gpu.name, tp, attention=attention, weight_dtype=weight_dtype,
                   kv_dtype=kv_dtype)  # fmt: skip
    return fit_observations(
        key, model, gpu, obs["prefill"], obs["decode"], {"dropped_impossible": dropped}
    )
