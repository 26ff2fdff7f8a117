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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.catalog import Model
from pipeline.physics import kv_bytes_per_token
from pipeline.sim.cluster import Pool, PoolResult, simulate_pool
from pipeline.sim.config import EngineConfig


@dataclass
class DisaggregatedResult:
    prefill: PoolResult
    decode: PoolResult
    decoded: NDArray[np.int64]  # global indices the decode pool served (output > 1)
    first_token: NDArray[np.float64]  # from the prefill pool
    finish: NDArray[np.float64]  # from the decode pool (the prefill pool's for one token)
    single: NDArray[np.int64]  # global indices of at most one output token (prefill pool only)

    @property
    def scheduled(self) -> NDArray[np.float64]:
        return self.prefill.scheduled

    def token_chunks(
        self, output: NDArray, chunk: int = 20_000
    ) -> Iterator[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]]:
        """(global indices, CSR offsets, emission times) in bounded chunks: each decode server's
        requests (the first token from the prefill pool, the rest from the decode server), then
        the requests of at most one token. Replay's write-back and generate read tokens here."""
        pre, dec = self.prefill, self.decode
        for k, ids in enumerate(dec.ids):
            for lo in range(0, len(ids), chunk):
                hi = min(lo + chunk, len(ids))
                offs, times = dec.servers[k].token_times(lo, hi)
                g = ids[lo:hi]
                new_offs = np.concatenate(([0], np.cumsum(np.diff(offs) + 1)))
                out = np.empty(int(new_offs[-1]))
                head = new_offs[:-1]
                mask = np.ones(len(out), dtype=bool)
                mask[head] = False
                out[head] = pre.first_token[g]
                out[mask] = times
                yield g, new_offs, out
        for lo in range(0, len(self.single), chunk):
            g = self.single[lo : lo + chunk]
            counts = (output[g] >= 1).astype(np.int64)
            offs = np.concatenate(([0], np.cumsum(counts)))
            yield g, offs, pre.first_token[g][counts == 1]


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
    return DisaggregatedResult(rp, rd, d_idx, first, fin, idx[output[idx] <= 1])


def pull_seconds(
    model: Model, kv_dtype: str, prompt: NDArray, bandwidth: float, latency_s: float
) -> NDArray[np.float64]:
    """Seconds a decode instance spends pulling each prompt's KV: a fixed latency per transfer
    plus the prompt's KV bytes over the link's achieved ``bandwidth`` (bytes/s). Calibration,
    generate and replay price a pull with this one rule."""
    per_token = kv_bytes_per_token(model, kv_dtype)
    return latency_s + per_token * np.asarray(prompt) / bandwidth


def distserve_configs(
    disagg: dict[str, Any],
    prefill_kv: int,
    decode_kv: int,
    longest_prompt: int,
    longest: int,
    max_num_seqs: int | None = None,
    max_batched_tokens: int | None = None,
) -> tuple[EngineConfig, EngineConfig]:
    """The two instances' schedulers of a DistServe deployment described by ``disagg`` (a run
    manifest's [disaggregation] keys): the prefill instance batches whole prompts in steps of
    their own; the decode instance batches continuously. Each instance's limits as the keys
    record them (DistServe's --context-* and --decoding-* flags), else the deployment's, else
    DistServe's api_server defaults."""
    prefill = EngineConfig(
        kv_capacity_tokens=max(prefill_kv, longest_prompt + 16),
        max_num_seqs=int(disagg.get("prefill_max_num_seqs", max_num_seqs or 256)),
        max_batched_tokens=max(
            int(disagg.get("prefill_max_batched_tokens", max_batched_tokens or 4096)),
            longest_prompt,
        ),
        chunked_prefill=False,
        mixed_prefill=False,
    )
    decode = EngineConfig(
        kv_capacity_tokens=max(decode_kv, longest + 16),
        max_num_seqs=int(disagg.get("decode_max_num_seqs", max_num_seqs or 256)),
        max_batched_tokens=max(
            int(disagg.get("decode_max_batched_tokens", max_batched_tokens or 8192)), 256
        ),
        chunked_prefill=True,
    )
    return prefill, decode
