"""Fit one group: a prefill model and a decode model, each a full StepCost parameter set.

:func:`fit_observations` is the one entry point both the warehouse path (steps reconstructed from
logs) and :func:`fit_frame` (plain tables of measured times, e.g. Splitwise's perf model) use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from pipeline.catalog import GPU, Model
from pipeline.fit.model import (
    ParamFit,
    efficiency_interval,
    fit_params,
    mape,
    predict,
    r_squared,
)
from pipeline.physics import StepCost, StepWork, critical_batch
from pipeline.schema import deployment

PHASES = ("prefill", "decode")
HOLDOUT_EVERY = 5  # every 5th observation (by a fixed hash) is held out: a 20 % test split
MAX_FIT_OBS = 50_000  # per phase; larger sets are thinned deterministically before fitting


# One deployment (pipeline/schema/deployment.py): what cost_models has one row per phase for.
GroupKey = deployment.GroupKey


@dataclass(frozen=True)
class PhaseFit:
    """One phase's fitted StepCost parameters with quality and 95 % intervals."""

    phase: str
    mfu: float
    mbu: float
    step_overhead: float
    seq_overhead: float
    ci: dict[str, tuple[float, float]]  # name -> (low, high); NaN where not identified
    source: dict[str, str]  # name -> 'fit' or 'prefill' / 'decode' (borrowed) or 'default'
    n: int
    n_train: int
    n_test: int
    r2_test: float
    mape_test: float
    mape_all: float
    scale: float
    frac_compute: float


@dataclass(frozen=True)
class FittedModel:
    """Fitted step-time model of one group; ``step_cost()`` gives the simulator's cost model."""

    key: GroupKey
    model: Model
    gpu: GPU
    prefill: PhaseFit | None
    decode: PhaseFit | None
    extra: dict[str, Any] = field(default_factory=dict)

    def phase(self, phase: str) -> PhaseFit:
        fit = self.prefill if phase == "prefill" else self.decode
        if fit is None:
            other = self.decode if phase == "prefill" else self.prefill
            if other is None:
                raise ValueError(f"{self.key}: no fitted phase")
            return other
        return fit

    def step_cost(self, phase: str = "decode") -> StepCost:
        """StepCost with the fitted efficiencies and overheads of ``phase`` ('prefill'/'decode')."""
        p = self.phase(phase)
        return StepCost(
            self.model,
            self.gpu,
            tp=self.key.gpu_count,
            weight_dtype=self.key.weight_dtype,
            kv_dtype=self.key.kv_dtype,
            flash_attention=(self.key.attention or "flash") != "eager",
            mfu=p.mfu,
            mbu=p.mbu,
            step_overhead=p.step_overhead,
            seq_overhead=p.seq_overhead,
        )

    def prefill_time(self, new_tokens: Any, cached: Any = 0) -> Any:
        return self.step_cost("prefill").prefill_time(new_tokens, cached)

    def decode_step_time(self, batch: Any, sum_context: Any) -> Any:
        return self.step_cost("decode").decode_step_time(batch, sum_context)


def unit_cost(
    model: Model,
    gpu: GPU,
    tp: int,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    attention: str | None = None,
) -> StepCost:
    """StepCost at 100 % MFU and MBU and no overheads: its times are the ideal features."""
    return StepCost(
        model,
        gpu,
        tp=tp,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        flash_attention=(attention or "flash") != "eager",
        mfu=1.0,
        mbu=1.0,
    )


def work_features(cost: StepCost, work: StepWork) -> dict[str, np.ndarray]:
    """Ideal compute / memory seconds and all-reduce seconds of steps (vectorised)."""
    return {
        "c1": np.asarray(cost.compute_seconds(work), dtype=np.float64),
        "m1": np.asarray(cost.memory_seconds(work), dtype=np.float64),
        "comm_s": np.asarray(
            cost.fixed_seconds(replace(work, seqs=np.zeros_like(np.asarray(work.seqs, float)))),
            dtype=np.float64,
        )
        * np.ones_like(np.asarray(work.tokens, dtype=np.float64)),
    }


def _thin(obs: pl.DataFrame, limit: int) -> pl.DataFrame:
    if obs.height <= limit:
        return obs
    step = obs.height / limit
    return obs[np.floor(np.arange(limit) * step).astype(np.int64)]


def _split(n: int) -> np.ndarray:
    """Deterministic test mask: a multiplicative hash of the index, 1 in HOLDOUT_EVERY."""
    h = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(2**32)
    return (h % np.uint64(HOLDOUT_EVERY)) == 0


