"""Step times for a replay: a fitted model, or the catalog roofline with borrowed efficiencies.

Order of preference (the chosen source is printed and stored with the replayed run):

0. a ``calibration`` of the same model (``pipeline fit`` calibrates by replaying the recorded
   runs): its efficiencies, overlap and overheads on the target's roofline; "calibration" when
   the GPU, GPU count and dtypes are the calibrated ones, else "calibration-carried" (the
   cross-hardware rule: the target GPU's catalog roofline with the efficiencies carried from
   the observed GPU, preferring the same GPU count);
1. a ``cost_models`` group (``pipeline fit``) with the same model, GPU, GPU count and dtypes;
2. otherwise the catalog roofline of the *target* hardware and model, with the efficiencies and
   overheads fitted on the nearest observed hardware: the same GPU if any fit has it, else the
   GPU closest in (log ops:byte ratio, log bandwidth), preferring the same model and GPU count;
3. with no fit at all, default efficiencies (MFU 0.5, MBU 0.7, 2 ms per step, 10 us per
   sequence; cost-models-and-hardware.md §6).

A fitted group has a prefill and a decode model; steps that carry prefill tokens use the
prefill one and decode-only steps the decode one (the split ``pipeline fit`` uses).
``[cost]`` in whatif.toml overrides any of mfu, mbu, step_overhead, seq_overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey
from pipeline.physics import StepCost
from pipeline.sim.cost import PhaseCost

DEFAULTS = {"mfu": 0.5, "mbu": 0.7, "step_overhead": 2e-3, "seq_overhead": 1e-5}
PARAMS = tuple(DEFAULTS)


@dataclass(frozen=True)
class Target:
    model: catalog.Model
    gpu: catalog.GPU
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    flash_attention: bool = True

    def step_cost(self, eff: dict[str, float]) -> StepCost:
        return StepCost(
            self.model,
            self.gpu,
            tp=self.tp,
            weight_dtype=self.weight_dtype,
            kv_dtype=self.kv_dtype,
            flash_attention=self.flash_attention,
            **{k: eff[k] for k in PARAMS},
        )


@dataclass(frozen=True)
class CostChoice:
    cost: PhaseCost
    source: str  # 'fit' | 'nearest-fit' | 'default'
    describe: str  # one line for the user
    fit_key: GroupKey | None = None


def _same_model(key: GroupKey, model: catalog.Model) -> bool:
    try:
        return catalog.model(key.model).key == model.key
    except catalog.UnknownName:
        return False


def _gpu_distance(a: catalog.GPU, b: catalog.GPU) -> float:
    ratio = math.log((a.bf16_flops / a.bandwidth) / (b.bf16_flops / b.bandwidth))
    return abs(ratio) + abs(math.log(a.bandwidth / b.bandwidth))


def _eff(fm: FittedModel, phase: str) -> dict[str, float]:
    p = fm.phase(phase)
    return {k: float(getattr(p, k)) for k in PARAMS}


def _label(k: GroupKey) -> str:
    return f"{k.model} on {k.gpu_count} x {k.gpu} ({k.weight_dtype}/{k.kv_dtype})"


def choose(
    target: Target,
    fits: dict[GroupKey, FittedModel],
    source: str = "auto",
    overrides: dict[str, float | None] | None = None,
) -> CostChoice:
    """The cost model for ``target``: see the module docstring for the order."""
    over = {k: v for k, v in (overrides or {}).items() if v is not None}
    usable = {k: fm for k, fm in fits.items() if fm.prefill is not None or fm.decode is not None}
    if source == "roofline" or not usable:
        if source == "fit":
            raise ValueError("cost.source = 'fit' but the warehouse has no fitted cost_models")
        eff = DEFAULTS | over
        c = target.step_cost(eff)
        why = "cost.source = 'roofline'" if source == "roofline" else "no fit in the warehouse"
        return CostChoice(
            PhaseCost(c, c),
            "default",
            f"roofline of {target.gpu.name} with default efficiencies ({why})",
        )

    def rank(item: tuple[GroupKey, FittedModel]) -> tuple:
        k, fm = item
        exact_gpu = fm.gpu.key == target.gpu.key
        return (
            0 if exact_gpu else 1,
            _gpu_distance(fm.gpu, target.gpu),
            0 if _same_model(k, target.model) else 1,
            0 if k.gpu_count == target.tp else 1,
            0 if (k.weight_dtype, k.kv_dtype) == (target.weight_dtype, target.kv_dtype) else 1,
            -(fm.extra.get("requests_used") or 0),
            str(k),
        )

    key, fm = min(usable.items(), key=rank)
    exact = (
        fm.gpu.key == target.gpu.key
        and _same_model(key, target.model)
        and key.gpu_count == target.tp
        and (key.weight_dtype, key.kv_dtype) == (target.weight_dtype, target.kv_dtype)
    )
    pre = target.step_cost(_eff(fm, "prefill") | over)
    dec = target.step_cost(_eff(fm, "decode") | over)
    if exact:
        text = f"fitted model of {_label(key)}"
        kind = "fit"
    else:
        text = (
            f"roofline of {target.model.name} on {target.tp} x {target.gpu.name} with the "
            f"efficiencies fitted on {_label(key)} (nearest observed hardware)"
        )
        kind = "nearest-fit"
    if over:
        text += " with " + ", ".join(f"{k}={v:g}" for k, v in sorted(over.items()))
    return CostChoice(PhaseCost(pre, dec), kind, text, key)


def choose_calibrated(
    target: Target, cals: list[Any], overrides: dict[str, float | None] | None = None
) -> tuple[CostChoice, Any] | None:
    """The calibration-based cost for ``target`` and the calibration used, or None."""
    same = [c for c in cals if _same_model_name(c.model, target.model)]
    if not same:
        return None

    def rank(c: Any) -> tuple:
        exact_gpu = catalog.gpu(c.gpu).key == target.gpu.key
        return (
            0 if exact_gpu else 1,
            _gpu_distance(catalog.gpu(c.gpu), target.gpu),
            0 if c.gpu_count == target.tp else 1,
            0 if (c.weight_dtype, c.kv_dtype) == (target.weight_dtype, target.kv_dtype) else 1,
            -c.requests,
        )

    cal = min(same, key=rank)
    over = {k: v for k, v in (overrides or {}).items() if v is not None}
    eff = {
        "mfu": cal.values["mfu"],
        "mbu": cal.values["mbu"],
        "step_overhead": cal.values["step_overhead_s"],
        "seq_overhead": cal.values["seq_overhead_s"],
    } | over
    cost = StepCost(
        target.model,
        target.gpu,
        tp=target.tp,
        weight_dtype=target.weight_dtype,
        kv_dtype=target.kv_dtype,
        flash_attention=target.flash_attention,
        overlap=cal.values.get("overlap", 1.0),
        **{k: eff[k] for k in PARAMS},
    )
    exact = (
        catalog.gpu(cal.gpu).key == target.gpu.key
        and cal.gpu_count == target.tp
        and (cal.weight_dtype, cal.kv_dtype) == (target.weight_dtype, target.kv_dtype)
    )
    text = cal.describe()
    if not exact:
        text = (
            f"roofline of {target.model.name} on {target.tp} x {target.gpu.name} with the "
            f"efficiencies {text}"
        )
    if over:
        text += " with " + ", ".join(f"{k}={v:g}" for k, v in sorted(over.items()))
    kind = "calibration" if exact else "calibration-carried"
    return CostChoice(PhaseCost(cost, cost), kind, text), (cal if exact else None)


def _same_model_name(name: str, model: catalog.Model) -> bool:
    try:
        return catalog.model(name).key == model.key
    except catalog.UnknownName:
        return False
