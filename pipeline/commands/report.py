"""``pipeline report``: one self-contained, dated HTML report of a period."""

from __future__ import annotations

from pathlib import Path

import click
import duckdb

from pipeline.commands._common import (
    DURATION,
    console,
    engine_option,
    existing_layout,
    model_config_option,
    warehouse_option,
)
from pipeline.commands.options import out_dir_option
from pipeline.engines import EngineError
from pipeline.errors import DataError, UserError
from pipeline.report import NothingToReport, Options, PeriodError, build_report


def parse_seconds(text: str | float, what: str) -> float:
    """'2', '2s', '2.5 s' or '500ms' -> seconds (the one duration syntax, _common.Duration)."""
    try:
        return DURATION.convert(text, None, None)
    except click.BadParameter as exc:
        raise UserError(f"{what} {exc.message}") from None


def period_options(f):
    for opt in reversed(
        [
            click.option("--since", default=None, metavar="TIME",
                         help="Start: ISO date/time (UTC unless it has an offset), 'now', or a "
                              "duration back from --until such as 24h or 7d."),
            click.option("--until", default=None, metavar="TIME",
                         help="End (exclusive) [default: the latest arrival in the warehouse]."),
            click.option("--compare-with", default=None, metavar="PERIOD",
                         help="'previous' (the period of the same length before; default), a "
                              "shift such as 7d, a range START..END, or 'none'."),
            click.option("--slo-ttft", default="2s", show_default=True,
                         help="TTFT objective for goodput (2s, 500ms)."),
            click.option("--slo-tpot", default="100ms", show_default=True,
                         help="TPOT objective for goodput."),
            click.option("--regression", default=10.0, show_default=True, metavar="PCT",
                         help="Flag a latency that rose (or a throughput that fell) by more "
                              "than PCT percent."),
        ]
    ):  # fmt: skip
        f = opt(f)
    return f


def options_from(slo_ttft: str, slo_tpot: str, regression: float) -> Options:
    if regression < 0:
        raise UserError("--regression must be zero or more (percent)")
    return Options(
        slo_ttft=parse_seconds(slo_ttft, "--slo-ttft"),
        slo_tpot=parse_seconds(slo_tpot, "--slo-tpot"),
        regression=regression / 100.0,
    )


@click.command("report")
@model_config_option
@warehouse_option
@out_dir_option(Path("reports"), "Folder for the reports")
@period_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the report's path.")
@engine_option("Engine for the report's queries (with spark the period is filtered in Spark)")
def command(
    warehouse, out_dir, since, until, compare_with, slo_ttft, slo_tpot, regression, quiet, engine
):
    """Write a self-contained HTML report (charts inlined, no network) and print its path.

    The file is named after its period (reports/report-<start>-<end>.html); re-running for the
    same period replaces it. reports/index.html lists every report, flagging regressions
    against the previous period. Sections whose data is absent (no cost models yet, no
    scheduled timestamps, ...) say so in one line.

    \b
    Examples:
      pipeline report --out-dir reports/
      pipeline report --since 2026-11-01 --until 2026-11-02 --slo-ttft 500ms
      pipeline report --since 24h --compare-with 7d
      pipeline report --engine spark
    """
    options = options_from(slo_ttft, slo_tpot, regression)
    layout = existing_layout(warehouse)
    try:
        result = build_report(layout, out_dir, since, until, compare_with, options, engine=engine)
    except PeriodError as exc:
        raise UserError(str(exc)) from None
    except NothingToReport as exc:
        raise DataError(str(exc)) from None
    except duckdb.Error as exc:
        raise DataError(f"report query failed: {exc}") from None
    except EngineError as exc:
        raise DataError(f"report {exc}") from None
    if not quiet:
        s = result.summary
        reg = s["sections"].get("changes", {}).get("regressions")
        console().print(
            f"report: {s['sections'].get('headline', {}).get('requests', 0):,} requests · "
            f"{s['charts']} charts · {s['bytes'] / 1e6:.2f} MB"
            + ("" if reg is None else f" · {reg} regression(s) vs previous period")
        )
    click.echo(str(result.path))
