"""Metadata a log lacks: ``--set COLUMN=VALUE`` and run-manifest files beside the logs.

A run manifest is a TOML file named ``<log file>.run.toml`` (for one file) or ``run.toml`` (for
every file in its folder), holding ``COLUMN = value`` pairs for the metadata columns of
``requests``. Values fill only what the log itself leaves empty; ``--set`` wins over a manifest.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import polars as pl

from pipeline.readers.base import CANONICAL_SCHEMA
from pipeline.schema.record import METADATA_COLUMNS

_BOOL = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False}


class MetadataError(ValueError):
    pass


def parse_value(column: str, value: object) -> object:
    """Turn a --set or manifest value into the column's type, or say what is wrong."""
    if column not in METADATA_COLUMNS:
        known = ", ".join(METADATA_COLUMNS)
        raise MetadataError(f"--set {column}: not a metadata column; choose one of: {known}")
    dtype = CANONICAL_SCHEMA[column]
    text = str(value).strip()
    try:
        if dtype == pl.Int64:
            n = int(text)
            if n < 1:
                raise ValueError
            return n
        if dtype == pl.Boolean:
            if isinstance(value, bool):
                return value
            return _BOOL[text.lower()]
    except (ValueError, KeyError):
        kind = "a positive integer" if dtype == pl.Int64 else "true or false"
        raise MetadataError(f"--set {column}={text}: {column} must be {kind}") from None
    return text


def parse_sets(pairs: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise MetadataError(f"--set {pair}: expected COLUMN=VALUE, e.g. --set gpu=H100-SXM")
        k, v = pair.split("=", 1)
        out[k.strip()] = parse_value(k.strip(), v)
    return out


def run_manifest(path: Path) -> dict[str, object]:
    """Metadata from <file>.run.toml, else run.toml in the file's folder (empty if neither)."""
    for candidate in (path.with_name(path.name + ".run.toml"), path.parent / "run.toml"):
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text())
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise MetadataError(f"{candidate}: not valid TOML ({exc})") from exc
            return {k: parse_value(k, v) for k, v in data.items()}
    return {}


def is_manifest(path: Path) -> bool:
    return path.name == "run.toml" or path.name.endswith(".run.toml")


def apply(df: pl.DataFrame, values: dict[str, object]) -> pl.DataFrame:
    """Fill nulls of metadata columns with the given values."""
    if not values or df.height == 0:
        return df
    return df.with_columns(
        [pl.col(k).fill_null(pl.lit(v, dtype=CANONICAL_SCHEMA[k])) for k, v in values.items()]
    )
