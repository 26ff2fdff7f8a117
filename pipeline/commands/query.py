"""``pipeline query``: named SQL from queries/, or ad-hoc read-only SQL."""

from __future__ import annotations

from pathlib import Path

import click
import duckdb
from rich.console import Console
from rich.table import Table

from pipeline.commands._common import engine_option, existing_layout, warehouse_option
from pipeline.commands.options import output_options, param_option, parse_params
from pipeline.engines import open_engine
from pipeline.errors import UserError
from pipeline.query.named import QueryError, all_queries, check_read_only, load_query, queries_dir
from pipeline.query.output import render_table, write_result


@click.command("query")
@click.argument("name", required=False)
@warehouse_option
@param_option("Bind a query parameter $KEY (repeatable).")
@click.option("--sql", default=None, help="Run this read-only SQL instead of a named query.")
@click.option("--list", "list_", is_flag=True, help="List the named queries.")
@output_options(default=None)
@click.option(
    "--queries-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder of named queries [default: ./queries].",
)
@engine_option(
    "Query engine (spark: local[*], spark-submit or a cluster; SQL translated by sqlglot)"
)
def command(name, warehouse, params, sql, list_, fmt, out, queries_dir_opt=None, **kw):
    """Run a named query (queries/NAME.sql) or ad-hoc SQL over the warehouse views.

    Views: requests, tokens, quarantine, runs, arrivals, run_summaries, and the tables later
    stages write (cost_models, attribution, ...). Parameters are bound, never pasted into SQL.

    \b
    Examples:
      pipeline query --list
      pipeline query latency_percentiles
      pipeline query throughput_by_window --param window_s=30 --format csv
      pipeline query --sql "SELECT model, count(*) FROM requests GROUP BY 1"
      pipeline query latency_percentiles --engine spark
    """
    qdir = kw.get("queries_dir")
    try:
        if list_:
            _list(Path(qdir) if qdir else queries_dir())
            return
        if bool(name) == bool(sql):
            raise UserError('give a query NAME or --sql "..." (see `pipeline query --list`)')
        given = parse_params(params)
        q = None if sql else load_query(name, Path(qdir) if qdir else None)
        if sql:
            check_read_only(sql)  # a usage error before any data error
        root = warehouse if warehouse and "://" in warehouse else existing_layout(warehouse)
        with open_engine(kw.get("engine") or "duckdb", root) as engine:
            table = engine.adhoc(sql, given) if sql else engine.named_arrow(q, given)
    except QueryError as exc:
        raise UserError(str(exc)) from None
    except duckdb.Error as exc:  # show the engine's message, not a traceback
        raise UserError(f"query failed: {exc}") from None
    chosen = fmt or ("table" if out is None and click.get_text_stream("stdout").isatty() else "csv")
    if chosen == "table":
        render_table(table, title=name)
    else:
        try:
            write_result(table, chosen, out)
        except ValueError as exc:
            raise UserError(str(exc)) from None


def _list(d: Path) -> None:
    t = Table(show_edge=False, header_style="bold")
    t.add_column("query")
    t.add_column("parameters")
    t.add_column("description")
    for q in all_queries(d):
        ps = ", ".join(f"{k}={v}" for k, v in q.params.items())
        t.add_row(q.name, ps, q.description)
    Console().print(t)
