"""Time of one engine step from its work: roofline with explicit efficiencies and overheads.

    step_time = max(C, M) + (1 - overlap) * min(C, M)
                + step_overhead + seq_overhead * seqs + tensor-parallel all-reduces
    C = FLOPs / (mfu * F * tp),  M = bytes / (mbu * BW * tp)

``overlap`` is the fraction of the smaller of compute and memory time hidden under the larger:
1 is the pure roofline (perfect overlap, the default), 0 adds them. Real servers sit in
between: one step runs many kernels, each compute- or bandwidth-bound on its own, so a prefill
step also pays for streaming the weights (DistServe's fitted vLLM profile for OPT-13B on A100:
prefill 22 ms + 0.14 ms/token, against a 13 ms weight read), and ``pipeline fit`` estimates it.

A mixed step (prefill chunks and decodes together) sums the FLOPs and the bytes of its parts
under one max and pays the fixed costs once; the weights are read once per step, however many
sequences share it. The efficiencies (mfu, mbu) and overheads are plain fields so that
``pipeline fit`` can estimate them and the simulator can run with fitted values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from pipeline.catalog import GPU, Model
from pipeline.physics.roofline import (
    ACTIVATION_BYTES,
    compute_dtype_for,
    dtype_bytes,
    kv_bytes_per_token,
    kv_replication,
)


@dataclass(frozen=True)
class StepWork:
    """Aggregate work of one step (or arrays of steps); the cost is a function of these only.

    tokens:      new tokens processed (prefill-chunk tokens + one per decoding sequence)
    seqs:        sequences in the step
    attn_pairs:  query-key pairs: sum T*(S + T/2) over prefill chunks + sum c_i over decodes
    kv_tokens:   KV-cache tokens moved: sum (S + T) over prefill chunks + sum c_i over decodes
    score_elems: sum T^2 over prefill chunks (score-matrix traffic without FlashAttention)
    """

    tokens: ArrayLike
    seqs: ArrayLike
    attn_pairs: ArrayLike
    kv_tokens: ArrayLike
    score_elems: ArrayLike = 0.0

    @classmethod
    def prefill(cls, new_tokens: ArrayLike, cached: ArrayLike = 0) -> StepWork:
        t = np.asarray(new_tokens, dtype=np.float64)
        s = np.asarray(cached, dtype=np.float64)
        return cls(t, np.ones_like(t), t * (s + t / 2.0), s + t, t * t)

    @classmethod
    def decode(cls, batch: ArrayLike, sum_context: ArrayLike) -> StepWork:
        b = np.asarray(batch, dtype=np.float64)
        c = np.asarray(sum_context, dtype=np.float64)
        return cls(b, b, c, c, np.zeros_like(c))

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(
            *(np.add(getattr(self, f), getattr(other, f)) for f in StepWork.__dataclass_fields__)
        )


class DecodeLines(NamedTuple):
    """A run of decode-only steps with a fixed batch B whose contexts grow by 1 per step:
    step k (k = 0, 1, ...) takes max(c0 + c1*k, m0 + m1*k) + fixed seconds."""

    c0: float
    c1: float
    m0: float
    m1: float
    fixed: float


@dataclass(frozen=True)
class StepCost:
    """Step-time model of one replica (``tp`` GPUs) serving ``model`` on ``gpu``."""

    model: Model
    gpu: GPU
    tp: int = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str | None = None  # None: fp8 weights run W8A8 where supported, else bf16
    flash_attention: bool = True
    mfu: float = 0.5  # achieved / peak FLOP/s
    mbu: float = 0.7  # achieved / peak HBM bytes/s
    step_overhead: float = 0.0  # seconds per step (scheduling, sampling, launches, per-layer fixed)
    seq_overhead: float = 0.0  # seconds per sequence in the step
    overlap: float = 1.0  # fraction of min(compute, memory) hidden under the max (1: roofline)
    allreduce_latency: float = 30e-6  # seconds per all-reduce; two per layer when tp > 1
    link_bandwidth: float = 450e9  # bytes/s per GPU for tensor-parallel all-reduce (NVLink 4)

    def __post_init__(self) -> None:
        if not (0 < self.mfu <= 1 and 0 < self.mbu <= 1):
            raise ValueError(f"mfu and mbu must lie in (0, 1], got {self.mfu}, {self.mbu}")
        if self.tp < 1:
            raise ValueError(f"tp must be >= 1, got {self.tp}")
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"overlap must lie in [0, 1], got {self.overlap}")

    # -- constants folded once; the simulator calls step time hundreds of thousands of times --
    @cached_property
    def _k(self) -> dict[str, float]:
        m, tp = self.model, self.tp
        dtype = self.compute_dtype or compute_dtype_for(self.gpu, self.weight_dtype)
        b_w = dtype_bytes(self.weight_dtype)
        expert = m.expert_params
        comm_calls = 2.0 * m.layers if tp > 1 else 0.0
        return {
            "sec_per_flop": 1.0 / (self.mfu * self.gpu.peak_flops(dtype) * tp),
            "sec_per_byte": 1.0 / (self.mbu * self.gpu.bandwidth * tp),
            "flop_per_token": 2.0 * m.active_params,
            "flop_per_pair": 4.0 * m.layers * m.attn_dim,
            "shared_weight_bytes": (m.params - expert) * b_w,
            "expert_weight_bytes": expert * b_w,
            "expert_miss": 1.0 - m.experts_per_token / m.n_experts if expert else 1.0,
            "kv_bytes": kv_bytes_per_token(m, self.kv_dtype) * kv_replication(m, tp),
            "score_bytes": 0.0 if self.flash_attention else 2.0 * m.layers * m.heads * 2.0,
            "comm_fixed": comm_calls * self.allreduce_latency,
            "comm_per_token": comm_calls
            * 2.0
            * (tp - 1)
            / tp
            * m.hidden
            * ACTIVATION_BYTES
            / self.link_bandwidth,
        }

    def _weights(self, tokens: Any) -> Any:
        k = self._k
        if k["expert_weight_bytes"] == 0.0:
            return k["shared_weight_bytes"]
        return k["shared_weight_bytes"] + k["expert_weight_bytes"] * (
            1.0 - k["expert_miss"] ** tokens
        )

    def compute_seconds(self, work: StepWork) -> Any:
        k = self._k
        flops = k["flop_per_token"] * np.asarray(work.tokens) + k["flop_per_pair"] * np.asarray(
            work.attn_pairs
        )
        return flops * k["sec_per_flop"]

    def memory_seconds(self, work: StepWork) -> Any:
        k = self._k
        tokens = np.asarray(work.tokens, dtype=np.float64)
        nbytes = (
            self._weights(tokens)
            + k["kv_bytes"] * np.asarray(work.kv_tokens)
            + k["score_bytes"] * np.asarray(work.score_elems)
        )
        return nbytes * k["sec_per_byte"]

    def fixed_seconds(self, work: StepWork) -> Any:
        k = self._k
        tokens = np.asarray(work.tokens, dtype=np.float64)
        comm = k["comm_fixed"] + k["comm_per_token"] * tokens
        return self.step_overhead + self.seq_overhead * np.asarray(work.seqs) + comm

    def step_time(self, work: StepWork) -> Any:
        """Seconds of one step (vectorised over arrays of steps)."""
        c, m = self.compute_seconds(work), self.memory_seconds(work)
        u = 1.0 - self.overlap
        return np.maximum(c + u * m, m + u * c) + self.fixed_seconds(work)

    def prefill_time(self, new_tokens: ArrayLike, cached: ArrayLike = 0) -> Any:
        """A prefill-only step: FLOPs/(mfu F tp) + overhead once T is past the critical batch;
        short prompts are bounded below by streaming the weights."""
        return self.step_time(StepWork.prefill(new_tokens, cached))

    def decode_step_time(self, batch: ArrayLike, sum_context: ArrayLike) -> Any:
        """A decode-only step of ``batch`` sequences whose contexts sum to ``sum_context``."""
        return self.step_time(StepWork.decode(batch, sum_context))

    # -- scalar fast paths for the simulator (plain floats: no numpy call overhead) --
    def time_of(
        self, tokens: float, seqs: float, attn_pairs: float, kv_tokens: float, score_elems: float
    ) -> float:
        """Scalar ``step_time`` of one step given its aggregates."""
        k = self._k
        compute = (k["flop_per_token"] * tokens + k["flop_per_pair"] * attn_pairs) * k[
            "sec_per_flop"
        ]
        memory = (
            self._weights(tokens) + k["kv_bytes"] * kv_tokens + k["score_bytes"] * score_elems
        ) * k["sec_per_byte"]
        fixed = (
            self.step_overhead
            + self.seq_overhead * seqs
            + k["comm_fixed"]
            + k["comm_per_token"] * tokens
        )
        # max(c, m) + u * min(c, m) == max(c + u m, m + u c): still a max of two lines.
        u = 1.0 - self.overlap
        return max(compute + u * memory, memory + u * compute) + fixed

    def decode_lines(self, batch: int, sum_context: float) -> DecodeLines:
        """Closed form of a decode-only run: B fixed, every context grows by one per step."""
        k = self._k
        c1 = k["flop_per_pair"] * batch * k["sec_per_flop"]
        m1 = k["kv_bytes"] * batch * k["sec_per_byte"]
        c0 = (k["flop_per_token"] * batch + k["flop_per_pair"] * sum_context) * k["sec_per_flop"]
        m0 = (self._weights(float(batch)) + k["kv_bytes"] * sum_context) * k["sec_per_byte"]
        fixed = (self.step_overhead + self.seq_overhead * batch + k["comm_fixed"]) + k[
            "comm_per_token"
        ] * batch
        u = 1.0 - self.overlap
        if u:
            c0, c1, m0, m1 = c0 + u * m0, c1 + u * m1, m0 + u * c0, m1 + u * c1
        return DecodeLines(c0, c1, m0, m1, fixed)

    def params(self) -> dict[str, Any]:
        """The fitted/true parameters as plain data (for .truth.json and reports)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("model", "gpu")}
        out["model"] = self.model.name
        out["gpu"] = self.gpu.name
        out["compute_dtype"] = self.compute_dtype or compute_dtype_for(self.gpu, self.weight_dtype)
        return out
