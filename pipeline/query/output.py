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
    table = Table(title=title, show_edge=False, header_style="bold")
    for name, typ in zip(t.schema.names, t.schema.types, strict=True):
        numeric = pa.types.is_integer(typ) or pa.types.is_floating(typ)
        table.add_column(name, justify="right" if numeric else "left")
    for row in t.to_pylist():
        table.add_row(*(_cell(v) for v in row.values()))
    (console or Console()).print(table)
    (console or Console()).print(f"{t.num_rows} rows")


def _json_default(v: object) -> object:
    return str(v)


def write(t: pa.Table, fmt: str, out: Path | None) -> None:
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
