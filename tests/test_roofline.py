"""Roofline physics (metrics.md) and the StepCost model: exact values from the formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import catalog
from pipeline.physics import (
    StepCost,
    StepWork,
    allreduce_seconds,
    critical_batch,
    decode_bytes,
    decode_flops,
    dtype_bytes,
    kv_bytes_per_token,
    prefill_bytes,
    prefill_flops,
    weight_bytes,
    weight_bytes_read,
)

L3_8B = catalog.model("llama-3.1-8b")
L2_7B = catalog.model("llama-2-7b")
L2_70B = catalog.model("llama-2-70b")
MIXTRAL = catalog.model("mixtral-8x7b")
H100 = catalog.gpu("H100-SXM")
A100 = catalog.gpu("A100-80GB")


def test_dtype_bytes() -> None:
    assert [dtype_bytes(d) for d in ("bf16", "fp16", "fp8", "int8", "int4")] == [2, 2, 1, 1, 0.5]
    with pytest.raises(ValueError, match="unknown dtype 'fp4'"):
        dtype_bytes("fp4")


def test_kv_bytes_per_token_mha_gqa() -> None:
    # cost-models-and-hardware.md §5: 128 KiB (Llama-3-8B GQA), 512 KiB (Llama-2-7B MHA),
    # 320 KiB (Llama-2-70B GQA-8).
    assert kv_bytes_per_token(L3_8B) == 128 * 1024
    assert kv_bytes_per_token(L2_7B) == 512 * 1024
    assert kv_bytes_per_token(L2_70B) == 320 * 1024
    assert kv_bytes_per_token(L3_8B, "fp8") == 64 * 1024
    # GQA divides MHA's KV by n_heads / n_kv.
    assert kv_bytes_per_token(L2_7B) / kv_bytes_per_token(L3_8B) == L3_8B.heads / L3_8B.kv_heads


def test_weight_bytes_by_dtype() -> None:
    assert weight_bytes(L2_7B) == 2 * 6_738_415_616
    assert weight_bytes(L2_7B, "fp8") == 6_738_415_616
    assert weight_bytes(L2_7B, "int4") == 0.5 * 6_738_415_616


def test_moe_weight_bytes_read_grows_with_batch() -> None:
    one = weight_bytes_read(MIXTRAL, 1)
    assert one == pytest.approx(2 * MIXTRAL.active_params, rel=1e-12)  # top-2 of 8
    many = weight_bytes_read(MIXTRAL, 512)
    assert many == pytest.approx(2 * MIXTRAL.params, rel=1e-12)  # every expert touched
    assert weight_bytes_read(L2_7B, [1, 512]).tolist() == [2 * L2_7B.params] * 2


def test_prefill_flops_formula() -> None:
    t, s = 1000, 3000
    expected = 2 * L3_8B.active_params * t + 4 * 32 * 4096 * t * (s + t / 2)
    assert prefill_flops(L3_8B, t, s) == expected
    assert prefill_flops(L3_8B, [t, 2 * t]).tolist() == [
        2 * L3_8B.active_params * t + 4 * 32 * 4096 * t * t / 2,
        2 * L3_8B.active_params * 2 * t + 4 * 32 * 4096 * 2 * t * t,
    ]


def test_prefill_bytes_and_flash_attention() -> None:
    t, s = 2048, 512
    with_flash = prefill_bytes(L2_7B, t, s)
    assert with_flash == 2 * L2_7B.params + 512 * 1024 * (s + t)
    without = prefill_bytes(L2_7B, t, s, flash_attention=False)
    assert without - with_flash == 2 * 32 * 32 * t * t * 2


def test_decode_flops_and_bytes() -> None:
    contexts = np.array([100, 2000, 517])
    b, c = len(contexts), contexts.sum()
    assert decode_flops(L3_8B, b, c) == 2 * L3_8B.active_params * b + 4 * 32 * 4096 * c
    assert decode_bytes(L3_8B, b, c) == 2 * L3_8B.params + 128 * 1024 * c
    assert decode_bytes(L3_8B, b, c, weight_dtype="fp8", kv_dtype="fp8") == (
        L3_8B.params + 64 * 1024 * c
    )


@pytest.mark.parametrize(
    ("gpu", "expected"), [("A100-80GB", 150), ("H100-SXM", 295), ("H200", 206), ("TPU v5e", 240)]
)
def test_critical_batch_matches_metrics_md(gpu: str, expected: float) -> None:
    assert critical_batch(catalog.gpu(gpu)) == pytest.approx(expected, rel=0.03)


def test_critical_batch_under_quantisation() -> None:
    # Weight-only int8 halves b_w but not F: B* halves. W8A8 fp8 on H100 doubles F too: unchanged.
    assert critical_batch(H100, "int8") == pytest.approx(critical_batch(H100) / 2, rel=1e-12)
    assert critical_batch(H100, "fp8") == pytest.approx(critical_batch(H100), rel=1e-12)
    # A100 has no fp8 tensor cores: fp8 weights are weight-only there.
    assert critical_batch(A100, "fp8") == pytest.approx(critical_batch(A100) / 2, rel=1e-12)


def test_allreduce_two_per_layer() -> None:
    assert allreduce_seconds(L2_70B, 100, 1, latency=30e-6, link_bandwidth=450e9) == 0
    got = allreduce_seconds(L2_70B, 100, 4, latency=30e-6, link_bandwidth=450e9)
    assert got == pytest.approx(2 * 80 * (30e-6 + 1.5 * 100 * 8192 * 2 / 450e9), rel=1e-12)


def test_decode_batch_one_runs_at_mbu() -> None:
    # With no overhead a small-batch decode is bandwidth-bound: achieved bytes/s / BW == mbu,
    # which is Databricks' MBU definition quoted in metrics.md.
    cost = StepCost(L3_8B, H100, mbu=0.7, mfu=0.5)
    t = cost.decode_step_time(1, 1000)
    achieved = decode_bytes(L3_8B, 1, 1000) / t
    assert achieved / H100.bandwidth == pytest.approx(0.7, rel=1e-12)


def test_long_prefill_runs_at_mfu_plus_overhead() -> None:
    cost = StepCost(L3_8B, H100, mfu=0.5, step_overhead=2e-3)
    t = cost.prefill_time(4096)
    assert t == pytest.approx(prefill_flops(L3_8B, 4096) / (0.5 * 989.5e12) + 2e-3, rel=1e-12)


def test_tensor_parallel_scales_f_and_bw_and_adds_allreduce() -> None:
    one = StepCost(L2_70B, H100, tp=1)
    four = StepCost(L2_70B, H100, tp=4, allreduce_latency=30e-6, link_bandwidth=450e9)
    work = StepWork.prefill(2048)
    assert four.compute_seconds(work) == pytest.approx(one.compute_seconds(work) / 4, rel=1e-12)
    assert four.memory_seconds(work) == pytest.approx(one.memory_seconds(work) / 4, rel=1e-12)
    comm = allreduce_seconds(L2_70B, 2048, 4, latency=30e-6, link_bandwidth=450e9)
    assert four.fixed_seconds(work) == pytest.approx(comm, rel=1e-12)


def test_mixed_step_sums_under_one_max_and_pays_overhead_once() -> None:
    cost = StepCost(L3_8B, H100, mfu=0.5, mbu=0.7, step_overhead=3e-3, seq_overhead=1e-5)
    pre, dec = StepWork.prefill(512, 0), StepWork.decode(32, 32 * 800)
    mixed = cost.step_time(pre + dec)
    flops = prefill_flops(L3_8B, 512) + decode_flops(L3_8B, 32, 32 * 800)
    nbytes = 2 * L3_8B.params + 128 * 1024 * (512 + 32 * 800)  # weights once, KV of both
    expected = max(flops / (0.5 * 989.5e12), nbytes / (0.7 * 3.35e12)) + 3e-3 + 33 * 1e-5
    assert mixed == pytest.approx(expected, rel=1e-12)
    assert mixed < cost.step_time(pre) + cost.step_time(dec)


def test_scalar_path_equals_vectorised() -> None:
    cost = StepCost(MIXTRAL, H100, tp=2, step_overhead=1e-3, seq_overhead=2e-5)
    w = StepWork.prefill(300, 100) + StepWork.decode(17, 17 * 900)
    scalar = cost.time_of(
        float(w.tokens),
        float(w.seqs),
        float(w.attn_pairs),
        float(w.kv_tokens),
        float(w.score_elems),
    )
    assert scalar == pytest.approx(float(cost.step_time(w)), rel=1e-14)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 512),
    ctx=st.integers(1, 100_000),
    k=st.integers(0, 5000),
    tp=st.sampled_from([1, 2, 8]),
)
def test_decode_lines_match_step_time(batch: int, ctx: int, k: int, tp: int) -> None:
    cost = StepCost(L3_8B, H100, tp=tp, step_overhead=2e-3, seq_overhead=1e-5)
    c0, c1, m0, m1, fixed = cost.decode_lines(batch, batch * ctx)
    direct = cost.decode_step_time(batch, batch * (ctx + k))
    assert max(c0 + c1 * k, m0 + m1 * k) + fixed == pytest.approx(float(direct), rel=1e-12)


def test_overlap_hides_a_fraction_of_the_smaller_term() -> None:
    """OPT-13B on one A100, fp16: a 780-token prefill is compute-bound, a batch-8 decode memory-
    bound. overlap 1 is the roofline max, 0 the sum; in between the smaller term is partly hidden.
    Compute and memory seconds from the formulas of metrics.md, by hand."""
    m, g = catalog.model("facebook/opt-13b"), catalog.gpu("A100-80GB")
    flops = 2 * m.active_params * 780 + 4 * m.layers * m.attn_dim * 780 * 390
    c = flops / (0.6 * g.bf16_flops)
    mem = (m.params * 2 + kv_bytes_per_token(m, "fp16") * 780) / (0.8 * g.bandwidth)
    for overlap, want in ((1.0, c), (0.0, c + mem), (0.25, c + 0.75 * mem)):
        cost = StepCost(m, g, weight_dtype="fp16", kv_dtype="fp16", mfu=0.6, mbu=0.8,
                        step_overhead=5e-3, overlap=overlap)  # fmt: skip
        assert float(cost.prefill_time(780)) == pytest.approx(want + 5e-3, rel=1e-12)
        assert cost.time_of(780, 1, 780 * 390, 780, 780 * 780) == pytest.approx(
            want + 5e-3, rel=1e-12
        )
    with pytest.raises(ValueError, match="overlap"):
        StepCost(m, g, overlap=1.5)


def test_decode_lines_keep_the_overlap() -> None:
    """The closed-form decode run prices step k as time_of the same step (contexts + k each)."""
    m, g = catalog.model("facebook/opt-13b"), catalog.gpu("A100-80GB")
    cost = StepCost(m, g, mfu=0.5, mbu=0.7, overlap=0.3, step_overhead=4e-3, seq_overhead=3e-4)
    b, ctx = 48, 48 * 900.0
    lines = cost.decode_lines(b, ctx)
    for k in (0, 7, 300):
        want = cost.time_of(b, b, ctx + b * k, ctx + b * k, 0.0)
        got = max(lines.c0 + lines.c1 * k, lines.m0 + lines.m1 * k) + lines.fixed
        assert got == pytest.approx(want, rel=1e-12)
