"""Disaggregation (pipeline.sim.disaggregated), the one simulation `fit` and `replay` share:
a hand-worked schedule of one request, and a one-token request that never reaches decode."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.sim import EngineConfig
from pipeline.sim.cluster import Pool
from pipeline.sim.disaggregated import simulate_disaggregated

MODEL = catalog.model("llama-3.1-8b")
GPU = catalog.gpu("H100-SXM")
PREFILL = StepCost(MODEL, GPU, tp=2, mfu=0.5, mbu=0.7, step_overhead=2e-3)
DECODE = StepCost(MODEL, GPU, mfu=0.4, mbu=0.8, step_overhead=3e-3, seq_overhead=1e-5)


@pytest.mark.parametrize("fast", [True, False])
def test_hand_worked_schedule(fast: bool) -> None:
    # A: 1,000-token prompt, 3 output tokens, arrives at 0; its KV pull takes 50 ms.
    # B: 1 output token, arrives long after: served by the prefill pool alone.
    # By hand: A's first token after its prefill step; the decode server admits A at that
    # moment, and the admitting step computes one token over the 1,000 cached ones plus the
    # pull, emitting token 2; one decode step at context 1,001 emits token 3.
    p_pool = Pool(EngineConfig(kv_capacity_tokens=100_000, chunked_prefill=False,
                               mixed_prefill=False), PREFILL)  # fmt: skip
    d_pool = Pool(EngineConfig(kv_capacity_tokens=100_000), DECODE)
    res = simulate_disaggregated(
        np.array([0.0, 100.0]), np.array([1000, 200]), np.array([3, 1]), p_pool, d_pool,
        np.array([0.05, 0.01]), fast=fast,
    )  # fmt: skip
    first_a = PREFILL.prefill_time(1000)
    assert res.first_token[0] == pytest.approx(first_a, rel=1e-14)
    finish_a = first_a + DECODE.prefill_time(1, 1000) + 0.05 + DECODE.decode_step_time(1, 1001)
    assert res.finish[0] == pytest.approx(finish_a, rel=1e-14)
    assert res.decoded.tolist() == [0]
    assert res.first_token[1] == pytest.approx(100.0 + PREFILL.prefill_time(200), rel=1e-14)
    assert res.finish[1] == res.first_token[1]  # its only token came from the prefill pool
    assert res.decode.servers[0].busy_time == pytest.approx(finish_a - first_a, rel=1e-14)
