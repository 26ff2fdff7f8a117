"""Simulate a resolved scenario on :mod:`pipeline.sim` and summarise it.

:func:`simulate_scenario` runs a :class:`~pipeline.replay.scenario.Scenario` on
:mod:`pipeline.sim.cluster` (colocated servers) or :mod:`pipeline.sim.disaggregated` (a prefill
pool and a decode pool with a KV transfer in between) and returns a :class:`ReplayResult`: per
request its scheduled, first-token and finish times, server and preemptions; per pool its steps;
and the summary (percentiles, throughput, SLO attainment, GPU hours) from the one latency
definition, :func:`pipeline.schema.latency.latencies`.

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

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from pipeline.replay.scenario import PoolPlan, Scenario
from pipeline.replay.workload import RecordedWorkload
from pipeline.schema.latency import latencies
from pipeline.sim.cluster import PoolResult, simulate_pool
from pipeline.sim.disaggregated import DisaggregatedResult, pull_seconds, simulate_disaggregated
from pipeline.warehouse.arrow import polars_schema

NAN = float("nan")
PERCENTILES = (50, 90, 99)
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class ReplayResult:
    scenario: Scenario
    workload: RecordedWorkload
    ok: np.ndarray  # simulated (False: refused, too long for this configuration)
    scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    server: np.ndarray  # object: label per request, None where not simulated
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

    def steps_frames(self, run_id: str, rows: int = 1 << 20) -> Iterator[pl.DataFrame]:
        """The ``replay_steps`` rows, at most ``rows`` per frame (a million requests log 8 M
        steps: one frame of them was 1.9 GB on top of the result), server by server."""
        for name, pr in self.pools.items():
            total = int(self._pool(name).pool.config.total_blocks)
            for k, st in enumerate(pr.steps):
                label = _label(name, k)
                for lo in range(0, len(st["t_start"]), rows):
                    hi = min(lo + rows, len(st["t_start"]))
                    yield _steps(run_id, name, label, st, lo, hi, total)

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


def _steps(
    run_id: str, pool: str, server: str, st: dict, lo: int, hi: int, total: int
) -> pl.DataFrame:
    n = hi - lo
    t_start, t_end = st["t_start"][lo:hi], st["t_end"][lo:hi]
    return pl.DataFrame(
        {
            "run_id": pl.repeat(run_id, n, dtype=pl.Utf8, eager=True),
            "pool": pl.repeat(pool, n, dtype=pl.Utf8, eager=True),
            "server": pl.repeat(server, n, dtype=pl.Utf8, eager=True),
            "step": np.arange(lo, hi, dtype=np.int64),
            "t_start_s": t_start.astype(np.float64),
            "t_end_s": t_end.astype(np.float64),
            "duration_s": (t_end - t_start).astype(np.float64),
            "batch_size": st["seqs"][lo:hi].astype(np.int64),
            "prefill_tokens": st["prefill_tokens"][lo:hi].astype(np.int64),
            "decode_tokens": st["decode_tokens"][lo:hi].astype(np.int64),
            "kv_blocks": st["kv_blocks"][lo:hi].astype(np.int64),
            "kv_blocks_total": np.full(n, total, dtype=np.int64),
        },
        schema=STEPS_SCHEMA,
    )


def _label(pool: str, k: int) -> str:
    return f"replica-{k}" if pool == "main" else f"{pool}-{k}"


def _labels(pool: str, replicas: int) -> np.ndarray:
    """Server labels of a pool, indexable by replica number (one per server, not per request)."""
    return np.array([_label(pool, k) for k in range(replicas)], dtype=object)


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
    server = np.full(n, None, dtype=object)  # label per request; None: not simulated
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
        server[idx] = _labels("main", plan.pool.replicas)[r.replica[idx]]
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
        server[idx] = _labels("prefill", p_plan.pool.replicas)[rp.replica[idx]]
        server[d_idx] += ">" + _labels("decode", d_plan.pool.replicas)[rd.replica[d_idx]]
    return ReplayResult(
        scenario, workload, ok, sched, first, fin, pre_n, server, pools,
        time.perf_counter() - t_start, dis,
    )  # fmt: skip
