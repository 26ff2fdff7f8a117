"""One definition of TTFT / TPOT / E2E (docs/metrics.md), used by ingest, replay, attribution."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from pipeline.attribution.counterfactual import sim_metrics
from pipeline.schema.latency import latencies, tpot_expr


def test_hand_worked_requests():
    arrival = np.array([0.0, 1.0, 2.0])
    first = np.array([0.5, 1.2, 2.1])
    finish = np.array([2.5, 1.2, 3.1])
    out = np.array([5, 1, 3])
    lat = latencies(arrival, first, finish, out)
    assert lat["ttft_s"].tolist() == [0.5, 0.19999999999999996, 0.10000000000000009]
    # (2.5 - 0.5) / 4 = 0.5; one token: no TPOT (NaN, never 0); (3.1 - 2.1) / 2 = 0.5
    assert lat["tpot_s"][0] == 0.5 and math.isnan(lat["tpot_s"][1])
    assert abs(lat["tpot_s"][2] - 0.5) < 1e-12
    assert lat["e2e_s"].tolist() == [2.5, 0.19999999999999996, 1.1]
    df = pl.DataFrame({"f": first, "e": finish, "o": out})
    polars = df.select(tpot_expr(pl.col("f"), pl.col("e"), pl.col("o"))).to_series().to_list()
    assert polars[0] == 0.5 and polars[1] is None and abs(polars[2] - 0.5) < 1e-12
    # The counterfactuals' metrics average the same TPOTs (the one-token request left out).
    ttft_mean, _p90, tpot_mean, _thr = sim_metrics(arrival, out, first, finish)
    assert abs(ttft_mean - 0.8 / 3) < 1e-12 and abs(tpot_mean - 0.5) < 1e-12
