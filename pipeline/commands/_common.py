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


def _use_model_configs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]):
    """Register each [NAME=]FILE before the command runs (the catalog reads them)."""
    from pipeline.catalog.hf_config import ConfigError
    from pipeline.catalog.load import add_model_config

    for value in values:
        name, sep, file = value.rpartition("=")
        try:
            add_model_config(file if sep else value, name or None)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return values


model_config_option = click.option(
    "--model-config",
    "model_configs",
    multiple=True,
    metavar="[NAME=]FILE",
    callback=_use_model_configs,
    expose_value=False,
    is_eager=True,
    help="A Hugging Face config.json (or its folder) as the model NAME in the logs [default "
    "NAME: the file's _name_or_path or folder]. Repeatable. See docs/catalog.md.",
)


class Duration(click.ParamType):
    """A duration with its unit (500ms, 2s, 1.5min, 1h, 7d) or a bare number of seconds; the value
    is seconds (float). The same syntax on every command (issue 12, point 8)."""

    name = "duration"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            from pipeline.report.period import parse_duration

            d = parse_duration(value)
            if d is None:
                self.fail(f"{value!r}: give a duration such as 500ms, 2s, 1.5min or 1h", param, ctx)
            seconds = d.total_seconds()
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail(
                f"{value!r}: must be {'0 or ' if self.allow_zero else ''}more than 0", param, ctx
            )
        return seconds


DURATION = Duration()


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


def existing_layout(warehouse: str | None) -> Layout:
    """The warehouse a reading command works on; a missing one is a data error (exit 3), the
    same message from every command."""
    from pipeline.errors import DataError

    layout = layout_for(warehouse)
    if not layout.root.exists():
        raise DataError(f"no warehouse at {layout.root}; run `pipeline ingest LOGS` first")
    return layout


def console(quiet: bool = False) -> Console:
    return Console(stderr=True, quiet=quiet)


def interactive() -> bool:
    return sys.stderr.isatty()
