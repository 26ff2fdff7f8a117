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


@dataclass
class Fitted:
    prefill: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    decode: dict[tuple[str, str], StepCost] = field(default_factory=dict)
    skipped: int = 0
    present: bool = False


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
        phase = str(row.get("phase") or "").lower()
        if phase in ("", "prefill"):
            out.prefill[key] = cost
        if phase in ("", "decode"):
            out.decode[key] = cost
    return out
