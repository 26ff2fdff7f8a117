"""A large pretty-printed OTLP/JSON trace payload, read a batch of spans at a time.

One ``ExportTraceServiceRequest`` written as a single (indented) JSON value cannot be read line
by line, and parsed whole it costs several times its size in Python objects (a 1,000,000-span
payload is ~0.8 GB of text). The structural scan of ``json_elements`` finds every
``resourceSpans[i].scopeSpans[j].spans`` array; the rest of the document (resources, scopes:
small) is parsed by Python's json with each span array replaced by a placeholder, and the spans
are parsed a batch of whole elements at a time. Anything the scan does not model (several
payloads in one file, invalid JSON, a duplicate key) returns None and the reader parses the file
whole, as it always did, so its errors and quarantine rows stay the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.readers import element_frames as ef
from pipeline.readers import json_elements as je
from pipeline.readers.base import InputError, ReadContext
from pipeline.readers.json_text import decode_text
from pipeline.readers.vllm_bench import Source

# Levels kept by the scan: payload {0} > resourceSpans [1] > resource-spans {2} > scopeSpans [3]
# > scope-spans {4} > spans [5] > the span objects' own braces and separating commas (6).
_ELEMENT_LEVEL = 6
_SCOPES = (b"scopeSpans", b"instrumentationLibrarySpans")  # the second: OTLP before 0.15
_PLACEHOLDER = "\x00otlp-spans:"


@dataclass
class Plan:
    """The payload with each streamed span array replaced by a placeholder string, and those
    arrays by (resourceSpans index, scope key, scopeSpans index)."""

    src: Source
    doc: dict
    arrays: dict[tuple[int, str, int], tuple[int, je.ElementArray]]  # -> (placeholder, array)

    def spans(self, i: int, key: str, j: int, ss: Any) -> je.ElementArray | None:
        """The streamed array of ``resourceSpans[i].<key>[j]``, if that is where the scan put
        one (checked by position and placeholder, so no string in a file can pose as one)."""
        k, arr = self.arrays.get((i, key, j), (-1, None))
        if arr is None or not isinstance(ss, dict):
            return None
        return arr if ss.get("spans") == f"{_PLACEHOLDER}{k}" else None

    def close(self) -> None:
        self.src.close()


def plan(ctx: ReadContext) -> Plan | None:
    """The streamed reading of the file, or None (the whole-document path reads it)."""
    return ef.located(ctx, _locate)


def _locate(src: Source) -> Plan | None:
    st = je.scan(src, _ELEMENT_LEVEL)
    if st is None or st.char[0] != ord("{") or st.level[0] != 0:
        return None
    if st.close_of(0) != st.pos.size - 1:
        return None  # more than one payload in the file: the whole path reads them in turn
    ri = je.members(src, st, 0).get(b"resourceSpans")
    resources = je.array_elements(src, st, ri) if ri is not None else None
    if resources is None:
        return None
    found: list[tuple[tuple[int, str, int], je.ElementArray]] = []
    for i in np.flatnonzero(resources.is_object).tolist():  # one per resource
        oi = int(np.searchsorted(st.pos, resources.starts[i]))  # the resource-spans "{"
        for key, si in je.members(src, st, oi).items():
            if key not in _SCOPES or si is None or st.char[si] != ord("["):
                continue
            scopes = je.array_elements(src, st, si)
            if scopes is None:
                return None
            for j in np.flatnonzero(scopes.is_object).tolist():  # one per instrumentation scope
                sj = int(np.searchsorted(st.pos, scopes.starts[j]))
                ai = je.members(src, st, sj).get(b"spans")
                if ai is None or st.char[ai] != ord("["):
                    continue
                arr = je.array_elements(src, st, ai)
                if arr is None:
                    return None
                found.append(((i, key.decode(), j), arr))
    if not found:
        return None
    found.sort(key=lambda f: f[1].begin)  # placeholder k is the k-th array in file order
    pieces: list[bytes] = []
    prev = 0
    for k, (_, arr) in enumerate(found):
        pieces += [src.read(prev, arr.begin), f'"\\u0000otlp-spans:{k}"'.encode()]
        prev = arr.end
    pieces.append(src.read(prev, src.size))
    try:
        doc = json.loads(decode_text(b"".join(pieces)))
    except (InputError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    return Plan(src, doc, {where: (k, arr) for k, (where, arr) in enumerate(found)})


def span_batches(arr: je.ElementArray, max_rows: int) -> Iterator[list[Any]]:
    """The array's spans as Python values, a batch of whole elements at a time. Python's json
    parses them, as it parses the whole document, so every value is the same as on that path;
    an element it rejects raises InputError naming the span and its byte offset."""
    for first, chunk, _ in arr.batches(max_rows=max_rows):
        texts = chunk.decode("utf-8").split("\n")
        del chunk
        try:
            yield json.loads("[" + ",".join(texts) + "]")
        except (ValueError, RecursionError):
            for k, text in enumerate(texts):
                try:
                    json.loads(text)
                except (ValueError, RecursionError) as exc:
                    at = int(arr.starts[first + k])
                    raise InputError(
                        f"span {first + k + 1} of the payload (byte {at}) is not valid JSON: "
                        f"{exc}; the spans before it were read"
                    ) from None
            raise InputError("a batch of spans is not valid JSON") from None
