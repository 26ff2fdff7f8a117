"""TTFT, TPOT and E2E as docs/metrics.md defines them: one definition for the warehouse (Polars,
at ingest), the replay and the attribution's counterfactuals (numpy).

* TTFT = first token - arrival; E2E = finish - arrival.
* TPOT = (finish - first token) / (output tokens - 1), only for requests with more than one
  output token (a one-token request has no inter-token time: NaN / null, never 0).
"""

from __future__ import annotations

import numpy as np
import polars as pl


def tpot_expr(first: pl.Expr, finish: pl.Expr, output_tokens: pl.Expr) -> pl.Expr:
    """TPOT of each row; null where output_tokens <= 1."""
    return pl.when(output_tokens > 1).then((finish - first) / (output_tokens - 1))


def latencies(
    arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, output_tokens: np.ndarray
) -> dict[str, np.ndarray]:
    """ttft_s, tpot_s (NaN for one-token requests) and e2e_s of arrays of requests."""
    out = np.asarray(output_tokens, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    return {"ttft_s": first - arrival, "tpot_s": tpot, "e2e_s": finish - arrival}
