"""Prefill/decode disaggregation: one simulation for `pipeline fit` (a recorded DistServe
deployment) and `pipeline replay` (a what-if), so the two cannot drift apart.

A request is prefilled on a prefill pool, whose step emits its first token. A decode pool then
admits it with the prompt cached: the prompt's KV is pulled inside the step that admits it
(``pull_seconds``, engine.simulate's ``load_seconds``), which holds up that step's whole batch,
as DistServe's decode loop awaits each migration before its next step. That step computes the
first token's KV and emits the second token; the request then decodes with the others. A
request with one output token never reaches the decode pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pipeline.sim.cluster import Pool, PoolResult, simulate_pool


@dataclass
class DisaggregatedResult:
    prefill: PoolResult
    decode: PoolResult
    decoded: NDArray[np.int64]  # global indices the decode pool served (output > 1)
    first_token: NDArray[np.float64]  # from the prefill pool
    finish: NDArray[np.float64]  # from the decode pool (the prefill pool's for one token)


def simulate_disaggregated(
    arrival: NDArray,
    prompt: NDArray,
    output: NDArray,
    prefill: Pool,
    decode: Pool,
    pull_seconds: NDArray,
    cached: NDArray | None = None,
    *,
    subset: NDArray | None = None,
    fast: bool = True,
    record_steps: bool = False,
) -> DisaggregatedResult:
    """Simulate ``subset`` (global indices, default all) on the two pools."""
    arrival = np.asarray(arrival, dtype=np.float64)
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    idx = np.arange(len(arrival)) if subset is None else np.asarray(subset, dtype=np.int64)
    rp = simulate_pool(
        arrival, prompt, np.minimum(output, 1), prefill, cached,
        fast=fast, record_steps=record_steps, subset=idx,
    )  # fmt: skip
    first = rp.first_token
    d_arr = np.where(np.isfinite(first), first, 0.0)  # (0 only outside the subset)
    d_idx = idx[output[idx] > 1]
    rd = simulate_pool(
        d_arr, prompt + 1, output - 1, decode, prompt, load=np.asarray(pull_seconds, np.float64),
        fast=fast, record_steps=record_steps, subset=d_idx,
    )  # fmt: skip
    fin = rp.finish.copy()
    fin[d_idx] = rd.finish[d_idx]
    return DisaggregatedResult(rp, rd, d_idx, first, fin)
