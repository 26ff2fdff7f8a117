"""Print a query result: an aligned table on a terminal, CSV / JSON / Parquet for machines."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.6g}"
    return str(v)


def render_table(t: pa.Table, title: str | None = None, console: Console | None = None) -> None:
    """An aligned table; one block per row (column: value) when it would not fit the terminal."""
    console = console or Console()
    rows = [[_cell(v) for v in r.values()] for r in t.to_pylist()]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) + 3 for i, n in enumerate(t.schema.names)]
    if sum(widths) > console.width and rows:
        _render_vertical(t.schema.names, rows, title, console)
        return
    table = Table(title=title, show_edge=False, header_style="bold")
    for name, typ in zip(t.schema.names, t.schema.types, strict=True):
        numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ)
        table.add_column(name, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"{t.num_rows} rows")


def _render_vertical(names: list[str], rows: list[list[str]], title, console: Console) -> None:
    pad = max(len(n) for n in names)
    if title:
        console.print(f"[bold]{title}[/bold]")
    for i, row in enumerate(rows, 1):
        console.print(f"[dim]-- row {i} --[/dim]")
        for name, value in zip(names, row, strict=True):
            console.print(f"{name:<{pad}}  {value}", highlight=False)
    console.print(f"{len(rows)} rows")


def _json_default(v: object) -> object:
    return str(v)


def write_json(doc: object, out: Path | None, **dumps: object) -> None:
    """A command's JSON document (not a table) on stdout, or in ``out``; one line unless
    ``indent`` is given. ``dumps`` go to json.dumps (``default`` for values JSON lacks)."""
    dumps.setdefault("default", _json_default)
    text = json.dumps(doc, **dumps) + "\n"  # type: ignore[arg-type]
    if out is None:
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)


def write_rows(rows: list[dict], fmt: str, out: Path | None) -> None:
    """Rows of dicts (a command's result table) as csv or parquet, like :func:`write_result`."""
    import polars as pl

    write_result(pl.DataFrame(rows, infer_schema_length=None).to_arrow(), fmt, out)


def write_result(t: pa.Table, fmt: str, out: Path | None) -> None:
    if fmt == "parquet":
        if out is None:
            raise ValueError("--format parquet needs --out FILE")
        pq.write_table(t, out)
        return
    if fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(t, buf)
        text = buf.getvalue().decode()
    elif fmt == "json":
        text = json.dumps(t.to_pylist(), default=_json_default, indent=1) + "\n"
    else:
        raise ValueError(f"unknown format {fmt}")
    if out is None:
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)
