"""Scheduler configuration of one simulated server and its KV-cache capacity."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.catalog import GPU, Model
from pipeline.physics import kv_bytes_per_token, kv_replication, weight_bytes

VLLM_V0_WATERMARK = 0.01  # vLLM V0 BlockSpaceManager(watermark=0.01): blocks kept free at admission
VLLM_TOKEN_BUDGET = 8192  # vLLM's default max_num_batched_tokens for online serving


def default_token_budget(
    chunked: bool, max_num_seqs: int, max_model_len: int, kv_tokens: int, longest: int = 0
) -> int:
    """The per-step token budget a server uses when the log does not record one.

    vLLM's online default is 8,192; with chunked prefill it must cover one token per running
    sequence, and without chunking the longest request must fit one step (vLLM raises the
    budget to max_model_len, itself bounded by the KV capacity). Generator, replay and
    attribution's counterfactuals all call this one rule."""
    if chunked:
        return max(VLLM_TOKEN_BUDGET, max_num_seqs)
    return max(VLLM_TOKEN_BUDGET, min(max_model_len, kv_tokens), longest)


def kv_slots(kv_tokens: int, reserve: int) -> int:
    """Sequences a KV cache of ``kv_tokens`` holds when each reserves ``reserve`` tokens up front
    (static batching, contiguous KV): generator and replay call this one rule."""
    slots = kv_tokens // max(reserve, 1)
    if slots < 1:
        raise ValueError(f"the KV cache ({kv_tokens} tokens) holds no {reserve}-token slot")
    return slots


@dataclass(frozen=True)
class EngineConfig:
    """Continuous-batching scheduler of one server (one replica of ``tp`` GPUs).

    chunked_prefill: prompts are split into chunks that share the per-step token budget with the
        running decodes (vLLM v1 default, Sarathi-Serve). Each step schedules every running decode
        first, then continues partial prefills, then admits waiting requests FCFS.
    mixed_prefill: only without chunking. True: a step runs the running decodes *and* the whole
        prefills of the requests it admits (vLLM v1 with chunking off). False: a step that can admit
        requests runs only their prefills and the decodes wait (vLLM v0's prefill-first default).
    prefill_first: only with chunking. True: a step with prefill chunks it can run runs only
        those, and the decodes wait for a step without prefill work: SGLang's default scheduler
        (chunks of ``max_batched_tokens``, its chunked_prefill_size); False (vLLM v1, SGLang's
        --enable-mixed-chunk): chunks share each step with the decodes.
    max_prefill_chunk: per-request cap on one chunk (vLLM's long_prefill_token_threshold); None
        means the step budget is the only cap.
    kv_capacity_tokens: KV-cache slots across the replica, managed in paged blocks of
        ``block_size`` tokens; when a step cannot get a block the most recently admitted request is
        preempted and later recomputed (vLLM's preemption by recompute).
    admission_watermark: share of the blocks an admission must leave free (vLLM V0's block
        manager: ``watermark`` 0.01, so that running requests can grow before one is preempted;
        V1 and SGLang admit down to the last block).
    """

    kv_capacity_tokens: int
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    mixed_prefill: bool = True
    max_prefill_chunk: int | None = None
    block_size: int = 16
    prefill_first: bool = False
    admission_watermark: float = 0.0

    def __post_init__(self) -> None:
        if min(self.max_num_seqs, self.max_batched_tokens, self.block_size) < 1:
            raise ValueError("max_num_seqs, max_batched_tokens and block_size must be >= 1")
        if self.kv_capacity_tokens < self.block_size:
            raise ValueError(f"KV capacity {self.kv_capacity_tokens} tokens holds no block")
        if self.chunked_prefill and self.max_batched_tokens < self.max_num_seqs:
            # Otherwise running decodes alone could exceed the budget and be skipped.
            raise ValueError("with chunked prefill max_batched_tokens must be >= max_num_seqs")
        if self.max_prefill_chunk is not None and self.max_prefill_chunk < 1:
            raise ValueError("max_prefill_chunk must be >= 1")
        if not 0.0 <= self.admission_watermark < 1.0:
            raise ValueError("admission_watermark must lie in [0, 1)")

    @property
    def total_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def watermark_blocks(self) -> int:
        return int(self.admission_watermark * self.total_blocks)

    @property
    def chunk_cap(self) -> int:
        return self.max_prefill_chunk or self.max_batched_tokens


def kv_capacity_tokens(
    model: Model,
    gpu: GPU,
    *,
    tp: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    gpu_memory_utilization: float = 0.9,
    activation_reserve_bytes: float = 2 * 2**30,
) -> int:
    """KV tokens that fit: (HBM * utilisation - weights - activation reserve) / KV per token.

    Mirrors vLLM's sizing (gpu_memory_utilization 0.9 by default; the reserve stands in for the
    profiled activation peak, per GPU). Raises when the weights alone do not fit.
    """
    usable = gpu.memory_bytes * gpu_memory_utilization * tp
    free = usable - weight_bytes(model, weight_dtype) - activation_reserve_bytes * tp
    if free <= 0:
        need = weight_bytes(model, weight_dtype) / (gpu.memory_bytes * gpu_memory_utilization)
        raise ValueError(
            f"{model.name} ({weight_dtype}) does not fit on {tp} x {gpu.name}: the weights alone "
            f"need about {need:.1f} GPUs; raise the GPU count (tensor parallelism)."
        )
    # An MLA latent (or a KV head shared by several GPUs) is held once per GPU that needs it.
    return int(free // (kv_bytes_per_token(model, kv_dtype) * kv_replication(model, tp)))
