"""``pipeline formats``: every reader, what it carries and what metadata it needs."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from pipeline.commands.options import output_options
from pipeline.readers.registry import readers


def _rows() -> list[dict]:
    out = []
    for r in readers():
        c = r.capabilities
        out.append(
            {
                "format": r.name,
                "per_request": c.per_request,
                "per_token": c.per_token,
                "arrivals_only": c.arrivals_only,
                "gpu_model_in_log": c.gpu_model_present,
                "needs_set": list(c.needs_set),
                "description": r.description,
            }
        )
    return out


@click.command("formats")
@output_options(json_flag=True)
def command(fmt: str, out: Path | None) -> None:
    """List the log formats `pipeline ingest` reads, what each carries, and the metadata it needs.

    Formats are detected from the file's content; force one with `ingest --reader NAME`.

    \b
    Example:
      pipeline formats
      pipeline formats --format json
      pipeline ingest results/ --reader vllm_bench --set gpu=H100-SXM
    """
    rows = _rows()
    if fmt == "json":
        from pipeline.query.output import write_json

        write_json(rows, out, indent=1)
        return
    if fmt in ("csv", "parquet"):
        import polars as pl

        from pipeline.query.output import write_result

        frame = pl.DataFrame(rows).with_columns(pl.col("needs_set").list.join(","))
        write_result(frame.to_arrow(), fmt, out)
        return
    t = Table(show_edge=False, header_style="bold", show_lines=True)
    for col in ("format", "rows", "tokens", "arrivals", "GPU/model", "--set"):
        t.add_column(col, no_wrap=True)
    t.add_column("what it is (--format json for the full text)", ratio=1)
    yes = {True: "yes", False: "-"}
    for r in rows:
        t.add_row(
            r["format"],
            yes[r["per_request"]],
            yes[r["per_token"]],
            yes[r["arrivals_only"]],
            yes[r["gpu_model_in_log"]],
            ",".join(r["needs_set"]) or "-",
            r["description"].split(". ")[0].split(" (")[0],
        )
    Console().print(t)
