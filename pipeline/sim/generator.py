"""Synthetic traces with known ground truth: sample a workload, simulate it, write JSONL + truth.

The efficiencies (mfu, mbu, overheads) are drawn per seed from the ranges measured in
cost-models-and-hardware.md §6 unless pinned, and written beside the trace in ``FILE.truth.json``
so that ``pipeline fit`` can be checked against the values that produced the data.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import __version__, catalog
from pipeline.physics import StepCost, StepWork, critical_batch
from pipeline.sim.cluster import Pool, simulate_pool
from pipeline.sim.config import EngineConfig, default_token_budget, kv_capacity_tokens, kv_slots
from pipeline.sim.disaggregated import (
    DisaggregatedResult,
    distserve_configs,
    pull_seconds,
    simulate_disaggregated,
)
from pipeline.sim.engine import simulate
from pipeline.sim.result import SimResult
from pipeline.sim.workload import SyntheticWorkload, inter_arrivals, lengths
from pipeline.sim.writer import write_jsonl

ATTENTION = ("flash", "flashinfer", "sdpa", "eager")  # only eager materialises the score matrix
BATCHING = ("continuous", "static")
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
# Realistic ranges (cmh §6: prefill MFU 0.45-0.7, batch-1 decode MBU 0.55-0.76, step overheads of
# a few ms; BLIS fits 4.4 us per request per step).
TRUTH_RANGES = {
    "mfu": (0.40, 0.60),
    "mbu": (0.60, 0.80),
    "step_overhead": (1.5e-3, 4.0e-3),
    "seq_overhead": (5e-6, 30e-6),
}


@dataclass(frozen=True)
class GenerateSpec:
    """Everything ``pipeline generate`` takes; unset efficiencies are drawn from the seed."""

    gpu: str = "H100-SXM"
    model: str = "llama-3.1-8b"
    gpu_count: int = 1
    requests: int = 1000
    rate: float | None = None  # None: 60 % of the estimated capacity
    arrivals: str = "poisson"
    seed: int = 0
    attention: str = "flash"
    max_num_seqs: int = 256
    max_batched_tokens: int | None = None
    chunked_prefill: bool = True
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    start: datetime = DEFAULT_START
    token_times: bool = True
    replicas: int = 1  # identical servers behind one router (sim-0, sim-1, ...)
    routing: str = "round-robin"  # or "least-loaded"
    # "static": request-level batching (a batch runs until its longest request finishes), each
    # request reserving the model's context in KV; "continuous": the token-level scheduler.
    batching: str = "continuous"
    max_seq_len: int | None = None  # static: tokens each request reserves [model context]
    # A DistServe-style deployment: a run manifest's [disaggregation] keys (prefill_tp,
    # decode_tp, *_replicas, kv_bandwidth_gbps, kv_latency_s, per-instance limits).
    disaggregation: dict[str, Any] | None = None
    efficiencies: dict[str, float] = field(default_factory=dict)  # pin mfu, mbu, ... by name
    workload: dict[str, Any] = field(default_factory=dict)  # extra SyntheticWorkload fields

    def __post_init__(self) -> None:
        if self.batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, got {self.batching!r}")
        if self.max_seq_len is not None and self.batching != "static":
            raise ValueError("max_seq_len (--max-seq-len) applies to static batching only")
        if self.disaggregation is not None and (self.batching != "continuous" or self.replicas > 1):
            raise ValueError(
                "disaggregation takes its replicas from [disaggregation] prefill_replicas / "
                "decode_replicas, and static batching with disaggregation is not modelled"
            )
        if self.attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {self.attention!r}")
        unknown = set(self.efficiencies) - set(TRUTH_RANGES)
        if unknown:
            raise ValueError(f"unknown efficiency parameter(s): {', '.join(sorted(unknown))}")


def trace_run_id(path: Path) -> str:
    """Name without data/compression suffixes: 'x__llama-3.1-8b.jsonl.gz' -> 'x__llama-3.1-8b'."""
    name = path.name
    for suffix in (".gz", ".zst", ".zstd", ".jsonl", ".ndjson", ".json"):
        name = name.removesuffix(suffix)
    return name


def draw_efficiencies(rng: np.random.Generator, pinned: dict[str, float]) -> dict[str, float]:
    drawn = {k: float(rng.uniform(lo, hi)) for k, (lo, hi) in TRUTH_RANGES.items()}
    return drawn | pinned


def estimate_capacity(
    cost: StepCost, config: EngineConfig, mean_prompt: float, mean_output: float
) -> float:
    """Requests/s one server sustains: marginal prefill compute + its share of full decode steps."""
    mean_ctx = mean_prompt + mean_output / 2.0
    batch = max(1.0, min(config.max_num_seqs, config.kv_capacity_tokens / mean_ctx))
    step = float(cost.decode_step_time(batch, batch * mean_ctx))
    prefill = float(cost.compute_seconds(StepWork.prefill(mean_prompt)))
    return 1.0 / (prefill + mean_output * step / batch)


class _DistServe:
    """A disaggregated deployment's set-up for generate: the instances' step costs, KV caches and
    schedulers as `pipeline fit` models a recorded one (``sim.disaggregated.distserve_configs``),
    the link at the full ``kv_bandwidth_gbps`` of the keys."""

    def __init__(self, spec: GenerateSpec, model: catalog.Model, gpu: catalog.GPU, eff: dict):
        d = self.keys = dict(spec.disaggregation or {})
        self.spec, self.model = spec, model
        self.ptp = int(d.get("prefill_tp", spec.gpu_count))
        self.dtp = int(d.get("decode_tp", spec.gpu_count))
        self.prefill_replicas = int(d.get("prefill_replicas", 1))
        self.decode_replicas = int(d.get("decode_replicas", 1))
        self.gpus = self.ptp * self.prefill_replicas + self.dtp * self.decode_replicas

        def cost(tp: int) -> StepCost:
            return StepCost(
                model, gpu, tp=tp, weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype,
                flash_attention=spec.attention != "eager", **eff,
            )  # fmt: skip

        def kv(tp: int) -> int:
            return kv_capacity_tokens(
                model, gpu, tp=tp, weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype
            )

        self.prefill_cost, self.decode_cost = cost(self.ptp), cost(self.dtp)
        self.prefill_kv, self.decode_kv = kv(self.ptp), kv(self.dtp)

    def plan(self, prompt: np.ndarray, output: np.ndarray) -> float:
        """Set the schedulers for these lengths; return the requests/s the slower instance
        sustains (prefill: its replicas over one mean prompt's compute; decode: full batches of
        the mean context)."""
        self.prefill_config, self.decode_config = distserve_configs(
            self.keys, self.prefill_kv, self.decode_kv, int(prompt.max()),
            int((prompt + output).max()), self.spec.max_num_seqs, self.spec.max_batched_tokens,
        )  # fmt: skip
        mean_prompt, mean_output = float(prompt.mean()), float(output.mean())
        pre = self.prefill_replicas / float(
            self.prefill_cost.compute_seconds(StepWork.prefill(mean_prompt))
        )
        cfg, ctx = self.decode_config, mean_prompt + mean_output / 2.0
        batch = max(1.0, min(cfg.max_num_seqs, cfg.kv_capacity_tokens / ctx))
        step = float(self.decode_cost.decode_step_time(batch, batch * ctx))
        dec = self.decode_replicas * batch / (mean_output * step)
        return min(pre, dec)

    def simulate(
        self, arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, cached: np.ndarray
    ) -> DisaggregatedResult:
        bw = float(self.keys.get("kv_bandwidth_gbps", 25.0)) * 1e9
        pull = pull_seconds(
            self.model, self.spec.kv_dtype, prompt, bw, float(self.keys.get("kv_latency_s", 1e-3))
        )
        routing = self.spec.routing
        return simulate_disaggregated(
            arrival, prompt, output,
            Pool(self.prefill_config, self.prefill_cost, self.prefill_replicas, routing),
            Pool(self.decode_config, self.decode_cost, self.decode_replicas, routing),
            pull, cached,
        )  # fmt: skip


def _write_manifest(path: Path, keys: dict[str, Any]) -> None:
    """``<trace>.run.toml``: the [disaggregation] table, so that `pipeline ingest` of the trace
    records the deployment as disaggregated and `pipeline fit` calibrates it as such."""
    lines = ["# written by pipeline generate", "[disaggregation]"]
    lines += [f"{k} = {str(v).lower() if isinstance(v, bool) else v!r}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def estimate_static_capacity(
    pool: Pool, prompt: np.ndarray, output: np.ndarray, batches: int = 10
) -> float:
    """Requests/s one static-batching server completes when its queue never empties: measured
    on the simulator, ``batches`` full batches of the sampled requests all waiting at t = 0.
    (A closed form from the mean longest output of a batch was 1.7x too high: the batch's
    steps also carry the finished requests' reserved context.)"""
    assert pool.static_batch is not None
    n = min(len(prompt), batches * pool.static_batch)
    one = replace(pool, replicas=1)
    res = simulate_pool(np.zeros(n), prompt[:n], output[:n], one, np.zeros(n, np.int64))
    return n / float(np.nanmax(res.finish))


def generate(spec: GenerateSpec, out: Path) -> dict[str, Any]:
    """Write the trace to ``out`` and its ground truth to ``out`` + '.truth.json'.

    Returns the truth plus ``timing_s`` (simulate/write seconds and uncompressed bytes)."""
    began = time.perf_counter()
    gpu, model = catalog.gpu(spec.gpu), catalog.model(spec.model)
    # Independent streams: pinning an efficiency must not change the sampled workload.
    truth_rng, length_rng, arrival_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(spec.seed).spawn(3)
    )
    eff = draw_efficiencies(truth_rng, spec.efficiencies)
    # A disaggregated deployment's single-server objects below are its decode instance's (the
    # length limits and the truth file's cost and config); its GPUs are the instances' sum.
    tp = spec.gpu_count
    if spec.disaggregation is not None:
        tp = int(spec.disaggregation.get("decode_tp", spec.gpu_count))
    cost = StepCost(
        model,
        gpu,
        tp=tp,
        weight_dtype=spec.weight_dtype,
        kv_dtype=spec.kv_dtype,
        flash_attention=spec.attention != "eager",
        **eff,
    )
    kv_tokens = kv_capacity_tokens(
        model, gpu, tp=tp, weight_dtype=spec.weight_dtype, kv_dtype=spec.kv_dtype
    )
    if spec.max_batched_tokens is not None:
        mbt = spec.max_batched_tokens
    else:
        mbt = default_token_budget(
            spec.chunked_prefill, spec.max_num_seqs, model.max_context, kv_tokens
        )
    config = EngineConfig(
        kv_capacity_tokens=kv_tokens,
        max_num_seqs=spec.max_num_seqs,
        max_batched_tokens=mbt,
        chunked_prefill=spec.chunked_prefill,
    )
    kv_whole_blocks = config.total_blocks * config.block_size
    max_total = kv_whole_blocks if spec.chunked_prefill else min(kv_whole_blocks, mbt)
    static_batch, reserve = None, 0
    disagg = spec.disaggregation
    if disagg is not None:
        dis_setup = _DistServe(spec, model, gpu, eff)
        max_total = min(dis_setup.prefill_kv, dis_setup.decode_kv) - 1
    if spec.batching == "static":
        # As replay's static policy: each request reserves max_seq_len (default the model's
        # context, at most the KV cache), so the batch is what fits.
        reserve = min(spec.max_seq_len or model.max_context, kv_tokens)
        static_batch = min(spec.max_num_seqs, kv_slots(kv_tokens, reserve))
        max_total = reserve - 1
    probe = SyntheticWorkload(
        requests=spec.requests, rate=1.0, arrivals=spec.arrivals, **spec.workload
    )
    prompt, output = lengths(probe, length_rng, model.max_context, max_total)
    if disagg is not None:
        capacity = dis_setup.plan(prompt, output)
    elif static_batch is None:
        capacity = estimate_capacity(cost, config, float(prompt.mean()), float(output.mean()))
    else:
        servers = Pool(config, cost, spec.replicas, spec.routing, static_batch, reserve)
        capacity = estimate_static_capacity(servers, prompt, output)
    # 60 % of the pool's capacity: each replica as busy as one server alone would be (for a
    # disaggregated deployment, capacity is already its slower instance's)
    rate = spec.rate if spec.rate is not None else round(0.6 * capacity * spec.replicas, 3)
    workload = SyntheticWorkload(
        requests=spec.requests, rate=rate, arrivals=spec.arrivals, **spec.workload
    )
    arrival = np.cumsum(inter_arrivals(workload, arrival_rng))
    cached = np.zeros_like(prompt)
    pool: Any = None
    if disagg is not None:
        pool = dis_setup.simulate(arrival, prompt, output, cached)
        results = pool.prefill.servers + pool.decode.servers
    elif spec.replicas > 1 or static_batch is not None:
        servers = Pool(config, cost, spec.replicas, spec.routing, static_batch, reserve)
        pool = simulate_pool(arrival, prompt, output, servers, cached)
        results = pool.servers
    else:
        results = [simulate(arrival, prompt, output, config, cost, cached_tokens=cached)]
    simulated = time.perf_counter()
    metadata = {
        "run_id": trace_run_id(out),
        "server": "sim-0",
        "model": model.hf_id,
        "gpu": gpu.name,
        "gpu_count": spec.gpu_count if disagg is None else dis_setup.gpus,
        "engine": "sim",
        "engine_version": __version__,
        "max_num_seqs": config.max_num_seqs if static_batch is None else static_batch,
        "max_batched_tokens": config.max_batched_tokens if static_batch is None else None,
        "chunked_prefill": config.chunked_prefill and static_batch is None,
        "attention": spec.attention,
        "weight_dtype": spec.weight_dtype,
        "kv_dtype": spec.kv_dtype,
    }
    if disagg is not None:
        # The instances' limits are the spec's as given (None: DistServe's defaults), so that a
        # fit of this trace reads the limits it ran with.
        metadata |= {"max_batched_tokens": spec.max_batched_tokens, "chunked_prefill": None}
        _write_manifest(Path(f"{out}.run.toml"), disagg)
    nbytes = write_jsonl(
        out,
        pool or results[0],
        arrival=arrival,
        prompt=prompt,
        output=output,
        cached=cached,
        start_unix=spec.start.timestamp(),
        metadata=metadata,
        token_times=spec.token_times,
    )
    finished = time.perf_counter()
    first = pool.first_token if pool else results[0].first_token
    instances = None
    if disagg is not None:
        config = dis_setup.decode_config
        instances = {
            name: {"tp": t, "replicas": n, "config": asdict(c), "cost": k.params()}
            for name, t, n, c, k in (
                ("prefill", dis_setup.ptp, dis_setup.prefill_replicas, dis_setup.prefill_config,
                 dis_setup.prefill_cost),
                ("decode", dis_setup.dtp, dis_setup.decode_replicas, dis_setup.decode_config,
                 dis_setup.decode_cost),
            )
        }  # fmt: skip
    truth = _truth(
        spec, model, gpu, cost, config, workload, capacity, results, first - arrival,
        static_batch, reserve, instances,
    )  # fmt: skip
    Path(f"{out}.truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
    # Timings vary run to run, so they are returned but kept out of the (reproducible) truth file.
    truth["timing_s"] = {
        "simulate": round(simulated - began, 3),
        "write": round(finished - simulated, 3),
        "bytes": nbytes,
    }
    return truth


def _truth(
    spec: GenerateSpec,
    model: catalog.Model,
    gpu: catalog.GPU,
    cost: StepCost,
    config: EngineConfig,
    workload: SyntheticWorkload,
    capacity: float,
    results: list[SimResult],
    ttft: np.ndarray,
    static: int | None = None,
    reserve: int = 0,
    instances: dict[str, Any] | None = None,
) -> dict[str, Any]:
    makespan = max(float(np.nanmax(r.finish)) for r in results if r.n_requests)
    return {
        "generator": f"pipeline generate {__version__}",
        "seed": spec.seed,
        "start": spec.start.isoformat(),
        "gpu": gpu.name,
        "model": model.name,
        "model_id": model.hf_id,
        "attention_kind": model.attention_kind,
        "gpu_count": sum(v["tp"] * v["replicas"] for v in instances.values())
        if instances
        else spec.gpu_count,
        "attention": spec.attention,
        "cost": cost.params(),
        "config": asdict(config),
        # (single-server truth files keep their keys: the sample traces regenerate byte for byte)
        **({"replicas": spec.replicas, "routing": spec.routing} if spec.replicas > 1 else {}),
        **(
            {"batching": "static", "static_batch": static, "static_reserve": reserve}
            if static
            else {}
        ),
        **(
            {"disaggregation": spec.disaggregation, "instances": instances}
            if spec.disaggregation
            else {}
        ),
        "arrival_process": workload.describe(),
        "estimated_capacity_rps": round(capacity, 3),
        "critical_batch": round(critical_batch(gpu, spec.weight_dtype), 1),
        "summary": {
            "requests": len(ttft),  # (a disaggregated request is on two servers)
            "steps": sum(r.steps for r in results),
            # the servers' mean share of the run's span spent in steps
            "busy_fraction": round(sum(r.busy_time for r in results) / makespan / len(results), 4),
            "preemptions": sum(int(r.preemptions.sum()) for r in results),
            "ttft_p50_s": round(float(np.nanmedian(ttft)), 6),
            "ttft_p99_s": round(float(np.nanpercentile(ttft, 99)), 6),
        },
    }
