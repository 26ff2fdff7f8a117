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


LOOP_STEPS = 48  # runs up to this long are stepped in plain Python (numpy's call overhead is more)


def run_ends(lines: DecodeLines, start: float, limit: int, budget: float = math.inf) -> list[float]:
    """End times of the run's first ``limit`` steps that start less than ``budget`` seconds into
    it: the same floats as ``step_ends(lines, start, steps_starting_before(lines, budget, limit))``.

    Short runs are accumulated in a Python loop (the operations and rounding of
    :func:`step_ends`), and the loop's own clock tells where the deadline falls. That clock and
    the closed form differ by rounding only, bounded by ``tol``: when a step starts within
    ``tol`` of the deadline, or the run is long, the closed-form bisection decides as before.
    """
    if budget <= 0.0:
        return []
    c0, c1, m0, m1, fixed = lines
    # Steps only lengthen along a run, so at most budget / (first step) + 1 start in time.
    first = (c0 if c0 >= m0 else m0) + fixed
    if limit <= LOOP_STEPS or budget < first * (LOOP_STEPS - 1):
        n = limit if limit < LOOP_STEPS else LOOP_STEPS
        ends: list[float] = []
        e = start
        # No deadline (budget inf): nothing to be close to; keeps inf - inf out of the tests.
        scale = 1e-15 * (abs(start) + (abs(budget) if budget != math.inf else 0.0) + 1.0)
        for k in range(n):
            if k:  # step k starts at e
                rel, tol = e - start, scale * (k + 16)
                if rel >= budget + tol:
                    return ends  # clearly after the deadline (and step k - 1 clearly before)
                if rel > budget - tol:
                    break  # too close to call here
            kf = float(k)
            a, b = c0 + c1 * kf, m0 + m1 * kf
            e = e + ((a if a >= b else b) + fixed)
            ends.append(e)
        else:
            if n == limit:
                return ends
    j = limit if budget == math.inf else steps_starting_before(lines, budget, limit)
    return step_ends(lines, start, j).tolist()
