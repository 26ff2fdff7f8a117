"""Whole JSON documents: reading, decoding, strict parsing and compact dumping."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from pipeline.files.sources import iter_blocks
from pipeline.readers.base import (
    RAW_LIMIT,
    InputError,
    ReadContext,
)


def _json_default(o: object) -> object:
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return str(o)


def to_json(obj: object) -> str:
    """JSON text of run metadata; non-finite floats and odd objects become strings."""

    def clean(o: object) -> object:
        if isinstance(o, float) and not math.isfinite(o):
            return str(o)
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, list | tuple):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(obj), sort_keys=True, default=_json_default, allow_nan=False)


def read_all(ctx: ReadContext) -> bytes:
    """The whole decompressed file (for formats that are one JSON document)."""
    return b"".join(iter_blocks(ctx.path))


def decode_text(data: bytes, what: str = "file") -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc})") from exc


def load_json(ctx: ReadContext) -> Any:
    """Parse the file as one JSON document (Python's json: accepts NaN/Infinity)."""
    text = decode_text(read_all(ctx))
    if not text.strip():
        raise InputError("file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON (truncated or corrupt?) at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}"
        ) from exc


def iter_json_documents(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """Concatenated JSON values (one per line or pretty-printed): (line, value, error)."""
    dec = json.JSONDecoder()
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            return
        line = text.count("\n", 0, pos) + 1
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield line, text[pos : pos + RAW_LIMIT], f"invalid or truncated JSON: {exc.msg}"
            return
        yield line, obj, None
        pos = end


def compact_json(obj: Any) -> str:
    """JSON text of one element; a number too large for a float (1e309 -> inf) stays text, so
    the reader's checks quarantine it ("not a number") instead of the parser failing."""
    try:
        return json.dumps(obj, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), default=str)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"non-finite number {obj!r}"  # text on purpose: not castable to a float
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
