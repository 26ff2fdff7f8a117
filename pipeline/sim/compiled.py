"""The engine's scheduler loop compiled with numba: the same policy, one compiled step at a time.

:mod:`pipeline.sim.engine` is the reference: its ``_step`` (with ``fast=False``) is mirrored here
operation for operation, so a simulation gives bit-identical results on either path (the tests
compare them on every scheduler mode). Why compile rather than keep the closed-form decode runs
in Python: at a million requests the Python loop's ~14 µs per event was the wall (issue 15),
while a compiled step costs well under a microsecond, so stepping one decode step at a time is
both simpler and faster than any closed form driven from Python.

Eligible cost models are the roofline :class:`~pipeline.physics.StepCost` and a
:class:`~pipeline.sim.cost.PhaseCost` of two of them: their ``time_of`` is a fixed formula of
fourteen constants (``_cost_row``). Other cost models (a fitted layer profile) and static
batching stay on the Python engine. A pool of servers runs in one kernel call: round robin
simulates each server's share in turn; least-loaded routing advances every server to each
arrival (as :class:`pipeline.sim.cluster.ReplicaEngine` does) and counts its outstanding
requests from the number finished and those finished in the step under way.

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
# Per-server integers: KV blocks used, decoders and their context aggregate, list heads/tails/
# counts, queue, heap size; decode steps, steps, segments, logged steps; requests routed here and
# not yet queued (a list through ``link``: head, tail), routed, finished, finished at the last
# finish time.
USED, B, A, RUNC, RUNH, RUNT, PREC, PREH, PRET, WH, WC, HN = range(12)
S_G, S_STEPS, S_NSEG, S_NLOG, QH, QT, S_ROUTED, S_NFIN, S_NLAST = range(12, 21)
N_STATE = 21
# Per-server floats: clock, busy time, time of the last finish.
F_T, F_BUSY, F_LAST = range(3)
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


def initial_caps(n: int, output_tokens: int, servers: int = 1) -> I64:
    """Buffer sizes per server to start with: decode steps, logged steps, segments, waiting queue.

    Decode steps never exceed the output tokens (each emits at least one); the estimate is capped
    so that a long trace does not reserve memory it will not touch. Too small only costs a rerun.
    A lone server's queue holds every request; a pool's servers get twice an even share.
    """
    share = -(-n // servers)
    dec = min(output_tokens, max(16 * share, (1 << 22) // servers)) + 16
    queue = n if servers == 1 else min(n, 2 * share + 1024)
    return np.array([dec, dec + 2 * share + 4096, 2 * share + 16, queue], dtype=np.int64)


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
    load: F64 | None = None,
) -> tuple[SimResult, dict[str, np.ndarray] | None]:
    """Simulate one server (``cached`` already clipped below the prompt); results indexed by
    request, and the step log when ``record`` (columns of
    :data:`pipeline.sim.cluster.STEP_COLUMNS`, in step order). ``load``: engine.simulate's
    ``load_seconds``."""
    raw = _simulate(arr, order, prompt, out, cached, 1, False, config, cost, record, load)
    return _server(raw, 0, np.arange(len(arr)), record)


def run_pool(
    arr: F64,
    order: I64,
    prompt: I64,
    out: I64,
    cached: I64,
    servers: int,
    least_loaded: bool,
    config: EngineConfig,
    cost: Any,
    *,
    record: bool = False,
    load: F64 | None = None,
) -> tuple[I64, list[tuple[I64, SimResult, dict[str, np.ndarray] | None]]]:
    """Route ``order`` (arrival order) to ``servers`` servers, round robin or to the fewest
    outstanding requests at arrival, and simulate them. Returns each request's server (-1 when
    not in ``order``) and per server: the requests it got (arrival order, i.e. local index ->
    request), its SimResult indexed locally, and its step log."""
    raw = _simulate(
        arr, order, prompt, out, cached, servers, least_loaded, config, cost, record, load
    )
    route = raw[1]
    on = route[order]
    per = []
    for j in range(servers):
        ids = order[on == j].astype(np.int64)
        res, log = _server(raw, j, ids, record)
        per.append((ids, res, log))
    return route, per


def _simulate(
    arr: F64, order: I64, prompt: I64, out: I64, cached: I64, servers: int, least_loaded: bool,
    config: EngineConfig, cost: Any, record: bool, load: F64 | None,
) -> tuple:  # fmt: skip
    table = cost_table(cost)
    if table is None:
        raise TypeError(f"{type(cost).__name__} has no compiled path; use the Python engine")
    params, phase = table
    a = np.ascontiguousarray(arr, dtype=np.float64)
    ints = [np.ascontiguousarray(x, dtype=np.int64) for x in (order, prompt, out, cached)]
    ld = np.zeros(len(a)) if load is None else np.ascontiguousarray(load, dtype=np.float64)
    caps = initial_caps(len(ints[0]), int(np.sum(ints[2][ints[0]])), servers)
    cf = _config_ints(config, phase)
    while True:
        raw = _kernel()(*([a, *ints]), ld, servers, least_loaded, cf, params, record, caps)
        if raw[0] != FULL:
            break
        caps *= 2
    if raw[0] == STALLED:
        raise RuntimeError("scheduler stalled: nothing runnable (KV capacity too small?)")
    return raw


def _server(
    raw: tuple, j: int, ids: I64, record: bool
) -> tuple[SimResult, dict[str, np.ndarray] | None]:
    """Server j's SimResult over its requests ``ids`` (copies: the buffers are dropped after)."""
    _, _, sched, first, fin, npre, st, sf, dec_end, segi, segf, logf, logi = raw
    G, nseg, nlog = st[j, S_G], st[j, S_NSEG], st[j, S_NLOG]
    pos = np.empty(len(sched), dtype=np.int64)
    pos[ids] = np.arange(len(ids))
    s_req = pos[segi[j, 0, :nseg]]
    o = np.argsort(s_req, kind="stable")  # by request, time order kept within one
    result = SimResult(
        scheduled=sched[ids],
        first_token=first[ids],
        finish=fin[ids],
        preemptions=npre[ids],
        decode_step_end=dec_end[j, :G].copy(),
        seg_request=s_req[o],
        seg_first_time=segf[j, :nseg][o],
        seg_dec_start=segi[j, 1, :nseg][o],
        seg_dec_count=segi[j, 2, :nseg][o],
        steps=int(st[j, S_STEPS]),
        iterations=int(st[j, S_STEPS]),  # one scheduler decision per step
        busy_time=float(sf[j, F_BUSY]),
    )
    log = None
    if record:
        log = {
            "t_start": logf[j, 0, :nlog].copy(),
            "t_end": logf[j, 1, :nlog].copy(),
            "seqs": logi[j, 0, :nlog].copy(),
            "prefill_tokens": logi[j, 1, :nlog].copy(),
            "decode_tokens": logi[j, 2, :nlog].copy(),
            "kv_blocks": logi[j, 3, :nlog].copy(),
        }
    return result, log
