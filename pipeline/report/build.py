"""Build one dated report page (and its JSON summary) and refresh the reports index."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.engines import Engine, open_engine
from pipeline.report import index, page
from pipeline.report.context import Context, Options, open_period_engine, plain
from pipeline.report.html import Section
from pipeline.report.period import Period, previous, resolve_period
from pipeline.report.sections import ORDER
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect, derived_tables

UTC = dt.UTC


class NothingToReport(ValueError):
    """The warehouse holds no requests, quarantined records or run summaries (or none in the
    period)."""


def _data_in(period: Period, b: Bounds) -> None:
    """Refuse a --since / --until period that holds no request (an empty page says nothing)."""
    outside = b.first is None or (
        (period.end is not None and period.end <= b.first)
        or (period.start is not None and period.start > b.last)  # type: ignore[operator]
    )
    if outside:
        span = (
            f"its requests with a wall clock run from {b.first:%Y-%m-%d %H:%M} to "
            f"{b.last:%Y-%m-%d %H:%M} UTC"
            if b.first is not None
            else "none of its requests has a wall clock (a period cannot select them)"
        )
        raise NothingToReport(
            f"no requests in {period.label()}: {span}; choose --since / --until inside that"
        )


@dataclass
class Bounds:
    first: dt.datetime | None
    last: dt.datetime | None
    requests: int
    with_wall_clock: int


@dataclass
class ReportResult:
    path: Path
    summary: dict[str, Any]


def bounds(layout: Layout, engine: Engine | None = None) -> Bounds:
    """The warehouse's arrivals (``engine``: an unfiltered engine over it; default DuckDB)."""
    from pipeline.query.named import load_query, run_named

    if engine is None:
        row = plain(pl.from_arrow(run_named(connect(layout), load_query("report_bounds"))))  # type: ignore[arg-type]
    else:
        row = plain(engine.named("report_bounds"))
    r = row.row(0, named=True)
    return Bounds(
        r["first_arrival"], r["last_arrival"], r["requests"] or 0, r["with_wall_clock"] or 0
    )


def _floor_minute(t: dt.datetime) -> dt.datetime:
    return t.astimezone(UTC).replace(second=0, microsecond=0)


def _ceil_minute(t: dt.datetime) -> dt.datetime:
    f = _floor_minute(t)
    return f if f == t else f + dt.timedelta(minutes=1)


def effective(period: Period, b: Bounds) -> Period | None:
    """The period with open ends closed by the data (for titles and file names); None if undated."""
    start = period.start or (_floor_minute(b.first) if b.first else None)
    end = period.end or (_ceil_minute(b.last + dt.timedelta(microseconds=1)) if b.last else None)
    if start is None or end is None:
        return None
    return Period(start, end)


def file_stem(period: Period | None) -> str:
    return f"report-{period.slug()}" if period else "report-all"


def warehouse_version(layout: Layout) -> str:
    """Changes whenever committed input or a derived table changes."""
    h = hashlib.sha256()
    if layout.manifest_dir.exists():
        for p in sorted(layout.manifest_dir.glob("*.json")):
            h.update(p.name.encode())
    for name, files in derived_tables(layout).items():
        for f in files:
            st = f.stat()
            h.update(f"{name}/{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _build_section(name: str, ctx: Context) -> Section:
    module = importlib.import_module(f"pipeline.report.sections.{name}")
    return module.build(ctx)


def build_report(
    layout: Layout,
    out_dir: Path,
    since: str | None = None,
    until: str | None = None,
    compare_with: str | None = None,
    options: Options | None = None,
    period: Period | None = None,
    now: dt.datetime | None = None,
    version: str | None = None,
    engine: str = "duckdb",
    engine_options: dict[str, Any] | None = None,
) -> ReportResult:
    """Write ``<out_dir>/report-<period>.html`` (+ ``.json``), refresh ``index.html``.

    ``engine`` ("duckdb" or "spark", opened with ``engine_options``) runs every query over the
    period's data; only their (aggregated) results come back for the charts and the page.
    """
    options = options or Options()
    version = version or warehouse_version(layout)
    now = now or dt.datetime.now(UTC)
    opened: list[Engine] = []
    try:
        return _build(layout, out_dir, since, until, compare_with, options, period, now, version,
                      engine, engine_options, opened)  # fmt: skip
    finally:
        for eng in opened:  # Spark: drop the session's views
            eng.close()


def _build(  # type: ignore[no-untyped-def]
    layout, out_dir, since, until, compare_with, options, period, now, version,
    engine, engine_options, opened,
) -> ReportResult:  # fmt: skip
    base = None
    # A warehouse of tool summaries only (a rate sweep's vLLM / SGLang summaries) still has a
    # report: its load curves and the tools' own figures; the per-request sections say absent.
    if engine == "duckdb":
        b = bounds(layout)
        con = connect(layout)
        quarantined = con.table("quarantine").count("*").fetchall()[0][0]
        summaries = con.table("run_summaries").count("*").fetchall()[0][0]
    else:  # one engine answers the bounds over the whole warehouse, then holds the period
        base = open_engine(engine, layout, **(engine_options or {}))
        opened.append(base)
        b = bounds(layout, base)
        quarantined = base.sql("SELECT count(*) AS n FROM quarantine").item()
        summaries = base.sql("SELECT count(*) AS n FROM run_summaries").item()
    if b.requests == 0 and not quarantined and not summaries:
        raise NothingToReport(
            f"the warehouse {layout.root} holds no requests and no run summaries; ingest logs first"
        )
    if period is None:
        period = resolve_period(since, until, b.last, now)
        if since is not None or until is not None:
            _data_in(period, b)  # a period the user asked for, past the data: an error
    prev = previous(period, compare_with)
    ctx = Context(
        layout=layout,
        con=open_period_engine(layout, period, engine, engine_options, base),
        period=period,
        options=options,
        prev_con=open_period_engine(layout, prev, engine, engine_options) if prev else None,
        prev_period=prev,
    )
    opened += [e for e in (ctx.con, ctx.prev_con) if e is not None and e is not base]
    sections = [_build_section(name, ctx) for name in ORDER]
    shown = effective(period, b)
    title = f"LLM serving report · {shown.label() if shown else 'all data (no wall clock)'}"
    sub = [
        f"Warehouse {layout.root} · generated {now:%Y-%m-%d %H:%M} UTC",
        f"Compared with {prev.label()}" if prev else "No comparison period",
        f"SLO: TTFT ≤ {options.slo_ttft * 1000:g} ms, TPOT ≤ {options.slo_tpot * 1000:g} ms · "
        f"regression threshold {options.regression * 100:g} %",
    ]
    html = page.render_page(title, sub, sections, ctx.charts)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = file_stem(shown)
    path = out_dir / f"{stem}.html"
    summary = {
        "file": path.name,
        "title": title,
        "period": shown.to_json() if shown else None,
        "requested": period.to_json(),
        "compare_with": prev.to_json() if prev else None,
        "generated": now.isoformat(),
        "warehouse": str(layout.root),
        "warehouse_version": version,
        "bytes": len(html.encode()),
        "charts": len(ctx.charts),
        "sections": {s.id: (s.summary or {}) | ({"absent": s.absent} if s.absent else {})
                     for s in sections},
    }  # fmt: skip
    _atomic_write(path, html)
    _atomic_write(out_dir / f"{stem}.json", json.dumps(summary, indent=1, default=str) + "\n")
    index.write_index(out_dir)
    return ReportResult(path, summary)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)
