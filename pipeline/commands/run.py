"""``pipeline run``: ingest new logs, fit, report; safe to run from cron every few minutes."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from pipeline.commands._common import console, engine_option, layout_for, warehouse_option
from pipeline.commands.options import deprecated, out_dir_option, reader_option
from pipeline.commands.report import options_from, period_options
from pipeline.engines import EngineError
from pipeline.errors import DataError, UserError
from pipeline.ingest.metadata import MetadataError, parse_sets
from pipeline.ingest.run import IngestOptions
from pipeline.report import NothingToReport, PeriodError
from pipeline.report.period import parse_duration
from pipeline.schedule.runner import run_once


def parse_window(text: str):
    if text.strip().lower() in ("all", "none"):
        return None
    d = parse_duration(text)
    if d is None or d.total_seconds() <= 0:
        raise UserError(f"--window {text!r}: give a duration such as 1h, 1d, 7d, or 'all'")
    return d


def run_options(f):
    for opt in reversed(
        [
            click.option("--logs", "logs", multiple=True, required=True,
                         type=click.Path(exists=True, path_type=Path),
                         help="Log file or folder to ingest new files from (repeatable)."),
            warehouse_option,
            click.option("--window", default="1d", show_default=True,
                         help="Report period: windows of this length aligned to midnight UTC "
                              "(1h, 1d, 7d), or 'all' for one report of the whole warehouse."),
            click.option("--set", "sets", multiple=True, metavar="COLUMN=VALUE",
                         help="Metadata the logs lack, as for `pipeline ingest` (repeatable)."),
            reader_option,
            click.option("--format", "old_reader", default=None, hidden=True),
            engine_option("Engine for the fit's and the reports' SQL (ingest runs in process)"),
        ]
    ):  # fmt: skip
        f = opt(f)
    return out_dir_option(Path("reports"), "Folder for the reports")(
        _reader_alias(period_options(f))
    )


def _reader_alias(f):  # type: ignore[no-untyped-def]
    """The old ``--format READER`` of run / schedule, for one release."""

    @functools.wraps(f)
    def wrapper(*args, **kw):  # type: ignore[no-untyped-def]
        old = kw.pop("old_reader")
        if old is not None:
            deprecated(f"--format {old} (a reader)", f"--reader {old}")
            kw["reader"] = kw["reader"] or old
        return f(*args, **kw)

    return wrapper


@click.command("run")
@run_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the paths of new reports.")
def command(logs, warehouse, out_dir, window, sets, reader, engine, since, until, compare_with,
            slo_ttft, slo_tpot, regression, quiet):  # fmt: skip
    """Ingest new log files, fit the cost models, and write the reports they change.

    Idempotent and incremental: files already ingested are skipped, and a report already built
    from the current warehouse contents is not rewritten. Runs never overlap: a run that finds
    another one in progress on the same warehouse prints so and exits 0 without doing anything.
    Prints the path of every report written.

    \b
    Examples:
      pipeline run --logs /var/log/vllm --warehouse wh --out-dir reports/
      pipeline run --logs logs/ --window 1h --slo-ttft 500ms
      pipeline run --logs logs/ --engine spark
    """
    if since or until:
        raise UserError("`pipeline run` picks its periods from --window; use `pipeline report` "
                        "for --since/--until")  # fmt: skip
    options = options_from(slo_ttft, slo_tpot, regression)
    try:
        ingest = IngestOptions(fmt=reader, sets=parse_sets(list(sets)))
    except MetadataError as exc:
        raise UserError(str(exc)) from None
    out_console = console(quiet)
    try:
        res = run_once(
            list(logs), layout_for(warehouse), out_dir, parse_window(window), options, compare_with,
            ingest, say=lambda s: out_console.print(s), engine=engine,
        )  # fmt: skip
    except PeriodError as exc:
        raise UserError(str(exc)) from None
    except NothingToReport as exc:
        raise DataError(str(exc)) from None
    except EngineError as exc:  # as in `pipeline report`
        raise DataError(f"run {exc}") from None
    for note in res.notes:
        out_console.print(note)
    if res.status == "busy":
        click.echo("another run is in progress on this warehouse; nothing done", err=True)
        return
    if res.skipped:
        out_console.print(f"{len(res.skipped)} report(s) already up to date")
    for p in res.reports:
        click.echo(str(p))
