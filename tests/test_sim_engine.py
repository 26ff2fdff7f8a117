"""Simulator engine: exact single-request timings, queueing, preemption, and agreement with a
plain step-by-step oracle (written independently here) on random traces."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.sim import EngineConfig, simulate
from pipeline.sim.engine import _Engine

MODEL = catalog.model("llama-3.1-8b")
GPU = catalog.gpu("H100-SXM")
COST = StepCost(MODEL, GPU, mfu=0.5, mbu=0.7, step_overhead=2e-3, seq_overhead=1e-5)


def oracle(arr, prompt, out, cached, cfg: EngineConfig, cost: StepCost):
    """One Python iteration per step and per request; explicit contexts and block counts.

    Same policy as the engine: FCFS; each step decodes every running decoder (in admission order,
    preempting the newest running request when a block is missing), then continues partial
    prefills (preempting the newest partial prefill when blocks are missing), then admits waiting
    requests unless it preempted; vLLM v0-style prefill-only steps when neither chunking nor
    mixing is on.
    """
    n, bs, total = len(arr), cfg.block_size, cfg.total_blocks
    cached = [min(c, max(p - 1, 0)) for c, p in zip(cached, prompt, strict=True)]
    order = sorted(range(n), key=lambda i: (arr[i], i))
    phase = ["new"] * n
    p_eff, done, ctx, emitted, held = list(prompt), list(cached), [0] * n, [0] * n, [0] * n
    sched, first, fin = [math.nan] * n, [math.nan] * n, [math.nan] * n
    times: list[list[float]] = [[] for _ in range(n)]
    waiting: deque[int] = deque()
    running: list[int] = []
    used, t, nxt = 0, 0.0, 0

    def blocks(tok: int) -> int:
        return -(-tok // bs)

    def preempt(r: int) -> int:
        nonlocal used
        running.remove(r)
        used -= held[r]
        held[r] = 0
        p_eff[r], done[r], phase[r] = prompt[r] + emitted[r], cached[r], "wait"
        waiting.appendleft(r)
        return r

    def admissible(free: int, budget: int) -> bool:
        if not waiting or len(running) >= cfg.max_num_seqs or budget <= 0:
            return False
        r = waiting[0]
        todo = p_eff[r] - done[r]
        if cfg.chunked_prefill:
            todo = min(todo, budget, cfg.chunk_cap)
        elif todo > budget:
            return False
        return blocks(done[r] + todo) <= free

    while True:
        while nxt < n and arr[order[nxt]] <= t:
            waiting.append(order[nxt])
            nxt += 1
        if not running and not waiting:
            if nxt >= n:
                break
            t = arr[order[nxt]]
            continue
        budget = cfg.max_batched_tokens
        separate = not cfg.chunked_prefill and not cfg.mixed_prefill
        run_dec = not (separate and admissible(total - used, budget))
        preempted = False
        dec: list[int] = []
        if run_dec:
            for r in [x for x in running if phase[x] == "decode"]:
                if r not in running:
                    continue
                need = blocks(ctx[r] + 1) - held[r]
                while need > total - used:
                    preempted = True
                    if preempt(running[-1]) == r:
                        break
                if r not in running:
                    continue
                used += need
                held[r] += need
                dec.append(r)
        budget -= len(dec)
        chunks: list[tuple[int, int, int]] = []
        if run_dec:
            for r in [x for x in running if phase[x] == "prefill"]:
                if budget <= 0:
                    break
                if r not in running:
                    continue
                todo = min(p_eff[r] - done[r], budget, cfg.chunk_cap)
                need = blocks(done[r] + todo) - held[r]
                while need > total - used:
                    preempted = True
                    newest_prefill = [x for x in running if phase[x] == "prefill"][-1]
                    if preempt(newest_prefill) == r:
                        break
                if r not in running:
                    continue
                used += need
                held[r] += need
                chunks.append((r, todo, done[r]))
                budget -= todo
        if not preempted:
            while admissible(total - used, budget):
                r = waiting.popleft()
                todo = p_eff[r] - done[r]
                if cfg.chunked_prefill:
                    todo = min(todo, budget, cfg.chunk_cap)
                need = blocks(done[r] + todo) - held[r]
                used += need
                held[r] += need
                running.append(r)
                phase[r] = "prefill"
                if math.isnan(sched[r]):
                    sched[r] = t
                chunks.append((r, todo, done[r]))
                budget -= todo
        sum_ctx = sum(ctx[r] for r in dec)
        tokens = len(dec) + sum(c[1] for c in chunks)
        pairs = sum_ctx + sum(c[1] * (c[2] + c[1] / 2.0) for c in chunks)
        kv = sum_ctx + sum(c[2] + c[1] for c in chunks)
        score = sum(c[1] * c[1] for c in chunks)
        t_end = t + cost.time_of(tokens, len(dec) + len(chunks), pairs, kv, score)
        for r in dec:
            ctx[r] += 1
            emitted[r] += 1
            times[r].append(t_end)
            if emitted[r] == out[r]:
                fin[r] = t_end
                running.remove(r)
                used -= held[r]
                phase[r] = "done"
        for r, todo, _ in chunks:
            done[r] += todo
            if done[r] < p_eff[r]:
                continue
            if emitted[r] < out[r]:
                emitted[r] += 1
                times[r].append(t_end)
                if math.isnan(first[r]):
                    first[r] = t_end
            ctx[r], phase[r] = p_eff[r], "decode"
            if emitted[r] >= out[r]:
                fin[r] = t_end
                running.remove(r)
                used -= held[r]
                phase[r] = "done"
        t = t_end
    return np.array(sched), np.array(first), np.array(fin), times


def test_single_request_exact_timeline() -> None:
    cfg = EngineConfig(kv_capacity_tokens=100_000)
    res = simulate([1.0], [1000], [4], cfg, COST)
    prefill = COST.prefill_time(1000)
    steps = [COST.decode_step_time(1, 1000 + k) for k in range(3)]
    assert res.scheduled[0] == 1.0
    assert res.first_token[0] == pytest.approx(1.0 + prefill, rel=1e-15)
    assert res.finish[0] == pytest.approx(1.0 + prefill + sum(steps), rel=1e-14)
    offsets, times = res.token_times()
    expected = 1.0 + prefill + np.concatenate(([0.0], np.cumsum(steps)))
    assert offsets.tolist() == [0, 4]
    np.testing.assert_allclose(times, expected, rtol=1e-14)


@pytest.mark.parametrize("fast", [True, False])
def test_kv_load_holds_up_only_the_admitting_step(fast: bool) -> None:
    # A disaggregated decode server: A (1,000 prompt tokens cached) arrives at 0 and its KV takes
    # 50 ms to pull in; B arrives during A's first step and takes 20 ms. Worked by hand: step 1
    # admits A (+50 ms), step 2 decodes A and admits B (+20 ms), step 3 decodes both; nothing else
    # moves, so every later time shifts by what the steps before it carried.
    cfg = EngineConfig(kv_capacity_tokens=100_000)
    args = ([0.0, 0.001], [1001, 501], [3, 2], cfg, COST)
    kw = {"cached_tokens": [1000, 500], "fast": fast}
    base = simulate(*args, **kw)
    got = simulate(*args, load_seconds=[0.05, 0.02], **kw)
    assert base.first_token[0] > 0.001  # B arrives before step 1 ends, with or without the load
    assert got.steps == base.steps == 3
    np.testing.assert_allclose(got.first_token - base.first_token, [0.05, 0.07], atol=1e-12)
    np.testing.assert_allclose(got.finish - base.finish, [0.07, 0.07], atol=1e-12)
    assert got.busy_time == pytest.approx(base.busy_time + 0.07, abs=1e-12)
    with pytest.raises(ValueError, match="load_seconds"):
        simulate(*args, load_seconds=[0.05, -1.0], **kw)


def test_kv_load_is_charged_once_even_after_preemption() -> None:
    # A KV cache small enough to preempt often: each request's load is read exactly once, at
    # its first admission, however many times it is re-admitted.
    rng = np.random.default_rng(5)
    n = 300
    arr = np.cumsum(rng.exponential(1 / 20.0, n))
    prompt = rng.integers(200, 1200, n)
    out = rng.integers(20, 300, n)

    class Counting(list):  # type: ignore[type-arg]
        reads = 0

        def __getitem__(self, i):  # type: ignore[no-untyped-def]
            Counting.reads += 1
            return super().__getitem__(i)

    cfg = EngineConfig(kv_capacity_tokens=12_000)
    e = _Engine(arr, prompt.astype(np.int64), out.astype(np.int64), np.zeros(n, np.int64), cfg,
                COST, np.full(n, 1e-3))  # fmt: skip
    e.load = Counting(e.load)
    res = e.run(False)
    assert res.preemptions.sum() > 20  # re-admitted many times (58)
    assert Counting.reads == n


def test_ttft_includes_queueing_behind_a_full_server() -> None:
    cfg = EngineConfig(kv_capacity_tokens=100_000, max_num_seqs=1)
    res = simulate([0.0, 0.0], [500, 500], [10, 10], cfg, COST)
    assert res.scheduled[1] == res.finish[0]  # waited for the only sequence slot
    assert res.first_token[1] == pytest.approx(res.finish[0] + COST.prefill_time(500), rel=1e-14)


def test_chunked_prefill_splits_long_prompt_into_budget_sized_chunks() -> None:
    cfg = EngineConfig(kv_capacity_tokens=100_000, max_batched_tokens=1024, max_num_seqs=8)
    res = simulate([0.0], [3000], [1], cfg, COST)
    expected = COST.prefill_time(1024, 0) + COST.prefill_time(1024, 1024)
    expected += COST.prefill_time(952, 2048)
    assert res.first_token[0] == pytest.approx(expected, rel=1e-14)
    assert res.finish[0] == res.first_token[0] and res.steps == 3


def test_prefill_first_mode_pauses_decodes() -> None:
    # vLLM v0 style: the second request's prefill runs alone, the first one's decode waits.
    cfg = EngineConfig(kv_capacity_tokens=100_000, chunked_prefill=False, mixed_prefill=False)
    a = COST.prefill_time(800)
    res = simulate([0.0, a / 2], [800, 800], [3, 1], cfg, COST)
    assert res.first_token[1] == pytest.approx(2 * a, rel=1e-14)
    _, times = res.token_times(0, 1)
    assert times[1] == pytest.approx(2 * a + COST.decode_step_time(1, 800), rel=1e-14)


def test_preemption_by_recompute_when_kv_runs_out() -> None:
    cfg = EngineConfig(kv_capacity_tokens=64 * 16, max_num_seqs=4, block_size=16)
    arr, prompt, out = [0.0, 0.0, 0.0], [300, 300, 300], [200, 200, 200]
    res = simulate(arr, prompt, out, cfg, COST)
    assert res.preemptions.sum() > 0
    offsets, times = res.token_times()
    assert np.diff(offsets).tolist() == out  # every token emitted exactly once
    assert np.all(np.diff(times[offsets[0] : offsets[1]]) > 0)
    _, _, e, t = oracle(arr, prompt, out, [0, 0, 0], cfg, COST)
    np.testing.assert_allclose(res.finish, e, rtol=1e-12)
    np.testing.assert_allclose(times, np.concatenate(t), rtol=1e-12)


def test_closed_form_runs_take_few_iterations() -> None:
    rng = np.random.default_rng(1)
    n = 2000
    arr = np.cumsum(rng.exponential(0.5, n))
    prompt = rng.integers(100, 2000, n)
    out = rng.integers(50, 600, n)
    # The Python engine's closed form (cost models without a compiled path, e.g. layer profiles).
    cfg, z = EngineConfig(kv_capacity_tokens=400_000), np.zeros(n, np.int64)
    res = _Engine(arr, prompt.astype(np.int64), out.astype(np.int64), z, cfg, COST).run(True)
    assert res.steps > 50 * n  # mostly decode steps ...
    assert res.iterations < 4 * n  # ... advanced a run at a time, not a step at a time


def test_unfittable_request_is_refused() -> None:
    with pytest.raises(ValueError, match="need more KV than the server holds"):
        simulate([0.0], [1000], [100], EngineConfig(kv_capacity_tokens=512), COST)


@st.composite
def traces(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0, 0.3), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 700), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 120), min_size=n, max_size=n))
    cached = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    chunked = draw(st.booleans())
    cfg = EngineConfig(
        kv_capacity_tokens=draw(st.sampled_from([900, 2000, 8000, 200_000])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_batched_tokens=draw(st.sampled_from([8, 256, 1024])) if chunked else 1024,
        chunked_prefill=chunked,
        mixed_prefill=draw(st.booleans()),
        max_prefill_chunk=draw(st.sampled_from([None, 100])),
        block_size=draw(st.sampled_from([1, 4, 16])),
    )
    peak = [p + max(o - 1, 0) for p, o in zip(prompt, out, strict=True)]
    limit = min(cfg.total_blocks * cfg.block_size, 10**9 if chunked else 1024)
    out = [o if pk <= limit else 1 for o, pk in zip(out, peak, strict=True)]
    prompt = [min(p, limit) for p in prompt]
    return list(np.cumsum(gaps)), prompt, out, cached, cfg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), tp=st.sampled_from([1, 2]))
def test_engine_agrees_with_step_by_step_oracle(trace, tp: int) -> None:
    arr, prompt, out, cached, cfg = trace
    cost = StepCost(MODEL, GPU, tp=tp, mfu=0.45, mbu=0.65, step_overhead=1e-3, seq_overhead=2e-5)
    res = simulate(arr, prompt, out, cfg, cost, cached_tokens=cached)
    sched, first, fin, times = oracle(arr, prompt, out, cached, cfg, cost)
    np.testing.assert_allclose(res.scheduled, sched, rtol=1e-9)
    np.testing.assert_allclose(res.first_token, first, rtol=1e-9)
    np.testing.assert_allclose(res.finish, fin, rtol=1e-9)
    offsets, flat = res.token_times()
    assert np.diff(offsets).tolist() == [len(t) for t in times]
    np.testing.assert_allclose(flat, np.concatenate([[], *times]), rtol=1e-9)
    slow = simulate(arr, prompt, out, cfg, cost, cached_tokens=cached, fast=False)
    np.testing.assert_allclose(slow.finish, fin, rtol=1e-9)
