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
    n_experts: int = 1  # routed experts per MoE layer
    experts_per_token: int = 1
    # Expert MLP width where it differs from the dense one (Qwen3-MoE, DeepSeek); 0 = intermediate.
    moe_intermediate: int = 0
    shared_experts: int = 0  # experts every token runs through besides the routed ones (DeepSeek)
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model (first_k_dense_replace)
    # Multi-head latent attention (DeepSeek-V2/V3): the cache holds one latent of kv_lora_rank plus
    # a shared RoPE key of qk_rope_head_dim per layer, not kv_heads x head_dim keys and values.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0  # value width per head where it differs from head_dim (MLA); 0 = head_dim
    # Sliding-window attention (Gemma 2/3, gpt-oss): `sliding_layers` of `layers` attend to the
    # last `sliding_window` tokens only. Recorded; the roofline still counts them as full
    # attention (an upper bound on KV and attention cost beyond the window, docs/catalog.md).
    sliding_window: int = 0
    sliding_layers: int = 0
    aliases: tuple[str, ...] = ()
    source: str = field(default="", compare=False)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def attn_dim(self) -> int:
        """The ``d`` of the attention FLOP terms 4*L*d*pairs in metrics.md: n_heads * d_head, or
        for MLA n_heads * (d_qk + d_v) / 2 (QK^T over the query/key width, PV over the value
        width, in the non-absorbed form vLLM and SGLang run prefill in)."""
        if self.is_mla:
            return self.heads * (self.head_dim + self.value_dim) // 2
        return self.heads * self.head_dim

    @property
    def kv_elements_per_layer(self) -> int:
        """Cached elements per token per layer: 2 * n_kv * d_head (K and V), or for MLA the
        latent plus the decoupled RoPE key, kv_lora_rank + qk_rope_head_dim."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        """'MLA' (latent cache), 'MHA' (kv_heads = heads), 'MQA' (one KV head) or 'GQA'."""
        if self.is_mla:
            return "MLA"
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
