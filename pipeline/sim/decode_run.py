"""Closed-form timing of a run of identical decode-only steps.

Between arrivals and completions the batch is fixed and every context grows by one token per
step, so step k of the run takes d(k) = max(c0 + c1*k, m0 + m1*k) + fixed: the max of two lines,
which cross at most once. Sums of d over any range are therefore two arithmetic series, and the
number of steps that start before a deadline is found by bisection on that O(1) sum.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from pipeline.physics import DecodeLines


def _series(a: float, b: float, k1: int, k2: int) -> float:
    """sum of a + b*k for k in [k1, k2)."""
    if k2 <= k1:
        return 0.0
    return (k2 - k1) * a + b * (k2 * (k2 - 1) - k1 * (k1 - 1)) / 2.0


def _switch(lines: DecodeLines) -> tuple[int, bool]:
    """(s, compute_first): which line is on top for k < s, the other for k >= s."""
    c0, c1, m0, m1, _ = lines
    if c1 == m1:
        return (0, False) if m0 >= c0 else (0, True)
    x = (m0 - c0) / (c1 - m1)  # where the lines meet
    if c1 > m1:  # compute line overtakes memory after x
        return max(0, math.ceil(x)), False
    return max(0, math.ceil(x)), True  # memory line overtakes after x


def run_duration(lines: DecodeLines, j: int) -> float:
    """Seconds taken by the first ``j`` steps of the run."""
    c0, c1, m0, m1, fixed = lines
    s, compute_first = _switch(lines)
    s = min(s, j)
    first, second = ((c0, c1), (m0, m1)) if compute_first else ((m0, m1), (c0, c1))
    return _series(*first, 0, s) + _series(*second, s, j) + fixed * j


def steps_starting_before(lines: DecodeLines, budget: float, limit: int) -> int:
    """How many of the first ``limit`` steps start less than ``budget`` seconds into the run."""
    if budget <= 0.0:
        return 0
    if run_duration(lines, limit - 1) < budget:
        return limit
    lo, hi = 0, limit - 1  # step lo starts before the deadline, step hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run_duration(lines, mid) < budget:
            lo = mid
        else:
            hi = mid
    return hi


def step_ends(lines: DecodeLines, start: float, n: int) -> NDArray[np.float64]:
    """End times of the run's first ``n`` steps (accumulated step by step, as a clock would)."""
    c0, c1, m0, m1, fixed = lines
    k = np.arange(n, dtype=np.float64)
    durations = np.maximum(c0 + c1 * k, m0 + m1 * k) + fixed
    durations[0] += start
    return np.cumsum(durations)
