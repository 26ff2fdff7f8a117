"""``pipeline ingest``: read logs into the warehouse."""

from __future__ import annotations

from pathlib import Path

import click
import pyarrow as pa
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pipeline.commands._common import console, interactive, layout_for, warehouse_option
from pipeline.commands.options import output_options, reader_option
from pipeline.errors import EXIT_FAILED_CHECK, UserError
from pipeline.ingest.metadata import MetadataError, manifest_tables, parse_sets, run_manifest
from pipeline.ingest.run import IngestOptions, ingest_paths, input_files, totals
from pipeline.readers.mapping import MappingError, load_mapping
from pipeline.readers.registry import by_name


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@warehouse_option
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="COLUMN=VALUE",
    help="Metadata the logs lack, e.g. --set gpu=H100-SXM --set gpu_count=8 (repeatable).",
)
@reader_option
@click.option(
    "--mapping",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read home-grown logs with a declarative TOML mapping (docs/mapping.md).",
)
@click.option(
    "--manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A run manifest (TOML) for every file given, instead of the ones beside the logs.",
)
@click.option(
    "--reingest",
    is_flag=True,
    help="Read files already ingested again and replace their rows, e.g. to correct --set "
    "metadata (atomic: queries see the old rows or the new, never both).",
)
@click.option("--strict", is_flag=True, help="Exit 1 if any record was quarantined.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary table.")
@output_options(json_flag=True, reader_alias=True)
@click.option(
    "--max-line-mb", default=32, show_default=True, help="Quarantine lines longer than this."
)
def command(
    paths, warehouse, sets, reader, mapping, manifest, reingest, strict, quiet, fmt, out,
    max_line_mb,
):  # fmt: skip
    """Read serving logs (files or folders, recursive; plain, .gz or .zst) into the warehouse.

    Every record ends up in the warehouse or in quarantine with its file, line and reason; a
    file already ingested (same content hash) is skipped, so re-running is safe. Metadata a log
    lacks comes from --set or from a run manifest beside the log (<file>.run.toml or run.toml
    in its folder); both only fill what the log leaves empty, and --set wins.

    \b
    The result: a table per file on a terminal; --format json the totals (and each file),
    csv / parquet one row per file.

    \b
    Example:
      pipeline ingest logs/ --set gpu=H100-SXM --set gpu_count=1
      pipeline ingest results.json --reader vllm_bench --format json
      pipeline ingest our_logs.csv --mapping our_logs.mapping.toml
      pipeline ingest distserve/*.exp.txt --manifest examples/manifests/distserve-c21d11.run.toml
      pipeline ingest logs/ --reingest --set gpu=H100-PCIe     # correct metadata already in
      pipeline query --sql "SELECT reason, count(*) FROM quarantine GROUP BY 1"
    """
    try:
        if mapping is not None:
            load_mapping(mapping)  # a broken mapping is a usage error, reported before reading
            reader = "mapping"
        options = IngestOptions(
            fmt=reader,
            sets=parse_sets(list(sets)),
            max_line_bytes=max_line_mb * 1024 * 1024,
            mapping=mapping,
            manifest=manifest,
            reingest=reingest,
        )
        if manifest is not None:  # a broken manifest is a usage error, reported before reading
            run_manifest(manifest, manifest)
            manifest_tables(manifest, manifest)
        if reader:
            by_name(reader)
    except (MetadataError, KeyError, MappingError) as exc:
        raise UserError(str(exc).strip('"')) from None
    layout = layout_for(warehouse)
    say = console(quiet)
    files = input_files(list(paths))
    if not files:
        raise UserError(f"no files found under {', '.join(map(str, paths))}")
    progress = Progress(
        TextColumn("[bold]ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files · {task.fields[rows]:,} requests"),
        TimeElapsedColumn(),
        console=say,
        disable=quiet or not interactive(),
        transient=True,
    )
    with progress:
        task = progress.add_task("ingest", total=len(files), rows=0)
        rows = [0]

        def on_batch(n: int) -> None:
            rows[0] += n
            progress.update(task, rows=rows[0])

        results = ingest_paths(
            list(paths),
            layout,
            options,
            on_file=lambda r: progress.advance(task),
            on_batch=on_batch,
        )
    t = totals(results)
    if fmt == "json":
        doc = {"warehouse": str(layout.root), **t, "per_file": [_file_row(r) for r in results]}
        from pipeline.query.output import write_json

        write_json(doc, out)
    elif fmt in ("csv", "parquet"):
        from pipeline.query.output import write_result

        frame = pa.Table.from_pylist([_file_row(r) for r in results]) if results else None
        write_result(frame if frame is not None else pa.table({"file": []}), fmt, out)
    if not quiet:
        _print_summary(say, results, t, layout.root)
    if strict and t["quarantined"]:
        raise SystemExit(EXIT_FAILED_CHECK)


def _file_row(r) -> dict:  # type: ignore[no-untyped-def]
    """One input file's outcome, for --format json / csv / parquet."""
    c = r.counts
    keys = ("read", "ingested", "quarantined", "duplicates", "arrivals", "tokens")
    return {"file": str(r.path), "format": r.format, "status": r.status} | {
        k: int(c.get(k, 0)) for k in keys
    }


def _print_summary(out, results, t, root) -> None:
    table = Table(title=f"ingest into {root}", show_edge=False)
    for col in ("file", "format", "status", "read", "ingested", "quarantined", "duplicates"):
        table.add_column(col, justify="left" if col in ("file", "format", "status") else "right")
    for r in results[:30]:
        c = r.counts
        table.add_row(
            str(r.path),
            r.format or "",
            r.status,
            *(f"{c.get(k, 0):,}" for k in ("read", "ingested", "quarantined", "duplicates")),
        )
    if len(results) > 30:
        table.add_row(f"... {len(results) - 30} more files", "", "", "", "", "", "")
    out.print(table)
    out.print(
        f"files: {t['files']} ({t['already']} already ingested, {t['skipped']} skipped as "
        f"not logs) · read {t['read']:,} · "
        f"ingested {t['ingested']:,} · quarantined {t['quarantined']:,} · "
        f"duplicates skipped {t['duplicates']:,} · excluded {t['excluded']:,} · "
        f"arrivals {t['arrivals']:,} · "
        f"token rows {t['tokens']:,}"
    )
    skipped: dict[str, int] = {}
    excluded: dict[str, int] = {}
    for r in results:
        if r.status == "skipped":
            skipped[r.message] = skipped.get(r.message, 0) + 1
        for why, n in r.excluded.items():
            excluded[why] = excluded.get(why, 0) + n
    for why, n in sorted(skipped.items()):
        out.print(f"skipped {n} file(s), {why}")
    for why, n in sorted(excluded.items()):
        out.print(f"excluded {n:,} record(s): {why}")
    if t["quarantined"]:
        out.print(
            'see why: pipeline query --sql "SELECT source_file, line, reason FROM quarantine"'
        )
