"""Fitted cost models for the report, read through the fit's own accessor.

The ``cost_models`` table is read by :func:`pipeline.fit.store.from_frame`, the same code that
replay and attribution use, so the report can never draw a curve the fit would not replay. The
report's series are keyed coarser than a deployment (model x GPU x GPU count x dtypes, or model
x GPU for the TTFT chart): where two fitted deployments fall on one report key (e.g. the same
model and GPU under two engines), that key is *ambiguous* and no fitted line is drawn for it
rather than one picked at random; the count is in the section summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pipeline.fit.store import from_frame
from pipeline.physics import StepCost
from pipeline.report.context import Context

# The report queries' deployment key: model, GPU, GPU count and dtypes.
DeploymentKey = tuple[str, str, int, str, str]
_CI = ("mfu", "mbu")


@dataclass
class Fitted:
    prefill: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    decode: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    # (phase, report key) -> (StepCost, {mfu_ci_low, ...})
    by_deployment: dict[tuple[str, DeploymentKey], tuple[StepCost, dict]] = field(
        default_factory=dict
    )
    skipped: int = 0  # fitted deployments whose model or GPU the catalog lacks
    ambiguous: int = 0  # report keys that two or more fitted deployments fall on
    present: bool = False

    def get(self, phase: str, key: DeploymentKey) -> tuple[StepCost, dict] | None:
        return self.by_deployment.get((phase, key))


def deployment_key(model: object, gpu: object, gpu_count: object, wd: object, kd: object):  # type: ignore[no-untyped-def]
    """The key as the report queries write it (missing dtypes are bf16, missing count 1)."""
    return (str(model), str(gpu), int(gpu_count or 1), str(wd or "bf16"), str(kd or "bf16"))


def _ci(ci: dict[str, tuple[float, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _CI:
        lo, hi = ci.get(name, (math.nan, math.nan))
        out[f"{name}_ci_low"] = None if math.isnan(lo) else lo
        out[f"{name}_ci_high"] = None if math.isnan(hi) else hi
    return out


def _unique(pairs: list[tuple[Any, Any]]) -> tuple[dict[Any, Any], int]:
    """key -> value where exactly one value has the key; and how many keys had several."""
    seen: dict[Any, list[Any]] = {}
    for k, v in pairs:
        seen.setdefault(k, []).append(v)
    return {k: v[0] for k, v in seen.items() if len(v) == 1}, sum(len(v) > 1 for v in seen.values())


def load_fitted(ctx: Context) -> Fitted:
    """Fitted step costs per report key and phase; empty when there is no table."""
    out = Fitted()
    if not ctx.has("cost_models"):
        return out
    out.present = True
    df = ctx.table("cost_models")
    fits = from_frame(df) if df.height else {}
    out.skipped = len({r for r in df["deployment"].to_list()}) - len(fits) if df.height else 0
    for phase, coarse in (("prefill", out.prefill), ("decode", out.decode)):
        fine, coarse_pairs = [], []
        for key, fm in fits.items():
            cost = fm.step_cost(phase)
            dep = deployment_key(key.model, key.gpu, key.gpu_count, key.weight_dtype, key.kv_dtype)
            pf = fm.phase(phase)
            # The intervals, and where MFU / MBU come from ('fit', 'at cap', 'other phase'):
            # the report prints only a 'fit' as a fitted value.
            info = _ci(pf.ci) | {f"{n}_source": pf.source.get(n) for n in ("mfu", "mbu")}
            fine.append(((phase, dep), (cost, info)))
            coarse_pairs.append(((key.model, key.gpu), cost))
        by_dep, n_fine = _unique(fine)
        by_pair, n_coarse = _unique(coarse_pairs)
        out.by_deployment.update(by_dep)
        coarse.update(by_pair)
        out.ambiguous = max(out.ambiguous, n_fine, n_coarse)
    return out
