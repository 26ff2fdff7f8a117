"""Self-contained HTML reports (Altair charts, inlined Vega) built from the warehouse.

    >>> from pipeline.report import build_report, Options
    >>> build_report(layout, Path("reports"), since="7d").path   # doctest: +SKIP

Section builders live in :mod:`pipeline.report.sections` (one module each); queries they run
are named queries in ``queries/report_*.sql``. See docs/report.md.
"""

from __future__ import annotations

from pipeline.report.build import NothingToReport, ReportResult, build_report
from pipeline.report.context import Options
from pipeline.report.period import Period, PeriodError

__all__ = ["NothingToReport", "Options", "Period", "PeriodError", "ReportResult", "build_report"]
