"""Resolve a what-if against a recorded workload into one complete scenario.

:func:`resolve` turns (WhatIf, RecordedWorkload, fits or calibrations) into a :class:`Scenario`
once: model, GPU, tensor parallelism, servers, every pool's engine configuration (the recorded
run's scheduler, else the engine's defaults from :mod:`pipeline.sim.config`) and cost model.
Nothing downstream reads the what-if again for these: :mod:`pipeline.replay.result` simulates
the scenario on :mod:`pipeline.sim` and summarises it. :func:`run_key` is the identity of a
(workload, scenario) pair, so an identical replay is never written twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey
from pipeline.replay.config import WhatIf
from pipeline.replay.cost import CostChoice, Target, choose, choose_calibrated
from pipeline.replay.workload import RecordedWorkload
from pipeline.sim.cluster import Pool
from pipeline.sim.config import (
    VLLM_V0_WATERMARK,
    EngineConfig,
    default_token_budget,
    kv_capacity_tokens,
    kv_slots,
)


@dataclass(frozen=True)
class PoolPlan:
    name: str  # 'main' | 'prefill' | 'decode'
    pool: Pool
    tp: int
    cost: CostChoice
    max_tokens: int  # longest prompt + output - 1 a request may have here


@dataclass(frozen=True)
class Scenario:
    whatif: WhatIf
    model: catalog.Model
    gpu: catalog.GPU
    tp: int
    weight_dtype: str
    kv_dtype: str
    flash_attention: bool
    pools: tuple[PoolPlan, ...]
    kv_transfer_bw: float = 0.0  # bytes/s; disaggregation only
    kv_transfer_latency: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def disaggregated(self) -> bool:
        return len(self.pools) == 2

    @property
    def gpus(self) -> int:
        return sum(p.tp * p.pool.replicas for p in self.pools)

    @property
    def cost_text(self) -> str:
        return "; ".join(f"{p.name}: {p.cost.describe}" for p in self.pools)

    def describe(self) -> dict[str, Any]:
        """Plain data (stored in runs.metadata_json, hashed into the run id)."""
        pools = []
        for p in self.pools:
            c = p.pool.config
            pools.append(
                {
                    "name": p.name,
                    "replicas": p.pool.replicas,
                    "tp": p.tp,
                    "routing": p.pool.routing,
                    "kv_capacity_tokens": c.kv_capacity_tokens,
                    "max_num_seqs": c.max_num_seqs,
                    "max_batched_tokens": c.max_batched_tokens,
                    "chunked_prefill": c.chunked_prefill,
                    "mixed_prefill": c.mixed_prefill,
                    "max_prefill_chunk": c.max_prefill_chunk,
                    "block_size": c.block_size,
                    "static_batch": p.pool.static_batch,
                    "static_reserve": p.pool.static_reserve,
                    "cost_source": p.cost.source,
                    "cost": p.cost.describe,
                    "cost_params": p.cost.cost.params(),
                }
            )
        return {
            "scenario": self.whatif.name,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "gpus": self.gpus,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "flash_attention": self.flash_attention,
            "pools": pools,
            "kv_transfer_bw": self.kv_transfer_bw,
            "kv_transfer_latency": self.kv_transfer_latency,
            "notes": list(self.notes),
        }


def _pick(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _engine_config(
    w: WhatIf, rec: dict[str, Any], model: catalog.Model, kv_tokens: int, longest: int,
    notes: list[str], calibrated: str | None = None,
) -> tuple[EngineConfig, int | None, int, int]:  # fmt: skip
    """EngineConfig, static batch (or None), static reservation, longest allowed request.

    ``calibrated``: the scheduler `pipeline fit` chose for this deployment (vllm-v0, vllm-v1,
    sglang); it decides chunking and prefill-first steps unless the what-if sets chunking."""
    s = w.scheduler
    by_cal = calibrated if s.chunked_prefill is None else None
    chunked = bool(
        _pick(
            s.chunked_prefill,
            None if by_cal is None else by_cal != "vllm-v0",
            rec.get("chunked_prefill"),
            True,
        )
    )
    mns = int(_pick(s.max_num_seqs, rec.get("max_num_seqs"), 256))
    mbt = _pick(s.max_num_batched_tokens, rec.get("max_batched_tokens"))
    chunk = s.chunk_size
    if chunked and chunk is not None and s.max_num_batched_tokens is None:
        mbt = chunk  # Sarathi's chunk size is the step's token budget
    reserve = min(int(s.max_seq_len or model.max_context), kv_tokens)
    if mbt is None:
        mbt = default_token_budget(chunked, mns, reserve, kv_tokens, longest)
    mbt = int(mbt)
    if not chunked and mbt < longest:
        notes.append(
            f"max_num_batched_tokens raised from {mbt} to {longest}: without chunked prefill "
            "the longest request must fit one step"
        )
        mbt = longest
    if chunked and mbt < mns:
        raise ValueError(
            f"with chunked prefill the token budget ({mbt}) must be >= max_num_seqs ({mns})"
        )
    static_batch = None
    limit = kv_tokens
    if s.kv_layout == "contiguous" or s.policy == "static":
        fit = kv_slots(kv_tokens, reserve)
        if s.policy == "static":
            static_batch = min(mns, fit)
        elif fit < mns:
            notes.append(
                f"contiguous KV: {fit} slots of {reserve} tokens fit, so max_num_seqs "
                f"{mns} -> {fit}"
            )
            mns = fit
        limit = reserve
    mixed = s.mixed_prefill and by_cal != "vllm-v0"
    cfg = EngineConfig(
        kv_capacity_tokens=kv_tokens,
        max_num_seqs=mns,
        max_batched_tokens=mbt,
        chunked_prefill=chunked,
        mixed_prefill=mixed,
        max_prefill_chunk=chunk,
        block_size=s.block_size,
        prefill_first=chunked and by_cal == "sglang",
        # Prefill steps alone (V0's scheduler) come with V0's block manager and its watermark.
        admission_watermark=VLLM_V0_WATERMARK if not (chunked or mixed) else 0.0,
    )
    limit = min(limit, (cfg.total_blocks) * cfg.block_size)
    if not chunked:
        limit = min(limit, mbt)
    return cfg, static_batch, reserve, limit


def resolve_scenario(
    w: WhatIf,
    workload: RecordedWorkload,
    fits: dict[GroupKey, FittedModel] | None = None,
    calibrations: list[Any] | None = None,
) -> Scenario:
    """The concrete scenario: what-if values, else the recorded run's, else defaults."""
    rec = workload.recorded
    d = w.deployment
    model_name = _pick(d.model, rec.get("model"))
    gpu_name = _pick(d.gpu, rec.get("gpu"))
    if model_name is None or gpu_name is None:
        raise ValueError(
            "the workload does not say which model / GPU served it: set deployment.model and "
            "deployment.gpu in the what-if file"
        )
    model, gpu = catalog.model(model_name), catalog.gpu(gpu_name)
    tp = int(_pick(d.tp, rec.get("gpu_count"), 1))
    wd = str(_pick(d.weight_dtype, rec.get("weight_dtype"), "bf16"))
    kd = str(_pick(d.kv_dtype, rec.get("kv_dtype"), "bf16"))
    if kd == "int4":
        raise ValueError("kv_dtype int4 is not supported")
    attention = rec.get("attention")
    flash = d.flash_attention if d.flash_attention is not None else attention != "eager"
    replicas = int(_pick(d.replicas, rec.get("replicas"), 1))
    longest = int((workload.prompt + np.maximum(workload.output - 1, 0)).max(initial=1))
    notes: list[str] = []
    fits = fits or {}
    over = {
        "mfu": w.cost.mfu, "mbu": w.cost.mbu, "step_overhead": w.cost.step_overhead,
        "seq_overhead": w.cost.seq_overhead,
    }  # fmt: skip

    def plan(name: str, ptp: int, n: int) -> PoolPlan:
        target = Target(model, gpu, ptp, wd, kd, flash)
        picked = None
        if calibrations and w.cost.source == "auto":
            picked = choose_calibrated(target, calibrations, over)
        cal = picked[1] if picked else None
        if cal is not None and cal.kv_tokens:
            kv = cal.kv_tokens  # the calibrated (or recorded) KV capacity of this deployment
        else:
            kv = kv_capacity_tokens(
                model, gpu, tp=ptp, weight_dtype=wd, kv_dtype=kd,
                gpu_memory_utilization=d.gpu_memory_utilization,
            )  # fmt: skip
        sched = cal.scheduler if cal is not None and cal.scheduler != "distserve" else None
        cfg, static, reserve, limit = _engine_config(w, rec, model, kv, longest, notes, sched)
        cost = picked[0] if picked else choose(target, fits, w.cost.source, over)
        pool = Pool(cfg, cost.cost, n, d.routing, static, reserve)
        return PoolPlan(name, pool, ptp, cost, limit)

    g = w.disaggregation
    if g.enabled:
        pools = (
            plan("prefill", g.prefill_tp or tp, g.prefill_replicas),
            plan("decode", g.decode_tp or tp, g.decode_replicas),
        )
        return Scenario(
            w, model, gpu, tp, wd, kd, flash, pools, g.kv_bandwidth_gbps * 1e9, g.kv_latency_s,
            tuple(notes),
        )  # fmt: skip
    return Scenario(w, model, gpu, tp, wd, kd, flash, (plan("main", tp, replicas),), 0.0, 0.0,
                    tuple(notes))  # fmt: skip


def run_key(workload: RecordedWorkload, scenario: Scenario, rate_scale: float) -> str:
    """sha256 of (workload content, resolved scenario): the replay's identity."""
    h = hashlib.sha256()
    h.update(json.dumps([workload.source, workload.run_id, workload.kind, workload.n]).encode())
    for a in (workload.arrival, workload.prompt, workload.output, workload.cached):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update("\0".join(workload.request_id).encode())
    h.update(json.dumps(scenario.describe(), sort_keys=True, default=str).encode())
    h.update(scenario.whatif.canonical().encode())
    h.update(repr(float(rate_scale)).encode())
    return h.hexdigest()


def replay_run_id(scenario: Scenario, key: str) -> str:
    return f"replay-{scenario.whatif.name}-{key[:10]}"
