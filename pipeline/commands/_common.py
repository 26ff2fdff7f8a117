"""Options and helpers shared by the commands."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from pipeline.warehouse.layout import Layout, warehouse_path

warehouse_option = click.option(
    "--warehouse",
    "-w",
    type=click.Path(file_okay=False),
    default=None,
    help="Warehouse folder [default: $PIPELINE_WAREHOUSE or ./warehouse].",
)


def profile_option(what: str):
    """--profile DIR: a layer-wise profile (LLMServingSim layout, docs/profile.md)."""
    return click.option(
        "--profile",
        "profile_dir",
        type=click.Path(exists=True, file_okay=False),
        default=None,
        help=f"A layer-wise profile (LLMServingSim layout, docs/profile.md): {what}.",
    )


def engine_option(what: str):
    """--engine duckdb|spark, the same on every command that reads the warehouse."""
    from pipeline.engines import ENGINES

    return click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="duckdb",
        show_default=True,
        help=f"{what}: duckdb in process, or spark. See docs/fleet.md.",
    )


def layout_for(warehouse: str | None) -> Layout:
    return Layout(warehouse_path(warehouse))


def console(quiet: bool = False) -> Console:
    return Console(stderr=True, quiet=quiet)


def interactive() -> bool:
    return sys.stderr.isatty()
