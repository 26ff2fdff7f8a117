"""Helpers the section builders share: series labels and keeping charts to a few series."""

from __future__ import annotations

import altair as alt
import polars as pl

from pipeline.report.context import MAX_SERIES


def label_expr(with_deployment: bool = False) -> pl.Expr:
    """'model · GPU' (and '×n' GPUs, dtype when not bf16) as one series name."""
    parts = [pl.col("model"), pl.lit(" · "), pl.col("gpu")]
    if with_deployment:
        parts += [
            pl.when(pl.col("gpu_count") > 1)
            .then(pl.lit(" ×") + pl.col("gpu_count").cast(pl.Utf8))
            .otherwise(pl.lit("")),
            pl.when(pl.col("weight_dtype") != "bf16")
            .then(pl.lit(" ") + pl.col("weight_dtype"))
            .otherwise(pl.lit("")),
        ]
    return pl.concat_str(parts).alias("series")


def series_order(df: pl.DataFrame, weight: str = "requests") -> pl.DataFrame:
    """``series`` and ``rank`` (1 = the most ``weight``; ties by name), the one order every
    chart draws, lists and offers series in, so a tie at the cut picks the same series in all."""
    return (
        df.group_by("series")
        .agg(pl.col(weight).sum())
        .sort([weight, "series"], descending=[True, False])
        .with_row_index("rank", offset=1)
        .select("series", pl.col("rank").cast(pl.Int64))
    )


def top_series(df: pl.DataFrame, weight: str = "requests", n: int = MAX_SERIES) -> pl.DataFrame:
    """Rows of the ``n`` series with the most ``weight`` (charts stay readable)."""
    if df.is_empty() or df["series"].n_unique() <= n:
        return df
    keep = series_order(df, weight).head(n)["series"]
    return df.filter(pl.col("series").is_in(keep.implode()))


MAX_SELECTABLE = 300  # series a chart's "also show" menu offers beyond the drawn ones


def ranked(df: pl.DataFrame, weight: str = "requests") -> pl.DataFrame:
    """``df`` with ``rank`` (1 = the series with the most ``weight``), keeping the drawn series
    and up to MAX_SELECTABLE more for :func:`with_selector`'s menu."""
    out = df.join(series_order(df, weight), on="series")
    return out.filter(pl.col("rank") <= MAX_SERIES + MAX_SELECTABLE)


def with_selector(chart: alt.Chart, df: pl.DataFrame, name: str) -> alt.Chart:
    """Draw the MAX_SERIES largest series; beyond that, a menu adds any one other series
    (Vega-Lite parameter bound to a select, filtered in the page, nothing fetched)."""
    extra = (
        df.filter(pl.col("rank") > MAX_SERIES)
        .select("series", "rank")
        .unique()
        .sort("rank")["series"]
        .to_list()
    )
    if not extra:
        return chart
    none = "(none)"
    pick = alt.param(
        name=name,
        value=none,
        bind=alt.binding_select(options=[none, *extra], name="also show "),
    )
    return chart.add_params(pick).transform_filter(
        f"datum.rank <= {MAX_SERIES} || datum.series == {name}"
    )


def dropped_note(df: pl.DataFrame, shown: pl.DataFrame, menu: bool = False) -> str:
    extra = df["series"].n_unique() - shown["series"].n_unique() if not df.is_empty() else 0
    if extra <= 0:
        return ""
    how = " (the 'also show' menu under the chart draws any one of them)" if menu else ""
    return f" {extra} smaller series not drawn{how}."
