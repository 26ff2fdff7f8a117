"""Simulated requests as request-record columns: one builder for `generate`'s JSON lines
(pipeline/sim/writer.py) and `replay`'s warehouse rows (pipeline/replay/write.py), so the two
cannot drift apart (they did: one filled NaN timestamps with null, the other only the first
token's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

TIMES = ("arrival_ts", "scheduled_ts", "first_token_ts", "finish_ts")


def request_frame(
    request_id: Sequence[str],
    metadata: dict[str, Any],
    *,
    prompt: np.ndarray,
    cached: np.ndarray,
    output: np.ndarray,
    clock: str,
    t0: float,
    arrival: np.ndarray,
    scheduled: np.ndarray,
    first_token: np.ndarray,
    finish: np.ndarray,
    server: Sequence[str | None] | None = None,
    status: np.ndarray | None = None,
    error: np.ndarray | None = None,
    source_line: np.ndarray | None = None,
    digits: int | None = None,
) -> pl.DataFrame:
    """One row per request: id, (server), the run's metadata, lengths, the clock and the four
    timestamps (``t0`` + the simulation's seconds, NaN -> null: a request that produced no token
    has no first token), status ('ok' unless given), then error and source line when given.
    ``digits``: round the timestamps (JSON output: 6, microseconds, is finer than any real log)."""
    n = len(request_id)
    cols: dict[str, Any] = {"request_id": list(request_id)}
    if server is not None:
        cols["server"] = list(server)
    for key, value in metadata.items():
        cols[key] = pl.Series(key, [value] * n)
    times = (arrival, scheduled, first_token, finish)
    cols |= {
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "output_tokens": output,
        "clock": [clock] * n,
    }
    for name, x in zip(TIMES, times, strict=True):
        ts = t0 + np.asarray(x, dtype=np.float64)
        cols[name] = np.round(ts, digits) if digits is not None else ts
    cols["status"] = ["ok"] * n if status is None else status
    if error is not None:
        cols["error"] = error
    if source_line is not None:
        cols["source_line"] = source_line
    return pl.DataFrame(cols).with_columns([pl.col(c).fill_nan(None) for c in TIMES[1:]])