def _phase_fit(phase: str, obs: pl.DataFrame, fixed: dict[str, float]) -> PhaseFit:
    obs = _thin(obs, MAX_FIT_OBS)
    test = _split(obs.height)
    train = obs.filter(pl.Series(~test))
    held = obs.filter(pl.Series(test))
    # One fit on the training split: its parameters are reported and scored on the held-out 20 %.
    pf = fit_params(train, fixed)
    t_held = held["time_s"].to_numpy()
    pred_held = predict(pf.x, held)
    pred_all = predict(pf.x, obs)
    return _phase_record(phase, pf, obs, pred_all, held.height, t_held, pred_held)


def _phase_record(
    phase: str,
    pf: ParamFit,
    obs: pl.DataFrame,
    pred_all: np.ndarray,
    n_test: int,
    t_held: np.ndarray,
    pred_held: np.ndarray,
) -> PhaseFit:
    ci = {
        "mfu": efficiency_interval(pf.x[0], pf.low[0], pf.high[0]),
        "mbu": efficiency_interval(pf.x[1], pf.low[1], pf.high[1]),
        "step_overhead": (max(pf.low[2], 0.0), pf.high[2]),
        "seq_overhead": (max(pf.low[3], 0.0), pf.high[3]),
    }
    names = ("mfu", "mbu", "step_overhead", "seq_overhead")
    source = {
        n: ("fit" if ident else "unidentified")
        for n, ident in zip(names, pf.identified, strict=False)
    }
    for name, cap in zip(("mfu", "mbu"), pf.at_cap, strict=False):
        if cap:
            source[name] = "at cap"
    for name, pname in (("mfu", "inv_mfu"), ("mbu", "inv_mbu")):
        if pname in pf.fixed:
            source[name] = "other phase"
            ci[name] = (math.nan, math.nan)
    return PhaseFit(
        phase=phase,
        mfu=float(pf.mfu),
        mbu=float(pf.mbu),
        step_overhead=float(pf.x[2]),
        seq_overhead=float(pf.x[3]),
        ci=ci,
        source=source,
        n=pf.n + n_test,
        n_train=pf.n,
        n_test=n_test,
        r2_test=r_squared(pred_held, t_held),
        mape_test=mape(pred_held, t_held),
        mape_all=mape(pred_all, obs["time_s"].to_numpy()),
        scale=pf.scale,
        frac_compute=pf.frac_compute,
    )


MIN_STEPS = 20  # observations a phase's step fit needs


def _enough(obs: pl.DataFrame | None) -> bool:
    return obs is not None and obs.height >= MIN_STEPS


def fit_observations(
    key: GroupKey,
    model: Model,
    gpu: GPU,
    prefill_obs: pl.DataFrame | None,
    decode_obs: pl.DataFrame | None,
    extra: dict[str, Any] | None = None,
) -> FittedModel:
    """Fit the prefill and the decode model of one group from observation frames.

    Each phase fits all four parameters; an efficiency whose roofline branch the phase's data
    never reach (decode below the critical batch never shows MFU; long prefills rarely show MBU)
    is then pinned to the other phase's estimate and the phase refitted, so that both rows are
    usable StepCosts. ``source`` records which values were borrowed.
    """
    pre = _phase_fit("prefill", prefill_obs, {}) if _enough(prefill_obs) else None
    dec = _phase_fit("decode", decode_obs, {}) if _enough(decode_obs) else None
    if dec is not None and pre is not None:
        if dec.source["mfu"] != "fit" and pre.source["mfu"] == "fit":
            dec = _phase_fit("decode", decode_obs, {"inv_mfu": 1.0 / pre.mfu})  # type: ignore[arg-type]
        if pre.source["mbu"] != "fit" and dec.source["mbu"] == "fit":
            pre = _phase_fit("prefill", prefill_obs, {"inv_mbu": 1.0 / dec.mbu})  # type: ignore[arg-type]
    return FittedModel(key, model, gpu, pre, dec, dict(extra or {}))


def critical_batches(fm: FittedModel) -> tuple[float, float]:
    """(roofline B*, fitted B*): the fitted one scales the datasheet ratio by mfu / mbu."""
    roof = critical_batch(fm.gpu, fm.key.weight_dtype)
    d = fm.decode or fm.prefill
    if d is None:
        return roof, math.nan
    return roof, roof * d.mfu / d.mbu
