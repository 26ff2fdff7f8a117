"""Frames from batches of a streamed JSON array's elements, the same as ``records_frame`` gives
for the whole list (its text columns, ``_raw``), so a streamed reader and the whole-document
reader it stands in for write identical tables. Used by the GuideLLM reader and the request
mapping's JSON documents; the elements come from ``json_elements.ElementArray.batches``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import polars as pl

from pipeline.readers import json_elements as je
from pipeline.readers.base import RAW_LIMIT, InputError, ReadContext
from pipeline.readers.json_text import compact_json, decode_text
from pipeline.readers.vllm_bench import Source, open_source

KEY_SAMPLE = 1000  # records_frame takes the columns from the first 1000 records of a list
T = TypeVar("T")


def located(ctx: ReadContext, find: Callable[[Source], T | None]) -> T | None:
    """``find`` run on the file opened for streaming (a compressed one spilled decompressed to
    a temporary file). None, with the file closed, when ``find`` returns None or fails on
    something the structural scan does not model: the caller's whole-document path then reads
    the file and its errors stay what they always were. Otherwise the caller closes it."""
    src = open_source(ctx)
    try:
        found = find(src)
    except Exception:
        found = None
    if found is None:
        src.close()
    return found


def sample_schema(arr: je.ElementArray) -> dict[str, pl.DataType] | None:
    """The columns records_frame would give the whole list: the keys of its first 1000
    records, in order (Python json on at most 1000 elements); None when one is invalid JSON."""
    keys: dict[str, None] = {}
    seen = 0
    for _, chunk, _ in arr.batches(max_rows=KEY_SAMPLE):
        for line in chunk.decode("utf-8").split("\n")[: KEY_SAMPLE - seen]:  # <= 1000 in all
            try:
                r = json.loads(line)
            except (ValueError, RecursionError):
                return None
            if isinstance(r, dict):
                keys.update(dict.fromkeys(r))
            seen += 1
        if seen >= KEY_SAMPLE:
            break
    return {k: pl.Utf8() for k in keys}


def not_object_lines(lines: pl.Series, is_object: np.ndarray) -> pl.Series:
    """Non-object elements wrapped as records_frame wraps them (``{"_not_an_object": x}``)."""
    if is_object.all():
        return lines
    wrapped = pl.lit('{"_not_an_object": ') + pl.col("_raw") + pl.lit("}")
    return (
        lines.to_frame()
        .select(pl.when(pl.Series(is_object)).then(pl.col("_raw")).otherwise(wrapped))
        .to_series()
        .alias("_raw")
    )


def batch_frame(
    chunk: bytearray,
    is_object: np.ndarray,
    schema: dict[str, pl.DataType],
    invalid: Callable[[], None],
) -> pl.DataFrame:
    """One batch of elements as records_frame makes a list: text columns, ``_raw`` (1-based
    ``_line`` is added by the caller). The elements' own text is parsed by Polars; a batch it
    rejects (NaN, a number too large for a float) goes through Python's json and ``compact_json``
    exactly as records_frame does; an element Python's json rejects calls ``invalid``, which
    raises the reader's error."""
    lines = pl.Series("_raw", chunk.decode("utf-8").split("\n"), dtype=pl.Utf8)
    lines = not_object_lines(lines.str.strip_chars(" \t"), is_object)
    payload = chunk if is_object.all() else "\n".join(lines.to_list()).encode()
    read_schema = schema or {"_x": pl.Utf8()}
    try:
        df = pl.read_ndjson(io.BytesIO(payload), schema=read_schema)
        if df.height != lines.len():
            raise ValueError("element count differs")
    except Exception:  # error path: values Polars' parser refuses
        try:
            texts = [compact_json(json.loads(t)) for t in lines.to_list()]
        except (ValueError, RecursionError):
            invalid()  # raises the reader's error for invalid JSON (the whole path's, say)
            raise
        lines = pl.Series("_raw", texts, dtype=pl.Utf8)
        df = pl.read_ndjson(io.BytesIO("\n".join(texts).encode()), schema=read_schema)
    return df.with_columns(lines)


def redump_raw(q: pl.DataFrame, df: pl.DataFrame) -> pl.DataFrame:
    """Quarantine ``raw`` as the whole-document path writes it: the element re-dumped by
    Python's json (file text can differ in spacing, escapes and number spelling)."""
    full = df.filter(pl.col("_line").is_in(q["line"].implode())).select("_line", "_raw")
    by_line = dict(zip(full["_line"].to_list(), full["_raw"].to_list(), strict=True))
    raws = []
    for line, raw in zip(q["line"].to_list(), q["raw"].to_list(), strict=True):  # bad rows only
        try:
            raws.append(compact_json(json.loads(by_line[line]))[:RAW_LIMIT])
        except (KeyError, ValueError, RecursionError):
            raws.append(raw)
    return q.with_columns(pl.Series("raw", raws, dtype=pl.Utf8))


def array_at(src: Source, keys: list[str]) -> je.ElementArray | None:
    """The array at ``doc[keys[0]][keys[1]]...`` (the document itself when ``keys`` is empty),
    located by the structural scan; None unless Python's json would find that very array there:
    the rest of the document is parsed with the array replaced by a placeholder (so invalid JSON
    elsewhere, a duplicate key or an escaped key sends the caller to its whole-document path)."""
    st = je.scan(src, len(keys) + 1)
    if st is None or st.close_of(0) != st.pos.size - 1:
        return None  # not one JSON value
    at: int | None = 0
    for key in keys:
        at = je.members(src, st, at).get(key.encode())
        if at is None:
            return None
    arr = je.array_elements(src, st, at)
    if arr is None:
        return None
    placeholder = "\x00streamed-array"
    text = src.read(0, arr.begin) + b'"\\u0000streamed-array"' + src.read(arr.end, src.size)
    try:
        doc = json.loads(decode_text(text))
    except (InputError, ValueError, RecursionError):
        return None
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return arr if doc == placeholder else None
