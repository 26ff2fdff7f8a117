"""Metadata a log lacks: ``--set COLUMN=VALUE`` and run-manifest files beside the logs.

A run manifest is a TOML file named ``<log file>.run.toml`` (for one file) or ``run.toml`` (for
every file in its folder), or one given with ``pipeline ingest --manifest FILE`` (for every file
of that command), holding ``COLUMN = value`` pairs for the metadata columns of ``requests``.
Values fill only what the log itself leaves empty; ``--set`` wins over a manifest.

A manifest may also describe a disaggregated deployment with a ``[disaggregation]`` table, the
keys of whatif.toml's (``prefill_tp``, ``decode_tp``, ``prefill_replicas``, ``decode_replicas``,
``kv_bandwidth_gbps``, ``kv_latency_s``) plus each instance's scheduler limits
(``prefill_max_num_seqs``, ``prefill_max_batched_tokens``, ``decode_max_num_seqs``,
``decode_max_batched_tokens``); it is kept in the run's ``runs.metadata_json`` and
``pipeline fit`` calibrates such runs as a prefill and a decode instance.
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
    if column in ("gpu", "model"):
        _in_catalog(column, text)
    return text


def _in_catalog(column: str, text: str) -> None:
    """A GPU or model the user types must be one the catalog knows (and unambiguously)."""
    from pipeline import catalog

    try:
        catalog.typed_gpu(text) if column == "gpu" else catalog.model(text)
    except catalog.UnknownName as exc:
        raise MetadataError(f"--set {column}={text}: {exc}") from None


def parse_sets(pairs: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        if "=" not in pair:
            raise MetadataError(f"--set {pair}: expected COLUMN=VALUE, e.g. --set gpu=H100-SXM")
        k, v = pair.split("=", 1)
        out[k.strip()] = parse_value(k.strip(), v)
    return out


TABLES = {"disaggregation"}
# The per-instance scheduler limits (DistServe's --context-max-batch-size, --context-max-tokens-
# per-batch, --decoding-max-batch-size, --decoding-max-tokens-per-batch) are the manifest's only:
# `pipeline fit` reads them; a what-if's instances take theirs from whatif.toml's [scheduler].
_DISAGG_LIMITS = (
    "prefill_max_num_seqs", "prefill_max_batched_tokens",
    "decode_max_num_seqs", "decode_max_batched_tokens",
)  # fmt: skip
_DISAGG_INT = ("prefill_tp", "decode_tp", "prefill_replicas", "decode_replicas", *_DISAGG_LIMITS)
_DISAGG_FLOAT = ("kv_bandwidth_gbps", "kv_latency_s")


def _manifest_file(path: Path, explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    for candidate in (path.with_name(path.name + ".run.toml"), path.parent / "run.toml"):
        if candidate.is_file():
            return candidate
    return None


def _load(candidate: Path) -> dict[str, object]:
    try:
        return tomllib.loads(candidate.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        raise MetadataError(f"{candidate}: not valid TOML ({exc})") from exc


def run_manifest(path: Path, explicit: Path | None = None) -> dict[str, object]:
    """Column values from the manifest (``explicit``, else <file>.run.toml, else run.toml in
    the file's folder); empty if there is none."""
    candidate = _manifest_file(path, explicit)
    if candidate is None:
        return {}
    data = _load(candidate)
    unknown = [k for k, v in data.items() if isinstance(v, dict) and k not in TABLES]
    if unknown:
        raise MetadataError(f"{candidate}: unknown table [{unknown[0]}]; known: [disaggregation]")
    return {k: parse_value(k, v) for k, v in data.items() if not isinstance(v, dict)}


def manifest_tables(path: Path, explicit: Path | None = None) -> dict[str, dict[str, object]]:
    """The manifest's tables (``[disaggregation]``), checked, for ``runs.metadata_json``."""
    candidate = _manifest_file(path, explicit)
    if candidate is None:
        return {}
    out = {}
    d = _load(candidate).get("disaggregation")
    if isinstance(d, dict):
        clean: dict[str, object] = {}
        for k, v in d.items():
            if k == "enabled":
                clean[k] = bool(v)
            elif k in _DISAGG_INT and isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                clean[k] = v
            elif k in _DISAGG_FLOAT and isinstance(v, int | float) and v >= 0:
                clean[k] = float(v)
            else:
                keys = ", ".join(("enabled", *_DISAGG_INT, *_DISAGG_FLOAT))
                raise MetadataError(
                    f"{candidate}: [disaggregation] {k} = {v!r}: expected one of {keys} "
                    "with a positive number (tp and replicas whole)"
                )
        if clean.get("enabled", True):
            out["disaggregation"] = clean
    return out


def is_manifest(path: Path) -> bool:
    return path.name == "run.toml" or path.name.endswith(".run.toml")


def apply_metadata(df: pl.DataFrame, values: dict[str, object]) -> pl.DataFrame:
    """Fill nulls of metadata columns with the given values."""
    if not values or df.height == 0:
        return df
    return df.with_columns(
        [pl.col(k).fill_null(pl.lit(v, dtype=CANONICAL_SCHEMA[k])) for k, v in values.items()]
    )
