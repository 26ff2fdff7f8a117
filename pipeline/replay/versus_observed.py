"""Observed vs replayed latency percentiles (metrics.md definitions, linear interpolation)."""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.replay.result import PERCENTILES, ReplayResult

METRICS = ("ttft_s", "tpot_s", "e2e_s")


def _pct(v: np.ndarray, q: float) -> float:
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if len(v) else float("nan")


def compare_with_observed(res: ReplayResult) -> pl.DataFrame | None:
    """One row per metric and percentile: observed, replayed, relative error; None when the
    workload has no observed latencies (an arrivals trace, or a scaled / truncated replay)."""
    obs = res.workload.observed
    if obs is None:
        return None
    replayed = res.metrics()
    rows = []
    for m in METRICS:
        o = obs[m].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        r = replayed[m][res.ok]
        for q in PERCENTILES:
            ov, rv = _pct(o, q), _pct(r, q)
            err = rv / ov - 1.0 if ov and np.isfinite(ov) and np.isfinite(rv) else float("nan")
            rows.append(
                {"metric": m[:-2], "percentile": f"p{q}", "observed_s": ov, "replayed_s": rv,
                 "error": err}
            )  # fmt: skip
    return pl.DataFrame(rows)
