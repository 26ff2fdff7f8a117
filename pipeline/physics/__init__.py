"""Roofline physics of LLM serving (metrics.md "The physics") and the per-step cost model."""

from pipeline.physics.roofline import (
    DTYPE_BYTES,
    allreduce_seconds,
    compute_dtype_for,
    critical_batch,
    decode_bytes,
    decode_flops,
    dtype_bytes,
    kv_bytes_per_token,
    kv_replication,
    prefill_bytes,
    prefill_flops,
    weight_bytes,
    weight_bytes_read,
)
from pipeline.physics.step_cost import DecodeLines, StepCost, StepWork

__all__ = [
    "DTYPE_BYTES",
    "DecodeLines",
    "StepCost",
    "StepWork",
    "allreduce_seconds",
    "compute_dtype_for",
    "critical_batch",
    "decode_bytes",
    "decode_flops",
    "dtype_bytes",
    "kv_bytes_per_token",
    "kv_replication",
    "prefill_bytes",
    "prefill_flops",
    "weight_bytes",
    "weight_bytes_read",
]
