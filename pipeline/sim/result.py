"""What a simulation returns, and vectorised per-token emission times.

A request emits tokens in *segments*: a segment starts with the token produced by the step that
finished its prefill (time ``first_time``) and continues with one token at the end of each of the
next ``dec_count`` decode steps it ran in. A running request takes part in every decode step, so
those are consecutive entries ``decode_step_end[dec_start : dec_start + dec_count]``. A request
that was never preempted has one segment; each preemption (recompute) starts another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


@dataclass(frozen=True)
class SimResult:
    """Per-request outcome (seconds on the simulation clock; NaN where it never happened)."""

    scheduled: F64  # start of the first step that gave the request compute
    first_token: F64  # end of the step that finished its prefill
    finish: F64  # end of the step that emitted its last token
    preemptions: I64  # times it was preempted and recomputed
    decode_step_end: F64  # end time of every step that ran decodes, in order
    seg_request: I64  # segments, sorted by request then time
    seg_first_time: F64
    seg_dec_start: I64
    seg_dec_count: I64
    steps: int  # engine steps simulated
    iterations: int  # scheduler decisions made in Python (single steps or closed-form runs)
    busy_time: float  # seconds the engine was running a step

    @property
    def n_requests(self) -> int:
        return len(self.finish)

    def token_times(self, lo: int = 0, hi: int | None = None) -> tuple[I64, F64]:
        """Emission times of requests ``lo..hi-1`` as CSR: ``times[offsets[i]:offsets[i+1]]``
        belong to request ``lo + i``. Filled by a compiled loop over segments."""
        hi = self.n_requests if hi is None else hi
        a, b = np.searchsorted(self.seg_request, [lo, hi])
        lengths = self.seg_dec_count[a:b] + 1
        per_request = np.bincount(self.seg_request[a:b] - lo, weights=lengths, minlength=hi - lo)
        offsets = np.concatenate(([0], np.cumsum(per_request.astype(np.int64))))
        times = np.empty(int(offsets[-1]))
        _fill_times(
            self.seg_first_time[a:b], self.seg_dec_start[a:b], self.seg_dec_count[a:b],
            self.decode_step_end, times,
        )  # fmt: skip
        return offsets, times


@njit(cache=True, nogil=True)  # the write-back's Parquet thread runs meanwhile
def _fill_times(first: F64, dec_start: I64, dec_count: I64, step_end: F64, out: F64) -> None:
    # One pass in segment order (= request then time order). The numpy version needed an
    # index array per token and a copy of every decode-step end per chunk: 2.8 s of the 5.1 s
    # write-back of 200,000 replayed requests; this loop writes each time once.
    k = 0
    for s in range(len(first)):
        out[k] = first[s]
        k += 1
        d = dec_start[s]
        for j in range(dec_count[s]):
            out[k] = step_end[d + j]
            k += 1


def since(times: F64, offsets: I64, base: F64) -> F64:
    """``times`` made relative to each row's ``base`` (an arrival), in place: row ``i`` is
    ``times[offsets[i]:offsets[i + 1]]``. Same values as ``times - np.repeat(base, lengths)``
    without the repeated array: at a million replayed requests that was 2.4 GB of fresh memory
    whose first touch (page zeroing) cost more than the subtraction."""
    _since(times, np.ascontiguousarray(offsets, dtype=np.int64), np.asarray(base, np.float64))
    return times


@njit(cache=True, nogil=True)
def _since(times: F64, offsets: I64, base: F64) -> None:
    for i in range(len(base)):
        b = base[i]
        for k in range(offsets[i], offsets[i + 1]):
            times[k] -= b
