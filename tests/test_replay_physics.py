"""Physics checks of replayed what-ifs (issue 6): each expectation comes from the roofline.

- doubling HBM bandwidth halves decode-bound TPOT at batch 1 (no fixed overheads: the decode
  step is bytes / bandwidth exactly) and leaves it unchanged at a compute-bound batch;
- GQA with 8 KV heads (vs MHA's 32) makes KV per token 4x smaller: 4x the sequences fit in the
  same memory, and memory-bound decode throughput rises with them;
- chunked prefill lowers p99 ITL and raises TTFT under a mix of long prompts and decodes;
- prefill/decode disaggregation removes prefill steps from the decode servers' ITL, and the
  first inter-token gap pays the KV transfer.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pipeline import catalog
from pipeline.physics import StepCost, kv_bytes_per_token
from pipeline.replay import resolve_scenario, simulate_scenario
from pipeline.replay.config import WhatIf
from pipeline.replay.result import ReplayResult
from pipeline.replay.workload import RecordedWorkload
from pipeline.sim import EngineConfig, kv_capacity_tokens
from pipeline.sim.cluster import Pool, simulate_pool

H100 = catalog.gpu("H100-SXM")
L8B = catalog.model("llama-3.1-8b")


def _tpot(r, out):
    return (r.finish - r.first_token) / (out - 1)


def test_doubling_hbm_bandwidth_halves_tpot_only_when_memory_bound():
    fast_gpu = replace(H100, bandwidth=2 * H100.bandwidth)
    ratios = {}
    for name, n, gap, prompt, out in (("batch1", 10, 100.0, 512, 256), ("batch512", 512, 0.0,
                                                                          32, 128)):  # fmt: skip
        arr = np.arange(n) * gap
        p, o = np.full(n, prompt), np.full(n, out)
        cfg = EngineConfig(kv_capacity_tokens=400_000, max_num_seqs=512, max_batched_tokens=16384)
        tp = []
        for gpu in (H100, fast_gpu):
            cost = StepCost(L8B, gpu, mfu=0.5, mbu=0.7)
            r = simulate_pool(arr, p, o, Pool(cfg, cost))
            tp.append(np.median(_tpot(r, o)))
        ratios[name] = tp[0] / tp[1]
    # Batch 1: bytes-bound decode, no overheads -> exactly 2x.
    assert ratios["batch1"] == pytest.approx(2.0, rel=1e-6)
    # Batch 512 is past the critical batch (~295 x mbu/mfu on H100): FLOPs bound -> unchanged.
    assert ratios["batch512"] == pytest.approx(1.0, abs=0.02)


def test_gqa_fits_more_sequences_and_raises_throughput():
    mha = catalog.model("llama-2-7b")
    gqa = replace(mha, kv_heads=8)
    gpu = catalog.gpu("L4")
    n = 300
    arr, p, o = np.zeros(n), np.full(n, 1000), np.full(n, 200)
    res = {}
    for name, m in (("mha", mha), ("gqa", gqa)):
        kv = kv_capacity_tokens(m, gpu)
        cost = StepCost(m, gpu, mfu=0.5, mbu=0.7, step_overhead=2e-3, seq_overhead=1e-5)
        r = simulate_pool(arr, p, o, Pool(EngineConfig(kv), cost), record_steps=True)
        res[name] = (kv, int(r.steps[0]["seqs"].max()), o.sum() / np.nanmax(r.finish))
    assert res["gqa"][0] == pytest.approx(4 * res["mha"][0], rel=1e-3)  # KV/token is 4x smaller
    batch_ratio = res["gqa"][1] / res["mha"][1]
    assert 3.5 <= batch_ratio <= 4.5
    # Same KV bytes per step but 4x the tokens per weight read: well over 2x the throughput.
    assert res["gqa"][2] / res["mha"][2] > 2.5


def _mixed(n_short=600, rate=6.0, long_every=3.0, long_prompt=8000, seed=0) -> RecordedWorkload:
    rng = np.random.default_rng(seed)
    a_s = np.cumsum(rng.exponential(1 / rate, n_short))
    a_l = np.arange(0.5, a_s[-1], long_every)
    arr = np.concatenate([a_s, a_l])
    prompt = np.concatenate([np.full(n_short, 200), np.full(len(a_l), long_prompt)])
    out = np.concatenate([np.full(n_short, 300), np.full(len(a_l), 20)])
    order = np.argsort(arr, kind="stable")
    return RecordedWorkload(
        source="mixed",
        run_id="mixed",
        kind="arrivals",
        request_id=[f"r{i}" for i in range(len(arr))],
        arrival=arr[order] - arr.min(),
        prompt=prompt[order],
        output=out[order],
        cached=np.zeros(len(arr), np.int64),
        recorded={"model": "llama-3.1-8b", "gpu": "H100-SXM"},
    )


def _gaps(res: ReplayResult, skip_first: bool = False) -> np.ndarray:
    out = []
    for _g, offs, times in res.token_chunks():
        d = np.diff(times)
        keep = np.ones(len(d), dtype=bool)
        keep[offs[1:-1] - 1] = False  # gaps across request boundaries
        if skip_first:
            keep[offs[:-1][np.diff(offs) > 1]] = False  # the first gap of each request
        out.append(d[keep])
    return np.concatenate(out)


def _whatif(**sections) -> WhatIf:
    base = {"cost": {"source": "roofline"}}
    return WhatIf.model_validate(base | sections)


def test_chunked_prefill_lowers_p99_itl_and_raises_ttft():
    # Long prompts every 0.4 s: a whole 4k prefill step is ~2.5 % of all gaps, above the p99.
    w = _mixed(long_every=0.4, long_prompt=4000)
    longs = w.prompt == 4000
    out = {}
    for name, sched in (
        ("chunked", {"chunked_prefill": True, "chunk_size": 512}),
        ("whole", {"chunked_prefill": False}),
    ):
        res = simulate_scenario(
            resolve_scenario(_whatif(scheduler=sched), w), w, record_steps=False
        )
        m = res.metrics()
        out[name] = (np.percentile(_gaps(res), 99), np.median(m["ttft_s"][longs]))
    # A whole 4k-token prefill step stalls every decode for 4k tokens of compute; chunks of
    # 512 tokens bound the stall.
    assert out["chunked"][0] < 0.5 * out["whole"][0]
    # ...and the long prompt takes 8+ steps that each also carry the decodes and pay the 2 ms
    # step overhead: 8 x 2 ms on a ~150 ms prefill is +10 % before the decodes' share.
    assert out["chunked"][1] > 1.1 * out["whole"][1]


def test_disaggregation_removes_prefill_interference_at_kv_transfer_cost():
    # A 4k prompt every 0.25 s: on two colocated servers (8k-token steps) ~2 % of the gaps wait
    # for a whole prefill, so the p99 ITL is a prefill step; on the decode server none does.
    w = _mixed(long_every=0.25, long_prompt=4000)
    colo = simulate_scenario(resolve_scenario(_whatif(deployment={"replicas": 2}), w), w)
    bw = 10.0
    dis_w = _whatif(disaggregation={"enabled": True, "kv_bandwidth_gbps": bw, "kv_latency_s": 0})
    dis = simulate_scenario(resolve_scenario(dis_w, w), w)
    # Decode servers only ever compute one new token per sequence per step.
    for st in dis.pools["decode"].steps:
        assert np.all(st["prefill_tokens"] <= st["seqs"])
    itl_colo = np.percentile(_gaps(colo, skip_first=True), 99)
    itl_dis = np.percentile(_gaps(dis, skip_first=True), 99)
    assert itl_dis < 0.5 * itl_colo
    # The first gap includes moving the prompt's KV: >= KV bytes / bandwidth.
    transfer = kv_bytes_per_token(L8B) * w.prompt / (bw * 1e9)
    for g, offs, times in dis.token_chunks():
        many = np.diff(offs) > 1
        first_gap = times[offs[:-1][many] + 1] - times[offs[:-1][many]]
        assert np.all(first_gap >= transfer[g][many] - 1e-12)
    assert dis.scenario.gpus == colo.scenario.gpus == 2


def test_static_batching_and_contiguous_kv_batch_less():
    w = _mixed(n_short=300, rate=3.0, long_every=10.0)
    paged = simulate_scenario(resolve_scenario(_whatif(), w), w)
    contig = simulate_scenario(
        resolve_scenario(_whatif(scheduler={"kv_layout": "contiguous"}), w), w
    )
    static = simulate_scenario(
        resolve_scenario(_whatif(scheduler={"policy": "static", "max_num_seqs": 64}), w), w
    )
    slots = contig.scenario.pools[0].pool.config.kv_capacity_tokens // L8B.max_context
    assert contig.scenario.pools[0].pool.config.max_num_seqs == slots
    assert max(int(s["seqs"].max()) for s in contig.pools["main"].steps) <= slots
    assert max(int(s["seqs"].max()) for s in paged.pools["main"].steps) > slots
    assert contig.summary()["e2e_p90"] > paged.summary()["e2e_p90"]
    # Static batches wait for the running batch to finish: TTFT far above continuous batching.
    assert static.summary()["ttft_p50"] > 3 * paged.summary()["ttft_p50"]
    assert int(static.ok.sum()) == w.n
