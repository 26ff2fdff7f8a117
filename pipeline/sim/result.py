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
        belong to request ``lo + i``. Built with numpy gathers, no loop per token or request."""
        hi = self.n_requests if hi is None else hi
        a, b = np.searchsorted(self.seg_request, [lo, hi])
        req = self.seg_request[a:b]
        lengths = self.seg_dec_count[a:b] + 1
        seg_start = np.concatenate(([0], np.cumsum(lengths)))
        total = int(seg_start[-1])
        pos = np.arange(total) - np.repeat(seg_start[:-1], lengths)  # position within segment
        # padded[j + 1] is decode step j; position p >= 1 of a segment is decode step start + p - 1.
        padded = np.concatenate(([np.nan], self.decode_step_end))
        times = padded[np.repeat(self.seg_dec_start[a:b], lengths) + pos]
        times = np.where(pos == 0, np.repeat(self.seg_first_time[a:b], lengths), times)
        per_request = np.bincount(req - lo, weights=lengths, minlength=hi - lo).astype(np.int64)
        offsets = np.concatenate(([0], np.cumsum(per_request)))
        return offsets, times
