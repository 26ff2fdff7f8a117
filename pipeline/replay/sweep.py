"""``--sweep KEY=v1,v2,...``: one axis of the what-if space, a table, and the cheapest point.

Keys are dotted what-if fields (``scheduler.chunk_size``) or these short names:

    gpus            total GPUs: replicas = gpus / tp (colocated serving)
    replicas, tp, gpu, model, routing                      -> deployment.*
    chunk_size, max_num_seqs, max_num_batched_tokens       -> scheduler.*
    pd_ratio        'P:D' servers, e.g. 1:2 (turns disaggregation on)

A configuration *meets the SLO* when at least ``attainment`` (default 90 %) of requests meet both
the TTFT and the TPOT target; cost is GPUs x hours of the replay's span (first arrival to last
finish), times ``gpu_hour_usd[gpu]`` when the what-if file prices the GPU.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pipeline.fit.core import FittedModel, GroupKey
from pipeline.replay.config import WhatIf
from pipeline.replay.result import simulate_scenario
from pipeline.replay.scenario import resolve_scenario
from pipeline.replay.workload import RecordedWorkload

ALIASES = {
    "replicas": "deployment.replicas",
    "tp": "deployment.tp",
    "gpu": "deployment.gpu",
    "model": "deployment.model",
    "routing": "deployment.routing",
    "chunk_size": "scheduler.chunk_size",
    "max_num_seqs": "scheduler.max_num_seqs",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "policy": "scheduler.policy",
}
SPECIAL = ("gpus", "gpu_count", "pd_ratio")


def _value(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def parse_sweep(spec: str) -> tuple[str, list[Any]]:
    key, sep, values = spec.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ValueError(f"--sweep wants KEY=v1,v2,... (got {spec!r})")
    vals = [_value(v) for v in values.split(",") if v.strip()]
    if key not in SPECIAL and key not in ALIASES and "." not in key:
        known = ", ".join([*SPECIAL, *ALIASES])
        raise ValueError(f"unknown sweep key {key!r}; use a dotted what-if field or one of {known}")
    return key, vals


def apply_sweep_value(w: WhatIf, key: str, value: Any, workload: RecordedWorkload) -> WhatIf:
    if key in ("gpus", "gpu_count"):
        tp = w.deployment.tp or int(workload.recorded.get("gpu_count") or 1)
        if int(value) % tp:
            raise ValueError(f"gpus={value} is not a multiple of tp={tp}")
        return w.with_value("deployment.replicas", int(value) // tp)
    if key == "pd_ratio":
        p, _, d = str(value).partition(":")
        if not (p.isdigit() and d.isdigit()):
            raise ValueError(f"pd_ratio wants P:D (e.g. 1:2), got {value!r}")
        data = w.model_dump()
        data["disaggregation"] |= {
            "enabled": True, "prefill_replicas": int(p), "decode_replicas": int(d)
        }  # fmt: skip
        return WhatIf.model_validate(data)
    return w.with_value(ALIASES.get(key, key), value)


def run_sweep(
    w: WhatIf,
    workload: RecordedWorkload,
    fits: dict[GroupKey, FittedModel],
    key: str,
    values: list[Any],
    slo_ttft: float | None,
    slo_tpot: float | None,
    attainment: float = 0.9,
    calibrations: list[Any] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any] | None]:
    """The sweep table and the cheapest row that meets the SLO (None if none does)."""
    rows = []
    for v in values:
        sc = resolve_scenario(apply_sweep_value(w, key, v, workload), workload, fits, calibrations)
        res = simulate_scenario(sc, workload, record_steps=False)
        s = res.summary(slo_ttft, slo_tpot)
        meets = s["slo_attainment"] >= attainment and s["refused"] == 0
        rows.append({key: str(v), **s, "meets_slo": meets})
    table = pl.DataFrame(rows)
    ok = table.filter(pl.col("meets_slo"))
    best = None
    if ok.height:
        col = "cost_usd" if ok["cost_usd"].null_count() == 0 else "gpu_hours"
        best = ok.sort([col, "gpus"]).row(0, named=True)
    return table, best
