"""Synthetic request streams: arrival processes and prompt/output length distributions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

ARRIVALS = ("poisson", "bursty")


@dataclass(frozen=True)
class SyntheticWorkload:
    """What users send. Lengths are lognormal (median, sigma of the log), clipped to the model.

    Defaults follow chat traces (ShareGPT-like): prompts with median 800 tokens and a heavy tail,
    outputs with median 180. ``bursty`` arrivals are a gamma renewal process with coefficient of
    variation ``burst_cv`` > 1 (Poisson has CV = 1), so requests come in clumps at the same rate.
    """

    requests: int
    rate: float  # mean requests per second
    arrivals: str = "poisson"
    burst_cv: float = 3.0
    prompt_median: float = 800.0
    prompt_sigma: float = 0.9
    output_median: float = 180.0
    output_sigma: float = 0.9
    min_prompt: int = 8
    max_output: int = 4096

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {ARRIVALS}, got {self.arrivals!r}")
        if self.requests < 1 or self.rate <= 0:
            raise ValueError("requests must be >= 1 and rate > 0")
        if self.arrivals == "bursty" and self.burst_cv <= 1:
            raise ValueError("bursty arrivals need burst_cv > 1")

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        if self.arrivals == "poisson":
            del out["burst_cv"]
        return out


def inter_arrivals(w: SyntheticWorkload, rng: np.random.Generator) -> NDArray[np.float64]:
    """Gaps between requests (s): exponential (Poisson) or gamma with CV = burst_cv."""
    mean = 1.0 / w.rate
    if w.arrivals == "poisson":
        return rng.exponential(mean, w.requests)
    shape = 1.0 / w.burst_cv**2  # gamma CV = 1/sqrt(shape)
    return rng.gamma(shape, mean / shape, w.requests)


def lengths(
    w: SyntheticWorkload, rng: np.random.Generator, max_context: int, max_total: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Prompt and output tokens: prompt + output <= max_context and prompt + output - 1 <=
    max_total (what one sequence may hold in KV / in one un-chunked prefill)."""
    limit = min(max_context, max_total + 1)
    hi_prompt = max(limit - 1, 1)
    prompt = np.exp(rng.normal(np.log(w.prompt_median), w.prompt_sigma, w.requests))
    prompt = np.clip(np.rint(prompt), min(w.min_prompt, hi_prompt), hi_prompt).astype(np.int64)
    output = np.exp(rng.normal(np.log(w.output_median), w.output_sigma, w.requests))
    output = np.clip(np.rint(output), 1, w.max_output).astype(np.int64)
    output = np.minimum(output, limit - prompt)
    return prompt, output
