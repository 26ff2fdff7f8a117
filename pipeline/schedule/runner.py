"""One scheduled run: ingest new files, fit, report; incremental, idempotent, never overlapping.

* A run holds the warehouse's ``run`` lock (an flock the kernel drops if the process dies); a
  second run that finds it held does nothing and says so (status ``busy``).
* Ingest skips files already ingested (same content hash), so only new files add rows.
* ``pipeline.fit`` runs when it exists and something new was ingested (or nothing was fitted yet).
* Reports: with a window (e.g. 1 day), the window holding the latest arrival and every window
  that newly ingested rows fall in are (re)written; without one, a single whole-warehouse report.
  A report whose JSON says it was built from the current warehouse contents is left alone.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.ingest.run import IngestOptions, ingest_paths, totals
from pipeline.query.named import load_query, run_named
from pipeline.report import Options, build_report
from pipeline.report.build import bounds, effective, file_stem, warehouse_version
from pipeline.report.period import Period, aligned_window
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect, derived_tables

MAX_WINDOWS = 62  # windows one run may (re)write when old data arrives late


@dataclass
class RunResult:
    status: str  # done | busy | empty
    ingested: dict[str, int] = field(default_factory=dict)
    fit: str = ""
    reports: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def run_fit(layout: Layout, engine: str = "duckdb") -> str:
    """Fit the cost models; a one-line note of what happened."""
    from pipeline.fit import fit_warehouse

    try:
        fits = fit_warehouse(layout, engine=engine)
    except Exception as exc:  # a failed fit must not stop the report: it says what happened
        return f"fit failed ({type(exc).__name__}: {exc}); reporting without new cost models"
    return f"fit: {len(fits)} deployment(s) fitted"


def run_attribution(layout: Layout) -> str:
    """Per-request attribution and elasticities, which the report's "why" section reads."""
    from pipeline import attribution

    try:
        req, _el, _cmp = attribution.attribute(layout, fit_if_missing=False)
    except Exception as exc:  # the report still says what it can without it
        return f"attribution failed ({type(exc).__name__}: {exc}); the report's why is partial"
    return f"attribution: {req.height:,} request(s) attributed"


def _new_data_start(layout: Layout, files: list[Path]) -> dt.datetime | None:
    con, q, first = connect(layout), load_query("report_file_span"), None
    for f in files:
        row = run_named(con, q, {"source_file": str(f)}).to_pylist()[0]
        t = row["first_arrival"]
        if t is not None and (first is None or t < first):
            first = t
    return first


def _targets(layout: Layout, window: dt.timedelta | None, new_files: list[Path]) -> list[Period]:
    b = bounds(layout)
    if window is None or b.last is None:
        return [Period()]
    latest = aligned_window(b.last, window)
    start = _new_data_start(layout, new_files) if new_files else None
    out = [latest]
    if start is not None:
        w = aligned_window(start, window)
        while w.start < latest.start and len(out) < MAX_WINDOWS:  # type: ignore[operator]
            out.append(w)
            w = Period(w.end, w.end + window)  # type: ignore[operator]
    return sorted(set(out), key=lambda p: p.start)  # type: ignore[arg-type,return-value]


def _up_to_date(out_dir: Path, stem: str, version: str) -> bool:
    try:
        meta = json.loads((out_dir / f"{stem}.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("warehouse_version") == version and (out_dir / f"{stem}.html").is_file()


def run_once(
    logs: list[Path],
    layout: Layout,
    out_dir: Path,
    window: dt.timedelta | None = dt.timedelta(days=1),
    options: Options | None = None,
    compare_with: str | None = None,
    ingest_options: IngestOptions | None = None,
    say: Callable[[str], None] = lambda s: None,
    engine: str = "duckdb",
) -> RunResult:
    """Ingest new files, fit and attribute when they changed anything, and build the reports of
    the periods they touch. ``engine`` runs the fit's and the reports' SQL (as ``--engine`` on
    `pipeline fit` / `pipeline report`); ingest and attribution run in process."""
    layout.ensure()
    with layout.lock("run", blocking=False) as got:
        if not got:
            return RunResult("busy", notes=["another run is in progress; this one did nothing"])
        res = RunResult("done")
        files = ingest_paths(logs, layout, ingest_options or IngestOptions()) if logs else []
        res.ingested = totals(files)
        new = [r.path for r in files if r.status == "ingested"]
        say(f"ingest: {len(new)} new file(s), {res.ingested.get('ingested', 0):,} requests")
        if bounds(layout).requests == 0:
            res.status = "empty"
            res.notes.append("the warehouse has no requests yet; nothing to report")
            return res
        if new or "cost_models" not in derived_tables(layout):
            res.fit = run_fit(layout, engine)
            say(res.fit)
        if new or "attribution_requests" not in derived_tables(layout):
            note = run_attribution(layout)
            res.notes.append(note)
            say(note)
        version = warehouse_version(layout)
        for period in _targets(layout, window, new):
            stem = file_stem(effective(period, bounds(layout)))
            if _up_to_date(out_dir, stem, version):
                res.skipped.append(out_dir / f"{stem}.html")
                continue
            r = build_report(
                layout, out_dir, compare_with=compare_with, options=options, period=period,
                version=version, engine=engine,
            )  # fmt: skip
            res.reports.append(r.path)
            say(f"report: {r.path}")
        return res
