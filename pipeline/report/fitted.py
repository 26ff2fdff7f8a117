"""Fitted cost models, read from the ``cost_models`` table that ``pipeline fit`` writes.

Contract (docs/report.md): one row per deployment with columns ``model`` and ``gpu``, optionally
``tp`` or ``gpu_count``, ``weight_dtype``, ``kv_dtype`` and ``phase`` ('prefill' / 'decode'; a row
without one serves both), and any of :class:`pipeline.physics.StepCost`'s fields (``mfu``, ``mbu``,
``step_overhead``, ``seq_overhead``, ...). The report evaluates ``StepCost`` on a grid to draw the
fitted prefill curve and the fitted decode-step line. Rows it cannot use are skipped and counted.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.report.context import Context

_FIELDS = {f.name for f in dataclasses.fields(StepCost)} - {"model", "gpu", "tp"}


# The report queries' deployment key: model, GPU, GPU count and dtypes (two fits that differ in
# any of them are two deployments, never one overwriting the other).
DeploymentKey = tuple[str, str, int, str, str]


@dataclass
class Fitted:
    prefill: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    decode: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    # (phase, deployment key) -> (StepCost, {mfu_ci_low, ...}) for every row of cost_models
    by_deployment: dict[tuple[str, DeploymentKey], tuple[StepCost, dict]] = field(
        default_factory=dict
    )
    skipped: int = 0
    present: bool = False

    def get(self, phase: str, key: DeploymentKey) -> tuple[StepCost, dict] | None:
        return self.by_deployment.get((phase, key))


def deployment_key(model: object, gpu: object, gpu_count: object, wd: object, kd: object):  # type: ignore[no-untyped-def]
    """The key as the report queries write it (missing dtypes are bf16, missing count 1)."""
    return (str(model), str(gpu), int(gpu_count or 1), str(wd or "bf16"), str(kd or "bf16"))


def _value(v: object) -> object:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def load_fitted(ctx: Context) -> Fitted:
    """StepCost per (model, gpu) as logged, for each phase; empty when there is no table."""
    out = Fitted()
    if not ctx.has("cost_models"):
        return out
    out.present = True
    df = ctx.table("cost_models")
    if not {"model", "gpu"} <= set(df.columns):
        out.skipped = df.height
        return out
    for row in df.iter_rows(named=True):
        try:
            kw = {k: _value(row[k]) for k in _FIELDS if k in row and _value(row[k]) is not None}
            tp = _value(row.get("tp")) or _value(row.get("gpu_count")) or 1
            cost = StepCost(
                model=catalog.model(str(row["model"])),
                gpu=catalog.gpu(str(row["gpu"])),
                tp=int(tp),  # type: ignore[arg-type]
                **kw,
            )
        except (catalog.UnknownName, KeyError, TypeError, ValueError):
            out.skipped += 1
            continue
        key = (str(row["model"]), str(row["gpu"]))
        dep = deployment_key(
            row["model"], row["gpu"], tp, row.get("weight_dtype"), row.get("kv_dtype")
        )
        ci = {
            k: _value(row.get(k))
            for k in ("mfu_ci_low", "mfu_ci_high", "mbu_ci_low", "mbu_ci_high")
        }
        phase = str(row.get("phase") or "").lower()
        if phase in ("", "prefill"):
            out.prefill[key] = cost
            out.by_deployment[("prefill", dep)] = (cost, ci)
        if phase in ("", "decode"):
            out.decode[key] = cost
            out.by_deployment[("decode", dep)] = (cost, ci)
    return out
