"""The compiled step loop (pipeline.sim.compiled) against the Python engine stepped one step at a
time (``fast=False``): the same policy must give the same bits on every scheduler mode."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.sim import EngineConfig, compiled, simulate
from pipeline.sim.cluster import Pool, simulate_pool
from pipeline.sim.cost import PhaseCost

MODEL = catalog.model("llama-3.1-8b")
GPU = catalog.gpu("H100-SXM")
COST = StepCost(MODEL, GPU, mfu=0.5, mbu=0.7, step_overhead=2e-3, seq_overhead=1e-5)
PHASE = PhaseCost(COST, StepCost(MODEL, GPU, mfu=0.4, mbu=0.8, step_overhead=3e-3, overlap=0.5))
MOE = StepCost(catalog.model("mixtral-8x7b"), GPU, tp=2, mfu=0.5, mbu=0.7)
FIELDS = ("scheduled", "first_token", "finish", "preemptions", "decode_step_end", "seg_request",
          "seg_first_time", "seg_dec_start", "seg_dec_count")  # fmt: skip


def trace(n: int, rate: float, seed: int, cached: bool = False):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    p = np.clip(np.rint(np.exp(rng.normal(np.log(600), 0.9, n))), 1, 6000).astype(np.int64)
    o = np.clip(np.rint(np.exp(rng.normal(np.log(150), 0.9, n))), 0, 2000).astype(np.int64)
    c = rng.integers(0, 600, n) if cached else np.zeros(n, np.int64)
    return arr, p, o, c


E = EngineConfig
CASES = {
    "chunked": (E(kv_capacity_tokens=400_000), COST, False),
    "chunked-preempting": (E(kv_capacity_tokens=20_000, max_prefill_chunk=512), COST, True),
    "sglang-prefill-first": (E(kv_capacity_tokens=30_000, prefill_first=True), COST, False),
    "unchunked-mixed": (E(kv_capacity_tokens=30_000, chunked_prefill=False), COST, True),
    "vllm-v0-watermark": (E(kv_capacity_tokens=30_000, chunked_prefill=False,
                            mixed_prefill=False, admission_watermark=0.01), PHASE, False),
    "phase-cost": (E(kv_capacity_tokens=50_000, max_num_seqs=16), PHASE, True),
    "moe-tp2": (E(kv_capacity_tokens=40_000, block_size=32), MOE, False),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_equals_python_step_by_step(name: str) -> None:
    cfg, cost, cached = CASES[name]
    arr, p, o, c = trace(600, 12.0, seed=len(name), cached=cached)
    if not cfg.chunked_prefill:
        cfg = EngineConfig(**{**cfg.__dict__, "max_batched_tokens": int((p + o).max())})
    ref = simulate(arr, p, o, cfg, cost, cached_tokens=c, fast=False)
    got = simulate(arr, p, o, cfg, cost, cached_tokens=c)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    assert (got.steps, got.busy_time) == (ref.steps, ref.busy_time)
    if name == "chunked-preempting":
        assert ref.preemptions.sum() > 0  # the case exercises preemption by recompute


@pytest.mark.parametrize("name", ["chunked", "chunked-preempting", "vllm-v0-watermark"])
def test_compiled_equals_python_with_kv_load(name: str) -> None:
    # Seconds of KV moved in at a request's first admission (a disaggregated decode server):
    # both paths agree bit for bit (first admission only: tests/test_sim_engine.py).
    cfg, cost, _ = CASES[name]
    arr, p, o, c = trace(600, 12.0, seed=len(name), cached=True)
    if not cfg.chunked_prefill:
        cfg = EngineConfig(**{**cfg.__dict__, "max_batched_tokens": int((p + o).max())})
    load = 5e-4 + 2e-5 * p
    ref = simulate(arr, p, o, cfg, cost, cached_tokens=c, load_seconds=load, fast=False)
    got = simulate(arr, p, o, cfg, cost, cached_tokens=c, load_seconds=load)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    assert (got.steps, got.busy_time) == (ref.steps, ref.busy_time)
    without = simulate(arr, p, o, cfg, cost, cached_tokens=c)
    assert not np.array_equal(got.finish, without.finish)  # neither path ignores the load
    if name == "chunked-preempting":
        assert ref.preemptions.sum() > 0


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded"])
def test_compiled_pool_steps_equal_python(routing: str) -> None:
    arr, p, o, c = trace(900, 20.0, seed=7, cached=True)
    pool = Pool(EngineConfig(kv_capacity_tokens=25_000), PHASE, replicas=3, routing=routing)
    load = 1e-5 * p  # KV moved in at admission (a decode pool), on both paths
    ref = simulate_pool(arr, p, o, pool, c, load=load, fast=False, record_steps=True)
    got = simulate_pool(arr, p, o, pool, c, load=load, record_steps=True)
    for f in ("replica", "local", "scheduled", "first_token", "finish", "preemptions"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    for a, b in zip(got.servers, ref.servers, strict=True):
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert len(got.steps) == 3
    if routing == "least-loaded":  # the routing differs from round robin on this trace
        assert not np.array_equal(got.replica[np.argsort(arr)], np.arange(900) % 3)
        assert ref.preemptions.sum() > 0
    for a, b in zip(got.steps, ref.steps, strict=True):
        for col in a:
            np.testing.assert_array_equal(a[col], b[col], err_msg=col)


def test_compiled_stall_is_an_error() -> None:
    # One block of KV and a request needing two: nothing is ever runnable.
    cfg = EngineConfig(kv_capacity_tokens=16, block_size=16)
    table = compiled.cost_table(COST)
    assert table is not None
    with pytest.raises(RuntimeError, match="stalled"):
        compiled.run(np.zeros(1), np.zeros(1, np.int64), np.array([40]), np.array([1]),
                     np.zeros(1, np.int64), cfg, COST)  # fmt: skip


def test_layer_profile_keeps_python_engine() -> None:
    assert not compiled.eligible(object())
    assert compiled.eligible(COST) and compiled.eligible(PHASE)


def test_full_buffers_rerun_with_larger_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    arr, p, o, c = trace(300, 20.0, seed=3, cached=True)
    cfg = EngineConfig(kv_capacity_tokens=15_000)
    ref = simulate(arr, p, o, cfg, COST, cached_tokens=c, fast=False)
    calls: list[int] = []
    real = compiled._kernel()

    def counting(*args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(compiled, "initial_caps", lambda *a: np.array([2, 2, 2, 2], np.int64))
    monkeypatch.setattr(compiled, "_KERNEL", counting)
    got, log = compiled.run(arr, np.argsort(arr, kind="stable"), p, o,
                            np.minimum(c, p - 1), cfg, COST, record=True)  # fmt: skip
    assert len(calls) > 5  # buffers of two entries filled and doubled many times
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    assert log is not None and len(log["t_start"]) == ref.steps


def test_least_loaded_pool_reruns_with_larger_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    arr, p, o, c = trace(400, 30.0, seed=5)
    pool = Pool(EngineConfig(kv_capacity_tokens=15_000), COST, replicas=2, routing="least-loaded")
    ref = simulate_pool(arr, p, o, pool, c, fast=False, record_steps=True)
    monkeypatch.setattr(compiled, "initial_caps", lambda *a: np.array([2, 2, 2, 2], np.int64))
    got = simulate_pool(arr, p, o, pool, c, record_steps=True)
    for f in ("replica", "local", "scheduled", "first_token", "finish", "preemptions"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f), err_msg=f)
    for a, b in zip(got.steps, ref.steps, strict=True):
        np.testing.assert_array_equal(a["t_end"], b["t_end"])
