"""Issue 14, point 7: one order for every chart's series. With a tie at the cut (rank 20), the
drawn series, the fit curves and the 'also show' menu must pick the same ones."""

from __future__ import annotations

import polars as pl

from pipeline.report.context import MAX_SERIES
from pipeline.report.sections.common import ranked, series_order, top_series


def _frame() -> pl.DataFrame:
    # 19 series with 100 requests, then 3 tied at 50: only one of the tied fits under 20.
    # Written in an order where the first-seen tied series is not the first by name.
    big = [f"s{i:02d}" for i in range(19)]
    tied = ["tie-c", "tie-a", "tie-b"]
    return pl.DataFrame({"series": tied + big, "requests": [50] * 3 + [100] * 19})


def test_a_tie_at_the_cut_is_broken_by_name_everywhere():
    df = _frame()
    order = series_order(df)
    assert order["series"].to_list()[MAX_SERIES - 1] == "tie-a"  # rank 20: the first by name
    drawn = set(top_series(df)["series"])
    assert len(drawn) == MAX_SERIES and "tie-a" in drawn and not drawn & {"tie-b", "tie-c"}
    r = ranked(df)
    assert set(r.filter(pl.col("rank") <= MAX_SERIES)["series"]) == drawn
    assert r.filter(pl.col("rank") > MAX_SERIES).sort("rank")["series"].to_list() == [
        "tie-b",
        "tie-c",
    ]
