"""The CLI's shared words: one decorator per option that means the same on every command.

``--format`` is always the *output* format (table | csv | json | parquet, as far as a command
can write it) and ``--out`` / ``-o`` the file it goes to; ``--out-dir`` is a folder;
``--reader`` names an *input* format; ``-p`` / ``--param`` binds a named parameter;
``--engine`` is accepted by every command that reads the warehouse (commands that run on
DuckDB only refuse ``spark`` with a reason). Old spellings (``--json``, ``--format READER`` on
ingest and run, ``--out DIR`` on report and run) keep working for one release and say what to
write instead (docs in the CHANGELOG).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from pipeline.errors import UserError

OUTPUT_FORMATS = ("table", "csv", "json", "parquet")


def deprecated(old: str, new: str) -> None:
    """One line on stderr: the spelling still works this release, and what replaces it."""
    click.echo(f"warning: {old} is deprecated and goes in the next release; use {new}", err=True)


def output_options(
    formats: tuple[str, ...] = OUTPUT_FORMATS,
    default: str | None = "table",
    *,
    out: bool = True,
    json_flag: bool = False,
    reader_alias: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format FMT`` (and ``--out FILE`` unless ``out=False``) for a command's result.

    The command receives ``fmt`` (one of ``formats``, or ``default``) and ``out`` (a Path or
    None). ``json_flag``: the old ``--json`` flag is accepted as ``--format json``.
    ``reader_alias``: a value that is not an output format is taken as the old ``--format
    READER`` and passed on as ``reader`` (ingest and run), since no reader is named like an
    output format."""
    shown = "|".join(formats)

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            fmt = kw.pop("fmt")
            if fmt is not None and fmt not in OUTPUT_FORMATS and reader_alias:
                deprecated(f"--format {fmt} (a reader)", f"--reader {fmt}")
                kw["reader"] = kw.get("reader") or fmt
                fmt = None
            if kw.pop("as_json", False):
                deprecated("--json", "--format json")
                fmt = fmt or "json"
            if fmt is not None and fmt not in formats:
                raise click.BadParameter(f"{fmt!r}: choose one of {shown}", param_hint="'--format'")
            if fmt == "parquet" and kw.get("out") is None:
                raise UserError("--format parquet needs --out FILE (it writes a file)")
            kw["fmt"] = fmt or default
            return f(*args, **kw)

        opts = [
            click.option(
                "--format",
                "-f",
                "fmt",
                default=None,
                metavar="|".join(formats),
                help=f"Output format [default: {default or 'table on a terminal, else csv'}].",
            )
        ]
        if out:
            opts.append(
                click.option(
                    "--out",
                    "-o",
                    type=click.Path(dir_okay=False, path_type=Path),
                    default=None,
                    help="Write the result to this file instead of stdout.",
                )
            )
        if json_flag:
            opts.append(click.option("--json", "as_json", is_flag=True, hidden=True))
        for opt in reversed(opts):
            wrapper = opt(wrapper)
        return wrapper

    return deco


reader_option = click.option(
    "--reader",
    default=None,
    metavar="NAME",
    help="Force an input reader instead of detecting it (`pipeline formats` lists them).",
)


def out_dir_option(default: Path, what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--out-dir DIR`` (the old ``--out`` / ``-o DIR`` kept for one release)."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            old = kw.pop("old_out_dir")
            if old is not None:
                deprecated(f"--out {old} (a folder)", f"--out-dir {old}")
                kw["out_dir"] = old if kw["out_dir"] is None else kw["out_dir"]
            kw["out_dir"] = kw["out_dir"] or default
            return f(*args, **kw)

        wrapper = click.option(
            "--out", "-o", "old_out_dir", hidden=True, default=None,
            type=click.Path(file_okay=False, path_type=Path),
        )(wrapper)  # fmt: skip
        return click.option(
            "--out-dir",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help=f"{what} [default: {default}].",
        )(wrapper)

    return deco


def param_option(help: str = "Bind $KEY in the SQL (repeatable).") -> Callable[..., Any]:
    return click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE", help=help)


def parse_params(params: tuple[str, ...] | list[str], typed: bool = False) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict. Values stay text (a named query casts them to its declared
    parameters' types) unless ``typed``: then numbers and booleans are read as such, for SQL
    that declares nothing (attribute's predicates)."""
    from pipeline.query.named import coerce

    out: dict[str, Any] = {}
    for p in params:
        key, sep, value = p.partition("=")
        if not sep or not key.isidentifier():
            raise UserError(f"--param {p}: expected KEY=VALUE")
        out[key] = coerce(value) if typed else value
    return out


def duckdb_only(why: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--engine`` on a command that runs on DuckDB only: duckdb is accepted, spark refused."""
    from pipeline.engines import ENGINES

    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        if value != "duckdb":
            raise click.BadParameter(
                f"pipeline {ctx.info_name} runs on DuckDB only ({why}); "
                "drop --engine or give --engine duckdb",
                ctx=ctx,
                param=param,
            )
        return value

    return click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="duckdb",
        show_default=True,
        expose_value=False,
        callback=check,
        help=f"Accepted for the same words everywhere; DuckDB only here ({why}).",
    )
