"""Resolve a what-if scenario against a workload, simulate it, summarise it.

:func:`resolve` turns (WhatIf, RecordedWorkload, fits) into a :class:`Scenario`: model, GPU, tensor
parallelism, servers, scheduler and the cost model of every pool. :func:`simulate_scenario` runs
it on :mod:`pipeline.sim.cluster` (colocated servers, or a prefill pool and a decode pool with a
KV transfer in between) and returns a :class:`ReplayResult`.

Disaggregation: a request is prefilled on a prefill server (which emits its first token), then
a decode server admits it with the prompt already cached, pulling the prompt's KV at
``kv_bandwidth_gbps`` (+ ``kv_latency_s``) inside the step that admits it (as DistServe's decode
loop does, and as `pipeline fit` models a recorded DistServe deployment: the pull holds up the
whole decode batch). ``kv_bandwidth_gbps`` is what the copy achieves, not the link's peak: on
DistServe's runs `pipeline fit` reports the achieved share (``kv_link_share``). That step
computes the first token's KV and emits the second token, then it decodes as usual. TTFT comes
from the prefill server, TPOT and E2E from the decode server. A decode server that preempts a
request recomputes only the generated tokens (the transferred prompt is treated as still
cached), which is optimistic.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.fit.core import FittedModel, GroupKey
from pipeline.replay.config import WhatIf
from pipeline.replay.cost import CostChoice, Target, choose, choose_calibrated
from pipeline.replay.workload import RecordedWorkload
from pipeline.schema.latency import latencies
from pipeline.sim.cluster import Pool, PoolResult, simulate_pool
from pipeline.sim.config import (
    VLLM_V0_WATERMARK,
    EngineConfig,
    default_token_budget,
    kv_capacity_tokens,
    kv_slots,
)
from pipeline.sim.disaggregated import DisaggregatedResult, pull_seconds, simulate_disaggregated
from pipeline.warehouse.arrow import polars_schema

NAN = float("nan")
PERCENTILES = (50, 90, 99)
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]


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


def resolve(
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


@dataclass
class ReplayResult:
    scenario: Scenario
    workload: RecordedWorkload
    ok: np.ndarray  # simulated (False: refused, too long for this configuration)
    scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    server: list[str]  # label per request
    pools: dict[str, PoolResult] = field(default_factory=dict)
    wall_s: float = 0.0
    disaggregated: DisaggregatedResult | None = None

    @property
    def n(self) -> int:
        return len(self.ok)

    def token_chunks(self, chunk: int = 20_000) -> Iterator[Chunk]:
        """(global indices, CSR offsets, emission times on the sim clock) in bounded chunks."""
        if not self.scenario.disaggregated:
            pr = self.pools["main"]
            for k, ids in enumerate(pr.ids):
                for lo in range(0, len(ids), chunk):
                    hi = min(lo + chunk, len(ids))
                    offs, times = pr.servers[k].token_times(lo, hi)
                    yield ids[lo:hi], offs, times
            return
        assert self.disaggregated is not None
        yield from self.disaggregated.token_chunks(self.workload.output, chunk)

    def steps_frame(self, run_id: str) -> pl.DataFrame:
        parts = []
        for name, pr in self.pools.items():
            for k, st in enumerate(pr.steps):
                total = self._pool(name).pool.config.total_blocks
                n = len(st["t_start"])
                parts.append(
                    pl.DataFrame(
                        {
                            "run_id": pl.repeat(run_id, n, dtype=pl.Utf8, eager=True),
                            "pool": pl.repeat(name, n, dtype=pl.Utf8, eager=True),
                            "server": pl.repeat(_label(name, k), n, dtype=pl.Utf8, eager=True),
                            "step": np.arange(n, dtype=np.int64),
                            "t_start_s": st["t_start"].astype(np.float64),
                            "t_end_s": st["t_end"].astype(np.float64),
                            "duration_s": (st["t_end"] - st["t_start"]).astype(np.float64),
                            "batch_size": st["seqs"].astype(np.int64),
                            "prefill_tokens": st["prefill_tokens"].astype(np.int64),
                            "decode_tokens": st["decode_tokens"].astype(np.int64),
                            "kv_blocks": st["kv_blocks"].astype(np.int64),
                            "kv_blocks_total": np.full(n, int(total), dtype=np.int64),
                        }
                    )
                )
        if not parts:
            return pl.DataFrame(schema=STEPS_SCHEMA)
        return pl.concat(parts).cast(STEPS_SCHEMA)  # type: ignore[arg-type]

    def _pool(self, name: str) -> PoolPlan:
        return next(p for p in self.scenario.pools if p.name == name)

    # -- metrics ----------------------------------------------------------------------------
    def metrics(self) -> dict[str, np.ndarray]:
        w = self.workload
        return latencies(w.arrival, self.first_token, self.finish, w.output)

    def summary(self, slo_ttft: float | None = None, slo_tpot: float | None = None) -> dict:
        m = self.metrics()
        ok = self.ok
        out: dict[str, Any] = {
            "requests": int(ok.sum()),
            "refused": int((~ok).sum()),
            "preemptions": int(self.preemptions[ok].sum()),
            "gpus": self.scenario.gpus,
        }
        for name, v in m.items():
            vals = v[ok & np.isfinite(v)]
            for q in PERCENTILES:
                out[f"{name[:-2]}_p{q}"] = float(np.percentile(vals, q)) if len(vals) else NAN
        first = float(self.workload.arrival[ok].min()) if ok.any() else 0.0
        last = float(np.nanmax(self.finish[ok])) if ok.any() else 0.0
        span = max(last - first, 1e-9)
        out["span_s"] = span
        out["throughput_rps"] = int(ok.sum()) / span
        out["output_tok_s"] = float(self.workload.output[ok].sum()) / span
        good = ok.copy()
        if slo_ttft is not None:
            good &= m["ttft_s"] <= slo_ttft
        if slo_tpot is not None:
            good &= ~(m["tpot_s"] > slo_tpot)  # NaN TPOT (one token) meets any TPOT SLO
        out["slo_attainment"] = float(good.sum()) / max(len(ok), 1)
        out["goodput_rps"] = float(good.sum()) / span
        out["gpu_hours"] = self.scenario.gpus * span / 3600.0
        price = self.scenario.whatif.gpu_hour_usd
        rate = price.get(self.scenario.gpu.name, price.get(self.scenario.gpu.key))
        out["cost_usd"] = out["gpu_hours"] * rate if rate is not None else None
        return out


STEPS_SCHEMA: dict[str, pl.DataType] = polars_schema("replay_steps")  # schema/derived.py


def _label(pool: str, k: int) -> str:
    return f"replica-{k}" if pool == "main" else f"{pool}-{k}"


def simulate_scenario(
    scenario: Scenario, workload: RecordedWorkload, *, record_steps: bool = True, fast: bool = True
) -> ReplayResult:
    """Run the scenario on the workload."""
    t_start = time.perf_counter()
    n = workload.n
    arr, prompt, out, cached = workload.arrival, workload.prompt, workload.output, workload.cached
    peak = prompt + np.maximum(out - 1, 0)
    ok = np.ones(n, dtype=bool)
    for p in scenario.pools:
        need = prompt if p.name == "prefill" else peak
        ok &= need <= p.max_tokens
    sched, first, fin = np.full(n, NAN), np.full(n, NAN), np.full(n, NAN)
    pre_n = np.zeros(n, dtype=np.int64)
    server = [""] * n
    pools: dict[str, PoolResult] = {}
    idx = np.flatnonzero(ok)
    dis = None
    if not scenario.disaggregated:
        plan = scenario.pools[0]
        r = simulate_pool(
            arr, prompt, out, plan.pool, cached, fast=fast, record_steps=record_steps, subset=idx
        )
        pools["main"] = r
        sched[idx], first[idx], fin[idx] = r.scheduled[idx], r.first_token[idx], r.finish[idx]
        pre_n[idx] = r.preemptions[idx]
        labels = [_label("main", k) for k in range(plan.pool.replicas)]
        rep = r.replica.tolist()
        for i in idx.tolist():
            server[i] = labels[rep[i]]
    else:
        p_plan, d_plan = scenario.pools
        pull = pull_seconds(
            scenario.model, scenario.kv_dtype, prompt, scenario.kv_transfer_bw,
            scenario.kv_transfer_latency,
        )  # fmt: skip
        dis = simulate_disaggregated(
            arr, prompt, out, p_plan.pool, d_plan.pool, pull, cached, subset=idx, fast=fast,
            record_steps=record_steps,
        )  # fmt: skip
        rp, rd, d_idx = dis.prefill, dis.decode, dis.decoded
        pools["prefill"], pools["decode"] = rp, rd
        sched[idx], first[idx], fin[idx] = rp.scheduled[idx], dis.first_token[idx], dis.finish[idx]
        pre_n[idx] = rp.preemptions[idx]
        pre_n[d_idx] += rd.preemptions[d_idx]
        for i in idx.tolist():
            server[i] = _label("prefill", int(rp.replica[i]))
        for i in d_idx.tolist():
            server[i] += ">" + _label("decode", int(rd.replica[i]))
    return ReplayResult(
        scenario, workload, ok, sched, first, fin, pre_n, server, pools,
        time.perf_counter() - t_start, dis,
    )  # fmt: skip


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
