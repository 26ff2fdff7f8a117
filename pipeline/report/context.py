"""What every section builder gets: the period's data (an Engine), the comparison period, options.

The period is applied once, here, in the engine, with views named like the warehouse's
(``requests``, ``tokens``, ``arrivals``, ``runs``) that hold only the period's rows, so the named
queries in ``queries/`` run unchanged on them. DuckDB: a schema ``period`` of filtered views put
first on the connection's search path. Spark: the engine's temporary views replaced by filtered
ones (the bounds bound as parameters). Only query results come back to Python.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import duckdb
import polars as pl
import pyarrow as pa

from pipeline.engines import Engine, open_engine
from pipeline.engines.base import normalize
from pipeline.query.named import load_query
from pipeline.report.html import esc
from pipeline.report.period import Period
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

MAX_POINTS = 5000  # data rows any one chart may embed
# Series drawn per chart (the largest by requests): tableau20 has 20 distinct colours.
MAX_SERIES = 20


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


def open_period_engine(
    layout: Layout,
    period: Period | None,
    engine: str = "duckdb",
    engine_options: dict[str, Any] | None = None,
    base: Engine | None = None,
) -> Engine:
    """An engine whose ``requests`` / ``tokens`` / ``arrivals`` / ``runs`` hold the period.

    Spark: ``base`` (an open Spark engine over ``layout``) is restricted in place when given,
    else a new one is opened with ``engine_options``.
    """
    if engine == "duckdb":
        from pipeline.engines.duckdb_engine import DuckDBEngine

        return DuckDBEngine(layout, con=open_period(layout, period))
    eng = base if base is not None else open_engine(engine, layout, **(engine_options or {}))
    if period is not None and (period.start is not None or period.end is not None):
        _restrict_spark(eng, period)
    return eng


def _restrict_spark(eng: Any, period: Period) -> None:
    """Replace the Spark engine's input views by the period's rows (same filter as open_period)."""
    from pipeline.engines.translate import to_spark

    parts, params = [], {}
    if period.start is not None:
        parts.append("arrival_at >= $p_start AND day >= $p_start_day")
        start = period.start.astimezone(dt.UTC)
        params |= {"p_start": start, "p_start_day": f"{period.start:%Y-%m-%d}"}
    if period.end is not None:
        parts.append("arrival_at < $p_end AND day <= $p_end_day")
        end = period.end.astimezone(dt.UTC)
        params |= {"p_end": end, "p_end_day": f"{period.end:%Y-%m-%d}"}
    w = " AND ".join(parts)
    spark = eng.spark
    req = spark.sql(to_spark(f"SELECT * FROM requests WHERE {w}"), args=params)
    keys = req.select("run_id", "request_id")
    views = {
        "requests": req,
        "tokens": spark.table("tokens").join(keys, ["run_id", "request_id"], "left_semi"),
        "arrivals": spark.sql(to_spark(f"SELECT * FROM arrivals WHERE {w}"), args=params),
        "runs": spark.table("runs").join(keys.select("run_id").distinct(), "run_id", "left_semi"),
    }
    for name, df in views.items():  # each plan already holds the unfiltered view it reads
        df.createOrReplaceTempView(name)


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
    con: Engine  # the period's data (see open_period_engine)
    period: Period
    options: Options = field(default_factory=Options)
    prev_con: Engine | None = None
    prev_period: Period | None = None
    charts: dict[str, dict[str, Any]] = field(default_factory=dict)
    _cache: dict[tuple, pl.DataFrame] = field(default_factory=dict)

    # -- data ------------------------------------------------------------------------------
    def _frame(self, t: pa.Table) -> pl.DataFrame:
        # DuckDB's results as they always were; other engines' with DuckDB's dtypes first.
        return plain(pl.from_arrow(t) if self.con.name == "duckdb" else normalize(t))  # type: ignore[arg-type]

    def views(self) -> set[str]:
        return set(self.con.views())

    def has(self, view: str) -> bool:
        return view in self.views()

    def columns(self, view: str) -> list[str]:
        return list(self.con.arrow(f"SELECT * FROM {view} LIMIT 0").column_names)

    def count(self, view: str) -> int:
        return int(self.con.arrow(f"SELECT count(*) AS n FROM {view}").column(0)[0].as_py())

    def table(self, name: str, limit: int | None = None) -> pl.DataFrame:
        """A whole derived table (attribution, claims, replay ...), at most ``limit`` rows."""
        sql = f"SELECT * FROM {name}" + (f" LIMIT {int(limit)}" if limit is not None else "")
        return self._frame(self.con.arrow(sql))

    def query(self, name: str, params: dict[str, Any] | None = None, prev: bool = False):
        """Run the named query ``queries/<name>.sql`` on this (or the previous) period."""
        eng = self.prev_con if prev else self.con
        if eng is None:
            return None
        key = (name, tuple(sorted((params or {}).items())), prev)
        if key not in self._cache:
            given = {k: str(v) for k, v in (params or {}).items()}
            self._cache[key] = self._frame(eng.named_arrow(load_query(name), given))
        return self._cache[key]

    def slo_params(self) -> dict[str, float]:
        return {"slo_ttft": self.options.slo_ttft, "slo_tpot": self.options.slo_tpot}

    # -- charts ----------------------------------------------------------------------------
    def chart(self, chart: alt.TopLevelMixin, title: str = "") -> str:
        """Register an Altair chart; returns the <div> it will be drawn into."""
        # Twenty distinct series colours (Vega's tableau20) instead of category10's ten, so that
        # twelve deployments never share a colour.
        spec = (
            chart.configure_legend(labelLimit=360)
            .configure_axis(labelLimit=360)
            .configure_range(category={"scheme": "tableau20"})
            .to_dict()
        )
        n = sum(len(v) for v in spec.get("datasets", {}).values())
        if n > MAX_POINTS:
            raise ValueError(
                f"chart {title!r} embeds {n} rows; aggregate or sample to {MAX_POINTS}"
            )
        cid = f"chart-{len(self.charts) + 1}"
        self.charts[cid] = spec
        label = f' aria-label="{esc(title)}"' if title else ""
        return f'<div class="chart" id="{cid}" data-points="{n}"{label}></div>'
