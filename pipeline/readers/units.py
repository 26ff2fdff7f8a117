"""Units and numbers as tools write them: seconds per unit, lenient casts, Rust-style durations."""

from __future__ import annotations

import math

import polars as pl

# Seconds per unit of every unit a tool writes times in.
UNIT_SECONDS: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "seconds": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
}


MAX_COUNT = 2.0**53  # token counts above this are not counts (and overflow Int64 casts)


def as_float(v: object) -> float | None:
    """A scalar the tool wrote as a number, or a numeric string ("inf", "550"); else None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def as_int(v: object) -> int | None:
    f = as_float(v)
    if f is None or not math.isfinite(f) or f != int(f):
        return None
    return int(f)


_DURATION_RE = r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\s*(ns|µs|μs|us|ms|s|m|h)\s*$"


def rust_duration(expr: pl.Expr) -> pl.Expr:
    """Rust ``Duration`` debug text (``986.53ms``, ``681.374µs``, ``1.2s``) in seconds."""
    text = expr.cast(pl.Utf8)
    value = text.str.extract(_DURATION_RE, 1).cast(pl.Float64, strict=False)
    unit = text.str.extract(_DURATION_RE, 2)
    scale = (
        pl.when(unit == "ns")
        .then(1e-9)
        .when(unit.is_in(["µs", "μs", "us"]))
        .then(1e-6)
        .when(unit == "ms")
        .then(1e-3)
        .when(unit == "s")
        .then(1.0)
        .when(unit == "m")
        .then(60.0)
        .when(unit == "h")
        .then(3600.0)
        .otherwise(None)
    )
    return value * scale
