"""``pipeline schemas``: export or check the JSON Schema / table contract in schemas/."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.commands.options import deprecated
from pipeline.errors import EXIT_FAILED_CHECK
from pipeline.schema.export import stale, write_schemas


@click.command("schemas")
@click.option(
    "--out-dir",
    "directory",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder of the schema files [default: schemas].",
)
@click.option(
    "--dir", "old_dir", default=None, hidden=True, type=click.Path(file_okay=False, path_type=Path)
)
@click.option("--check", is_flag=True, help="Exit 1 if the files differ from the code.")
def command(directory: Path | None, old_dir: Path | None, check: bool) -> None:
    """Write the record JSON Schema and the warehouse table schemas into schemas/.

    \b
    Example:
      pipeline schemas            # refresh schemas/
      pipeline schemas --check    # CI: fail when schemas/ is stale
    """
    if old_dir is not None:  # the old spelling, for one release
        deprecated(f"--dir {old_dir}", f"--out-dir {old_dir}")
    directory = directory or old_dir or Path("schemas")
    if check:
        bad = stale(directory)
        if bad:
            click.echo(f"stale: {', '.join(bad)}; run `pipeline schemas`", err=True)
            raise SystemExit(EXIT_FAILED_CHECK)
        click.echo("schemas/ is up to date")
        return
    for p in write_schemas(directory):
        click.echo(f"wrote {p}")
