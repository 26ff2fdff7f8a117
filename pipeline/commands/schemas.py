"""``pipeline schemas``: export or check the JSON Schema / table contract in schemas/."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.errors import EXIT_FAILED_CHECK
from pipeline.schema.export import stale, write_schemas


@click.command("schemas")
@click.option(
    "--dir",
    "directory",
    default="schemas",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option("--check", is_flag=True, help="Exit 1 if the files differ from the code.")
def command(directory: Path, check: bool) -> None:
    """Write the record JSON Schema and the warehouse table schemas into schemas/.

    \b
    Example:
      pipeline schemas            # refresh schemas/
      pipeline schemas --check    # CI: fail when schemas/ is stale
    """
    if check:
        bad = stale(directory)
        if bad:
            click.echo(f"stale: {', '.join(bad)}; run `pipeline schemas`", err=True)
            raise SystemExit(EXIT_FAILED_CHECK)
        click.echo("schemas/ is up to date")
        return
    for p in write_schemas(directory):
        click.echo(f"wrote {p}")
