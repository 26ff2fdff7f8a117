"""The engine's scheduler loop compiled with numba: the same policy, one compiled step at a time.

:mod:`pipeline.sim.engine` is the reference: its ``_step`` (with ``fast=False``) is mirrored here
operation for operation, so a simulation gives bit-identical results on either path (the tests
compare them on every scheduler mode). Why compile rather than keep the closed-form decode runs
in Python: at a million requests the Python loop's ~14 µs per event was the wall (issue 15),
while a compiled step costs well under a microsecond, so stepping one decode step at a time is
both simpler and faster than any closed form driven from Python.

Eligible cost models are the roofline :class:`~pipeline.physics.StepCost` and a
:class:`~pipeline.sim.cost.PhaseCost` of two of them: their ``time_of`` is a fixed formula of
fourteen constants (``_cost_row``). Other cost models (a fitted layer profile) and couplings
between servers (least-loaded routing, static batching) stay on the Python engine.

State is kept in flat int64 arrays: per request (``_R`` rows), a few scalars (``_S``), the FCFS
waiting queue as a ring buffer (a preempted request re-enters at the front), the running and
prefilling sets as doubly linked lists in admission order (the newest is the tail, the preemption
victim), and completions as a binary heap of (decode step it finishes at, segment, request) with
stale entries of preempted segments skipped when popped, as in the Python engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.physics import StepCost
from pipeline.sim.config import EngineConfig
from pipeline.sim.cost import PhaseCost
from pipeline.sim.result import F64, I64, SimResult

# Per-request rows of the state matrix.
P_EFF, DONE, EMIT, CJ, GJ, SEG, NPRE, PROMPT, OUT, CACHED = range(10)
RNX, RPV, PNX, PPV, IN_RUN, IN_PRE, IN_DEC = range(10, 17)
N_ROWS = 17
# Scalars: KV blocks used, decoders and their context aggregate, list heads/tails/counts, queue.
USED, B, A, RUNC, RUNH, RUNT, PREC, PREH, PRET, WH, WC, HN = range(12)
N_SCALARS = 12
# Configuration integers handed to the kernel.
C_SEQS, C_BUDGET, C_CHUNKED, C_PF_EFF, C_PF_RAW, C_CAP, C_BS, C_TOTAL, C_WM, C_PHASE = range(10)
STALLED = 1  # kernel error code: a step with nothing runnable
FULL = 2  # kernel code: a buffer is full; run again with larger ones


def _cost_row(c: StepCost) -> list[float]:
    """The constants of StepCost.time_of, in the order the kernel reads them."""
    k = c._k
    return [
        k["flop_per_token"], k["flop_per_pair"], k["sec_per_flop"], k["shared_weight_bytes"],
        k["expert_weight_bytes"], k["expert_miss"], k["kv_bytes"], k["score_bytes"],
        k["sec_per_byte"], c.step_overhead, c.seq_overhead, k["comm_fixed"],
        k["comm_per_token"], 1.0 - c.overlap,
    ]  # fmt: skip


def cost_table(cost: Any) -> tuple[F64, int] | None:
    """(constants, phase flag) for an eligible cost model, else None (use the Python engine)."""
    if type(cost) is StepCost:
        return np.array([_cost_row(cost)], dtype=np.float64), 0
    if type(cost) is PhaseCost and type(cost.prefill) is StepCost and type(cost.decode) is StepCost:
        return np.array([_cost_row(cost.prefill), _cost_row(cost.decode)], dtype=np.float64), 1
    return None


def eligible(cost: Any) -> bool:
    return cost_table(cost) is not None


def _config_ints(cfg: EngineConfig, phase: int) -> I64:
    pf_eff = cfg.prefill_first or not (cfg.chunked_prefill or cfg.mixed_prefill)
    vals = [
        cfg.max_num_seqs, cfg.max_batched_tokens, int(cfg.chunked_prefill), int(pf_eff),
        int(cfg.prefill_first), cfg.chunk_cap, cfg.block_size, cfg.total_blocks,
        cfg.watermark_blocks, phase,
    ]  # fmt: skip
    return np.array(vals, dtype=np.int64)


def initial_caps(n: int, output_tokens: int) -> I64:
    """Buffer sizes to start with: decode steps, logged steps, segments.

    Decode steps never exceed the output tokens (each emits at least one); the estimate is capped
    so that a long trace does not reserve memory it will not touch. Too small only costs a rerun.
    """
    dec = min(output_tokens, max(16 * n, 1 << 22)) + 16
    return np.array([dec, dec + 2 * n + 4096, 2 * n + 16], dtype=np.int64)


_KERNEL: Any = None


def _kernel() -> Any:
    """Compile (or load from numba's on-disk cache) on first use: importing stays cheap."""
    global _KERNEL
    if _KERNEL is None:
        from pipeline.sim import _kernel as k

        _KERNEL = k.run
    return _KERNEL


def run(
    arr: F64,
    order: I64,
    prompt: I64,
    out: I64,
    cached: I64,
    config: EngineConfig,
    cost: Any,
    *,
    record: bool = False,
) -> tuple[SimResult, dict[str, np.ndarray] | None]:
    """Simulate one server (``cached`` already clipped below the prompt); the step log when
    ``record`` (columns of :data:`pipeline.sim.cluster.STEP_COLUMNS`, in step order)."""
    table = cost_table(cost)
    if table is None:
        raise TypeError(f"{type(cost).__name__} has no compiled path; use the Python engine")
    params, phase = table
    a = np.ascontiguousarray(arr, dtype=np.float64)
    ints = [np.ascontiguousarray(x, dtype=np.int64) for x in (order, prompt, out, cached)]
    n = len(a)
    caps = initial_caps(n, int(np.sum(ints[2])))
    while True:
        res = _kernel()(*([a, *ints]), _config_ints(config, phase), params, record, caps)
        if res[0] != FULL:
            break
        caps *= 2
    (err, sched, first, fin, npre, dec_end, s_req, s_t0, s_g0, s_cnt, steps, busy, logf, logi) = res
    if err == STALLED:
        raise RuntimeError("scheduler stalled: nothing runnable (KV capacity too small?)")
    o = np.argsort(s_req, kind="stable")  # by request, time order kept within one
    result = SimResult(
        scheduled=sched,
        first_token=first,
        finish=fin,
        preemptions=npre,
        decode_step_end=dec_end,
        seg_request=s_req[o],
        seg_first_time=s_t0[o],
        seg_dec_start=s_g0[o],
        seg_dec_count=s_cnt[o],
        steps=int(steps),
        iterations=int(steps),  # one scheduler decision per step
        busy_time=float(busy),
    )
    log = None
    if record:
        log = {
            "t_start": logf[0],
            "t_end": logf[1],
            "seqs": logi[0],
            "prefill_tokens": logi[1],
            "decode_tokens": logi[2],
            "kv_blocks": logi[3],
        }
    return result, log
