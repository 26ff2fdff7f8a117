"""Exact Shapley values over a handful of factors, and the two-way (Oaxaca-Blinder) split.

The game: ``v(mask)`` is a metric predicted with the factors whose bit is set in ``mask`` at their
candidate values and the others at their baseline values (``v(0)`` = baseline, ``v(full)`` =
candidate). With k factors every one of the 2^k coalitions is evaluated once; the Shapley value
of factor i is the average over all orders of adding factors of i's marginal change:

    phi_i = sum over S not containing i of |S|! (k - |S| - 1)! / k! * (v(S + i) - v(S))

They are order-independent and sum exactly to v(full) - v(0) (efficiency). A factor whose value
is the same in both slices changes nothing (a null player) and gets exactly 0, so it is left out
of the game before evaluating: cost 2^(changed factors).
"""

from __future__ import annotations

from math import factorial

import numpy as np
from numpy.typing import NDArray


def masks(k: int) -> NDArray[np.int64]:
    return np.arange(1 << k, dtype=np.int64)


def shapley(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Shapley values from the game's value at every coalition.

    ``values`` has shape (2^k,) or (2^k, m) for m metrics at once; bit i of the row index says
    whether factor i is switched to the candidate. Returns shape (k,) or (k, m).
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.shape[0]
    k = n.bit_length() - 1
    if n != 1 << k:
        raise ValueError(f"need 2^k coalition values, got {n}")
    m = masks(k)
    size = np.array([bin(int(s)).count("1") for s in m])
    weight = np.array([factorial(int(s)) * factorial(k - int(s) - 1) for s in range(k)], float)
    weight /= factorial(k) if k else 1.0
    out = np.zeros((k, *v.shape[1:]))
    for i in range(k):
        bit = 1 << i
        without = m[(m & bit) == 0]
        marg = v[without | bit] - v[without]
        w = weight[size[without]]
        out[i] = np.tensordot(w, marg, axes=(0, 0))
    return out


def two_way(values: NDArray[np.float64], block: NDArray[np.bool_]) -> dict[str, NDArray]:
    """Oaxaca-Blinder two-fold split of v(full) - v(0) between a block of factors and the rest.

    ``block[i]`` marks factor i as part of the first block (the workload). The block's effect is
    measured with the rest held at the baseline (``at_baseline``) and at the candidate
    (``at_candidate``); the symmetric split averages the two (the two-player Shapley value), so
    ``block + rest`` is exactly the total. ``interaction`` is their difference.
    """
    v = np.asarray(values, dtype=np.float64)
    k = v.shape[0].bit_length() - 1
    bmask = sum(1 << i for i in range(k) if block[i])
    full = (1 << k) - 1
    rest = full & ~bmask
    at_base = v[bmask] - v[0]
    at_cand = v[full] - v[rest]
    sym = 0.5 * (at_base + at_cand)
    return {
        "block": sym,
        "rest": (v[full] - v[0]) - sym,
        "block_at_baseline": at_base,
        "block_at_candidate": at_cand,
        "interaction": at_cand - at_base,
    }
