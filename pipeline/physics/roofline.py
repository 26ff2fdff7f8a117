"""Roofline FLOPs and bytes of prefill and decode (metrics.md "The physics").

Every function is numpy-vectorised: token counts and contexts may be scalars or arrays (one value
per step or per request) and broadcast together. Results are totals over the whole replica;
tensor parallelism divides *time* (F and BW are multiplied by tp), not these counts.

Notation as in metrics.md: P params (active for MoE), L layers, d = n_heads * d_head,
b_w / b_kv bytes per weight / KV element.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from pipeline.catalog import GPU, Model

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
# Activations (score matrix, all-reduce payloads) stay in 16-bit under every weight dtype.
ACTIVATION_BYTES = 2.0

Array = NDArray[np.float64]


def dtype_bytes(dtype: str) -> float:
    """Bytes per element: bf16/fp16 2, fp8/int8 1, int4 0.5."""
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise ValueError(
            f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}"
        ) from None


def kv_bytes_per_token(model: Model, kv_dtype: str = "bf16") -> float:
    """2 * L * n_kv * d_head * b_kv: K and V for every layer. GQA/MQA enter through n_kv; MLA
    caches L * (kv_lora_rank + qk_rope_head_dim) * b_kv (DeepSeek-V3: 576 elements per layer
    where 128 heads of MHA would hold 2 * 128 * 128)."""
    return float(model.layers * model.kv_elements_per_layer) * dtype_bytes(kv_dtype)


def kv_replication(model: Model, tp: int) -> float:
    """How many copies of each cached token a TP group holds (and reads) across its GPUs.

    Tensor parallelism splits KV heads over the GPUs; with fewer KV heads than GPUs each head is
    replicated tp / n_kv times, and an MLA latent (one per layer, not per head) on every GPU.
    """
    if tp <= 1:
        return 1.0
    if model.is_mla:
        return float(tp)
    return max(1.0, tp / model.kv_heads)


def weight_bytes(model: Model, weight_dtype: str = "bf16") -> float:
    """Bytes the weights occupy: all parameters (every expert of an MoE) times b_w."""
    return model.params * dtype_bytes(weight_dtype)


def weight_bytes_read(model: Model, tokens: ArrayLike, weight_dtype: str = "bf16") -> Array:
    """Weight bytes one forward pass over ``tokens`` tokens streams from HBM.

    Dense models read every weight once per step. An MoE step reads the shared weights plus the
    experts its tokens were routed to: with top-k of E routed uniformly, the expected fraction of
    experts touched by n tokens is 1 - (1 - k/E)^n (k/E for one token, -> 1 for large batches).
    """
    n = np.asarray(tokens, dtype=np.float64)
    b = dtype_bytes(weight_dtype)
    expert = model.expert_params
    if expert == 0:
        return np.full_like(n, model.params * b)
    miss = 1.0 - model.experts_per_token / model.n_experts
    touched = 1.0 - np.power(miss, n)
    return ((model.params - expert) + expert * touched) * b


def prefill_flops(model: Model, new_tokens: ArrayLike, cached: ArrayLike = 0) -> Array:
    """FLOPs to prefill T new tokens on top of S cached ones: 2*P*T + 4*L*d*T*(S + T/2)."""
    t = np.asarray(new_tokens, dtype=np.float64)
    s = np.asarray(cached, dtype=np.float64)
    return 2.0 * model.active_params * t + 4.0 * model.layers * model.attn_dim * t * (s + t / 2.0)


def prefill_bytes(
    model: Model,
    new_tokens: ArrayLike,
    cached: ArrayLike = 0,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    flash_attention: bool = True,
) -> Array:
    """HBM bytes of a prefill: weights + KV of the S cached tokens read + KV of the T new written.

    Without FlashAttention the T x T score matrix goes through HBM: + 2 * L * n_heads * T^2 * b.
    """
    t = np.asarray(new_tokens, dtype=np.float64)
    s = np.asarray(cached, dtype=np.float64)
    total = weight_bytes_read(model, t, weight_dtype) + kv_bytes_per_token(model, kv_dtype) * (
        s + t
    )
    if not flash_attention:
        total = total + 2.0 * model.layers * model.heads * t * t * ACTIVATION_BYTES
    return total


def decode_flops(model: Model, batch: ArrayLike, sum_context: ArrayLike) -> Array:
    """FLOPs of one decode step of B sequences with contexts c_i: 2*P*B + 4*L*d*sum(c_i)."""
    b = np.asarray(batch, dtype=np.float64)
    c = np.asarray(sum_context, dtype=np.float64)
    return 2.0 * model.active_params * b + 4.0 * model.layers * model.attn_dim * c


def decode_bytes(
    model: Model,
    batch: ArrayLike,
    sum_context: ArrayLike,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> Array:
    """HBM bytes of one decode step: P*b_w (weights read once per step) + KV_per_token*sum(c_i)."""
    c = np.asarray(sum_context, dtype=np.float64)
    return weight_bytes_read(model, batch, weight_dtype) + kv_bytes_per_token(model, kv_dtype) * c


def compute_dtype_for(gpu: GPU, weight_dtype: str) -> str:
    """Dtype the matmuls run in: fp8 weights run W8A8 where the chip has fp8 tensor cores;
    int8/int4 (and fp8 on chips without fp8, e.g. A100) are weight-only and compute in bf16."""
    if weight_dtype == "fp8" and gpu.has_native("fp8"):
        return "fp8"
    return "bf16"


def critical_batch(gpu: GPU, weight_dtype: str = "bf16", compute_dtype: str | None = None) -> float:
    """B* = (F / BW) * (b_w / 2): the decode batch beyond which weight streaming stops dominating.

    Weight-only quantisation halves b_w but not F, halving B*; W8A8 doubles F too, keeping it.
    """
    dtype = compute_dtype or compute_dtype_for(gpu, weight_dtype)
    return gpu.peak_flops(dtype) / gpu.bandwidth * dtype_bytes(weight_dtype) / 2.0


def allreduce_seconds(
    model: Model,
    tokens: ArrayLike,
    tp: int,
    *,
    latency: float,
    link_bandwidth: float,
) -> Array:
    """Tensor-parallel communication of one step: two all-reduces per layer.

    Each moves tokens * hidden activations; a ring all-reduce sends 2 (tp - 1) / tp of the message
    per GPU. ``latency`` is the fixed cost per all-reduce (~30 us on NVLink, cmh §6.1).
    """
    n = np.asarray(tokens, dtype=np.float64)
    if tp <= 1:
        return np.zeros_like(n)
    message = n * model.hidden * ACTIVATION_BYTES
    per_call = latency + 2.0 * (tp - 1) / tp * message / link_bandwidth
    return 2.0 * model.layers * per_call
