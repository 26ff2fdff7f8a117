"""The two kinds of catalog entry: an accelerator and a model architecture (frozen dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Compute dtypes whose peak the catalog records; fp16 runs at the bf16 rate on every listed chip.
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class GPU:
    """One accelerator: dense peak throughput per compute dtype, HBM bandwidth and capacity."""

    key: str
    name: str
    memory_bytes: int
    bandwidth: float  # peak memory bandwidth, bytes/s
    bf16_flops: float  # dense peak, FLOP/s
    fp8_flops: float | None = None
    int8_flops: float | None = None
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def peak_flops(self, compute_dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``compute_dtype``; no fp8/int8 path means the bf16 rate."""
        if compute_dtype in ("bf16", "fp16"):
            return self.bf16_flops
        if compute_dtype == "fp8":
            return self.fp8_flops or self.bf16_flops
        if compute_dtype == "int8":
            return self.int8_flops or self.bf16_flops
        raise ValueError(
            f"unknown compute dtype {compute_dtype!r}; expected one of {COMPUTE_DTYPES}"
        )

    def has_native(self, compute_dtype: str) -> bool:
        """Whether the chip has tensor cores for ``compute_dtype`` (A100 has no fp8)."""
        return compute_dtype in ("bf16", "fp16") or self.peak_flops(compute_dtype) > self.bf16_flops


@dataclass(frozen=True)
class Model:
    """One model architecture, as its config.json gives it."""

    key: str
    name: str
    hf_id: str
    family: str
    params: int  # total parameters (all experts for MoE): what the weights occupy
    active_params: int  # parameters one token runs through: what the FLOPs use
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    max_context: int
    tied_embeddings: bool = False
    n_experts: int = 1
    experts_per_token: int = 1
    aliases: tuple[str, ...] = ()
    source: str = field(default="", compare=False)

    @property
    def attn_dim(self) -> int:
        """Query width n_heads * d_head: the ``d`` of the attention FLOP terms in metrics.md."""
        return self.heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        """'MHA' (kv_heads = heads), 'MQA' (one KV head) or 'GQA' (in between)."""
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    @property
    def expert_params(self) -> int:
        """Parameters in the routed expert MLPs (0 for dense models)."""
        if self.n_experts <= 1:
            return 0
        per_expert = (self.params - self.active_params) // (self.n_experts - self.experts_per_token)
        return per_expert * self.n_experts
