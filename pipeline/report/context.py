"""What every section builder gets: the period's data (DuckDB), the comparison period, options.

The period is applied once, here: a schema ``period`` holds filtered views named like the
warehouse's (``requests``, ``tokens``, ``arrivals``, ``runs``) and the connection's search path
puts it first, so the named queries in ``queries/`` run unchanged on the period's rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import duckdb
import polars as pl

from pipeline.query.named import load, run_named
from pipeline.report.html import esc
from pipeline.report.period import Period
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

MAX_POINTS = 5000  # data rows any one chart may embed
MAX_SERIES = 12  # model x GPU series drawn per chart (the largest by requests)


def _ts(t: dt.datetime) -> str:
    return "TIMESTAMPTZ '" + t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00") + "'"


def _where(period: Period) -> str:
    parts = []
    if period.start is not None:
        parts += [f"arrival_at >= {_ts(period.start)}", f"day >= '{period.start:%Y-%m-%d}'"]
    if period.end is not None:
        parts += [f"arrival_at < {_ts(period.end)}", f"day <= '{period.end:%Y-%m-%d}'"]
    return " AND ".join(parts) or "TRUE"


def open_period(layout: Layout, period: Period | None) -> duckdb.DuckDBPyConnection:
    """A connection whose ``requests`` / ``tokens`` / ``arrivals`` / ``runs`` hold the period."""
    con = connect(layout)
    if period is None or (period.start is None and period.end is None):
        return con
    w = _where(period)
    con.execute("CREATE SCHEMA period")
    con.execute(f"CREATE VIEW period.requests AS SELECT * FROM main.requests WHERE {w}")
    con.execute(
        "CREATE VIEW period.tokens AS SELECT t.* FROM main.tokens AS t "
        "WHERE (t.run_id, t.request_id) IN (SELECT run_id, request_id FROM period.requests)"
    )
    con.execute(f"CREATE VIEW period.arrivals AS SELECT * FROM main.arrivals WHERE {w}")
    con.execute(
        "CREATE VIEW period.runs AS SELECT * FROM main.runs "
        "WHERE run_id IN (SELECT DISTINCT run_id FROM period.requests)"
    )
    con.execute("SET search_path = 'period,main'")
    return con


def plain(df: pl.DataFrame) -> pl.DataFrame:
    """Decimal columns (DuckDB's SUM of integers) as Int64 / Float64."""
    casts = [
        pl.col(n).cast(pl.Int64 if t.scale == 0 else pl.Float64)  # type: ignore[attr-defined]
        for n, t in df.schema.items()
        if isinstance(t, pl.Decimal)
    ]
    return df.with_columns(casts) if casts else df


@dataclass
class Options:
    slo_ttft: float = 2.0  # s
    slo_tpot: float = 0.1  # s/token
    regression: float = 0.10  # a latency up by more than this fraction is flagged


@dataclass
class Context:
    layout: Layout
    con: duckdb.DuckDBPyConnection
    period: Period
    options: Options = field(default_factory=Options)
    prev_con: duckdb.DuckDBPyConnection | None = None
    prev_period: Period | None = None
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    _cache: dict[tuple, pl.DataFrame] = field(default_factory=dict)

    # -- data ------------------------------------------------------------------------------
    def views(self) -> set[str]:
        rows = self.con.sql("SELECT table_name FROM information_schema.tables").fetchall()
        return {r[0] for r in rows}

    def has(self, view: str) -> bool:
        return view in self.views()

    def columns(self, view: str) -> list[str]:
        rows = self.con.sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $v "
            "ORDER BY ordinal_position",
            params={"v": view},
        ).fetchall()
        return list(dict.fromkeys(r[0] for r in rows))

    def table(self, name: str, limit: int | None = None) -> pl.DataFrame:
        """A whole derived table (attribution, claims, replay ...), at most ``limit`` rows."""
        rel = self.con.table(name)
        if limit is not None:
            rel = rel.limit(limit)
        return plain(pl.from_arrow(rel.to_arrow_table()))  # type: ignore[arg-type]

    def query(self, name: str, params: dict[str, Any] | None = None, prev: bool = False):
        """Run the named query ``queries/<name>.sql`` on this (or the previous) period."""
        con = self.prev_con if prev else self.con
        if con is None:
            return None
        key = (name, tuple(sorted((params or {}).items())), prev)
        if key not in self._cache:
            q = load(name)
            given = {k: str(v) for k, v in (params or {}).items()}
            self._cache[key] = plain(pl.from_arrow(run_named(con, q, given)))  # type: ignore[arg-type]
        return self._cache[key]

    def slo_params(self) -> dict[str, float]:
        return {"slo_ttft": self.options.slo_ttft, "slo_tpot": self.options.slo_tpot}

    # -- charts ----------------------------------------------------------------------------
    def chart(self, chart: alt.TopLevelMixin, title: str = "") -> str:
        """Register an Altair chart; returns the <div> it will be drawn into."""
        spec = chart.configure_legend(labelLimit=360).configure_axis(labelLimit=360).to_dict()
        n = sum(len(v) for v in spec.get("datasets", {}).values())
        if n > MAX_POINTS:
            raise ValueError(
                f"chart {title!r} embeds {n} rows; aggregate or sample to {MAX_POINTS}"
            )
        cid = f"chart-{len(self.charts) + 1}"
        self.charts[cid] = spec
        label = f' aria-label="{esc(title)}"' if title else ""
        return f'<div class="chart" id="{cid}" data-points="{n}"{label}></div>'
