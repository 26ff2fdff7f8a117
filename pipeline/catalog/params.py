"""Parameter counts derived from a model's config fields (cost-models-and-hardware.md §5).

The catalog stores ``params`` and ``active_params`` explicitly; this module is how they were
derived and how a user entry without them gets them. Counting by family matters: Qwen2 adds QKV
biases, Qwen3 adds per-head q/k norms, OPT has biases everywhere, LayerNorm with bias, a ReLU MLP of
two matrices and learned positional embeddings; Mixtral holds ``n_experts`` MLPs per layer of which
``experts_per_token`` run for each token.
"""

from __future__ import annotations

FAMILIES = ("llama", "qwen2", "qwen3", "mixtral", "opt")

# OPT's learned positional table has 2 extra rows (padding offset) beyond max_position_embeddings.
_OPT_POSITION_OFFSET = 2


def count_params(
    *,
    family: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    intermediate: int,
    max_context: int,
    tied_embeddings: bool = False,
    n_experts: int = 1,
    experts_per_token: int = 1,
) -> tuple[int, int]:
    """Return ``(total, active)`` parameters; they differ only for mixture-of-experts models."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {', '.join(FAMILIES)}")
    d, q, kv = hidden, heads * head_dim, kv_heads * head_dim
    embeddings = vocab * d * (1 if tied_embeddings else 2)
    if family == "opt":
        attn = 4 * d * d + 4 * d  # q, k, v, out projections with biases (opt has q = kv = d)
        mlp = 2 * d * intermediate + intermediate + d  # fc1, fc2 with biases
        norms = 2 * 2 * d  # two LayerNorms with weight and bias
        positions = (max_context + _OPT_POSITION_OFFSET) * d
        layer = attn + mlp + norms
        total = embeddings + positions + layers * layer + 2 * d  # final LayerNorm
        return total, total
    attn = d * q + 2 * d * kv + q * d
    if family == "qwen2":
        attn += q + 2 * kv  # QKV biases
    if family == "qwen3":
        attn += 2 * head_dim  # q_norm and k_norm weights, shared across heads
    expert_mlp = 3 * d * intermediate  # SwiGLU: gate, up, down
    router = d * n_experts if n_experts > 1 else 0
    layer = attn + n_experts * expert_mlp + router + 2 * d  # two RMSNorms
    total = embeddings + layers * layer + d  # final RMSNorm
    active = total - layers * (n_experts - experts_per_token) * expert_mlp
    return total, active
