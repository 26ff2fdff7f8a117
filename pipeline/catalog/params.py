"""Parameter counts derived from a model's config fields (cost-models-and-hardware.md §5).

The catalog stores ``params`` and ``active_params`` explicitly; this module is how they were
derived and how a user entry (or a Hugging Face ``config.json``) without them gets them. Counting
by family matters, because the families differ in what a layer holds:

- llama (also Mistral, Mistral-Nemo/Small): q/k/v/o without biases, a SwiGLU MLP, two RMSNorms.
- qwen2 adds QKV biases; qwen3 per-head q/k norms instead; qwen3_moe is qwen3 attention with
  ``n_experts`` SwiGLU experts of width ``moe_intermediate`` and a router.
- mixtral: ``n_experts`` SwiGLU experts of width ``intermediate`` and a router.
- gemma2 / gemma3: a gated MLP, four RMSNorms per layer (pre/post attention and MLP), tied
  embeddings; gemma3 adds q/k norms. Only the text decoder is counted (a vision tower runs on
  image inputs only).
- deepseek (V2/V3): multi-head latent attention (low-rank q and kv projections with their norms),
  ``dense_layers`` leading dense MLPs, then MoE layers of routed plus ``shared_experts``.
  The multi-token-prediction module (num_nextn_predict_layers) is not counted: it runs only for
  speculative decoding.
- gpt_oss: attention with biases and one sink logit per head; experts with biases, a router
  with bias.
- opt: biases everywhere, LayerNorm with bias, a ReLU MLP of two matrices, learned positions.

Active parameters are the total minus the routed experts a token does not run through. Model
cards count differently at times (gpt-oss leaves the input embedding out of its "active" figure);
docs/catalog.md says where.
"""

from __future__ import annotations

FAMILIES = (
    "llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gemma2", "gemma3", "deepseek", "gpt_oss",
    "opt",
)  # fmt: skip

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
    moe_intermediate: int = 0,
    shared_experts: int = 0,
    dense_layers: int = 0,
    kv_lora_rank: int = 0,
    q_lora_rank: int = 0,
    qk_rope_head_dim: int = 0,
    v_head_dim: int = 0,
) -> tuple[int, int]:
    """Return ``(total, active)`` parameters; they differ only for mixture-of-experts models."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {', '.join(FAMILIES)}")
    d = hidden
    embeddings = vocab * d * (1 if tied_embeddings else 2)
    if family == "opt":
        attn = 4 * d * d + 4 * d  # q, k, v, out projections with biases (opt has q = kv = d)
        mlp = 2 * d * intermediate + intermediate + d  # fc1, fc2 with biases
        norms = 2 * 2 * d  # two LayerNorms with weight and bias
        positions = (max_context + _OPT_POSITION_OFFSET) * d
        total = embeddings + positions + layers * (attn + mlp + norms) + 2 * d  # final LayerNorm
        return total, total

    attn = _attention(
        family, d, heads, kv_heads, head_dim, kv_lora_rank, q_lora_rank, qk_rope_head_dim,
        v_head_dim,
    )  # fmt: skip
    norms = 4 * d if family in ("gemma2", "gemma3") else 2 * d
    moe = n_experts > 1
    width = moe_intermediate or intermediate
    if family == "gpt_oss":
        expert = 3 * d * width + 2 * width + d  # gate_up (with bias), down (with bias)
        router = d * n_experts + n_experts
    else:
        expert = 3 * d * width  # gate, up, down
        router = d * n_experts if moe else 0
    dense_mlp = 3 * d * intermediate
    moe_layers = layers - dense_layers if moe else 0
    moe_layer_mlp = (n_experts + shared_experts) * expert + router
    total = (
        embeddings
        + layers * (attn + norms)
        + (layers - moe_layers) * dense_mlp
        + moe_layers * moe_layer_mlp
        + d  # final norm
    )
    active = total - moe_layers * (n_experts - experts_per_token) * expert
    return total, active


def _attention(
    family: str,
    d: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_lora_rank: int,
    q_lora_rank: int,
    rope: int,
    v_head_dim: int,
) -> int:
    """Parameters of one attention block."""
    if kv_lora_rank:  # MLA: head_dim is the query/key width (nope + rope)
        v = v_head_dim or head_dim
        q = (
            d * q_lora_rank + q_lora_rank + q_lora_rank * heads * head_dim
            if q_lora_rank
            else (d * heads * head_dim)
        )
        kv = d * (kv_lora_rank + rope) + kv_lora_rank + kv_lora_rank * heads * (head_dim - rope + v)
        return q + kv + heads * v * d
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = d * q + 2 * d * kv + q * d
    if family == "qwen2":
        attn += q + 2 * kv  # QKV biases
    if family in ("qwen3", "qwen3_moe", "gemma3"):
        attn += 2 * head_dim  # q_norm and k_norm weights, shared across heads
    if family == "gpt_oss":
        attn += q + 2 * kv + d + heads  # q/k/v/o biases and one sink logit per head
    return attn
