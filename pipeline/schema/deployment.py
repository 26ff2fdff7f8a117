"""The deployment key: what makes two requests the same server, declared once.

Two runs belong to one deployment when every part below is equal (after the defaults, which
stand for what a log that leaves a part out means). Everything that groups or joins by
deployment is generated from :data:`KEY`: the fit's :class:`GroupKey`, the SQL column lists of
fit, calibration, attribution and replay, the ``deployment`` column of the ``requests`` view
(one string, so named queries join on one column whatever the key holds), the key columns of the
derived tables (``cost_models``, ``calibration``, ``validation``) and the exported JSON Schema.
Adding a part here is the only edit a new deployment column needs.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pipeline.schema.column import I32, B, Column, S


@dataclass(frozen=True)
class Part:
    """One part of the key: a column of ``requests`` and the value a missing one stands for."""

    name: str
    type: pa.DataType
    unit: str
    doc: str
    default: str | int | None = None
    required: bool = False  # no deployment without it (a row lacking it is never grouped)


KEY: tuple[Part, ...] = (
    Part("model", S, "", "Model name as logged.", required=True),
    Part("gpu", S, "", "Accelerator type.", required=True),
    Part("gpu_count", I32, "GPUs", "GPUs serving one replica.", 1),
    Part("engine", S, "", "Serving engine."),
    Part("engine_version", S, "", "Serving engine version."),
    Part("max_num_seqs", I32, "sequences", "Max concurrent sequences per step."),
    Part("max_batched_tokens", I32, "tokens", "Max tokens per engine step."),
    Part("chunked_prefill", B, "", "Chunked prefill enabled."),
    Part("attention", S, "", "Attention implementation."),
    Part("weight_dtype", S, "", "Weight dtype.", "bf16"),
    Part("kv_dtype", S, "", "KV-cache dtype.", "bf16"),
)
NAMES: tuple[str, ...] = tuple(p.name for p in KEY)
ID_COLUMN = "deployment"
_SEP = "|"
_NULL = "-"  # a part the log leaves out and that has no default, in the id string

# The fit's group key (a named tuple: hashable, ordered as KEY). Required parts come first and
# have no default, so GroupKey("m", "g") is a deployment with every other part as a log that
# does not record it.
GroupKey = namedtuple(  # type: ignore[misc]  # generated from KEY on purpose
    "GroupKey", NAMES, defaults=[p.default for p in KEY if not p.required]
)
GroupKey.__doc__ = "One deployment: its parts in KEY order (pipeline.schema.deployment)."


def _literal(v: str | int) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


def expr(part: Part, alias: str = "") -> str:
    """SQL for one part of a row of ``requests`` (``alias``: table alias, without the dot)."""
    col = f"{alias}.{part.name}" if alias else part.name
    return col if part.default is None else f"coalesce({col}, {_literal(part.default)})"


def sql_columns(alias: str = "") -> list[str]:
    """The key's SQL expressions in KEY order, defaults applied."""
    return [expr(p, alias) for p in KEY]


def sql_select(alias: str = "", prefix: str = "") -> str:
    """``expr AS prefix+name, ...`` for a SELECT list."""
    pairs = zip(sql_columns(alias), KEY, strict=True)
    return ", ".join(f"{e} AS {prefix}{p.name}" for e, p in pairs)


def id_sql(alias: str = "") -> str:
    """SQL of the ``deployment`` id string; :func:`key_id` gives the same string in Python.

    Booleans print as true/false and integers in decimal in both DuckDB and Spark, so the id is
    the same on either engine."""
    parts = [f"coalesce(CAST({e} AS VARCHAR), '{_NULL}')" for e in sql_columns(alias)]
    return f"concat_ws('{_SEP}', {', '.join(parts)})"


def _get(key: Any, name: str) -> Any:
    return key.get(name) if isinstance(key, Mapping) else getattr(key, name)


def key_id(key: Any) -> str:
    """The ``deployment`` id of a GroupKey, a row (mapping) or any object with the key's parts."""
    out = []
    for p in KEY:
        v = _get(key, p.name)
        v = p.default if v is None else v
        if isinstance(v, bool):  # as SQL's CAST(bool AS VARCHAR) prints it
            v = "true" if v else "false"
        out.append(_NULL if v is None else str(v))
    return _SEP.join(out)


def row(key: Any) -> dict[str, Any]:
    """A derived-table row's key columns (defaults applied) and its ``deployment`` id."""
    values = {
        p.name: p.default if getattr(key, p.name) is None else getattr(key, p.name) for p in KEY
    }
    return values | {ID_COLUMN: key_id(key)}


def from_row(row: dict[str, Any]) -> Any:
    """The GroupKey of a row that has the key's columns (defaults applied)."""
    return GroupKey(*(row.get(p.name) if row.get(p.name) is not None else p.default for p in KEY))


def request_columns() -> tuple[Column, ...]:
    """The key's columns as ``requests`` stores them: as logged, every one nullable."""
    return tuple(Column(p.name, p.type, p.unit, p.doc) for p in KEY)


def columns() -> tuple[Column, ...]:
    """The key's columns in a derived table (defaults applied), then the ``deployment`` id."""
    out = [
        Column(
            p.name,
            p.type,
            p.unit,
            p.doc + (f" Missing in the log: {p.default}." if p.default is not None else ""),
            nullable=not p.required and p.default is None,
        )
        for p in KEY
    ]
    doc = "The deployment key as one string (schema.deployment.id_sql): join on it."
    return (*out, Column(ID_COLUMN, S, "", doc, nullable=False))
