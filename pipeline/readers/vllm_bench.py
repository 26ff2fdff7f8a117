"""vLLM ``benchmark_serving.py`` / ``vllm bench serve`` result JSON.

One JSON object per run (``--save-result``), several concatenated ones (``--append-result``). With
``--save-detailed`` the object carries parallel per-request arrays: ``input_lens``, ``output_lens``,
``ttfts`` (s), ``itls`` (per-chunk gaps, s), ``errors``, and in newer versions ``start_times``
(perf_counter, s) and ``latencies`` (s). Aggregates (``*_ms`` etc.) go to ``run_summaries``.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.files.sources import spill
from pipeline.readers.base import (
    Capabilities,
    InputError,
    ReadContext,
    ReaderOutput,
    empty_requests,
)
from pipeline.readers.columns import bad_count, cum_token_times, ones_if_per_token
from pipeline.readers.engine_names import engine_from_backend
from pipeline.readers.frames import (
    empty_quarantine,
    float_list_series,
    float_series,
    quarantine_frame,
    requests_frame,
    runs_frame,
    split_valid,
    summaries_frame,
)
from pipeline.readers.json_text import decode_text, iter_json_documents
from pipeline.readers.sniff import head_text
from pipeline.readers.units import as_float

PRIORITY = 20

ARRAY_KEYS = frozenset(
    {
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "start_times",
        "latencies",
        "queue_times",
        "generated_texts",
        "errors",
    }
)
# Setup keys: run metadata, not measurements.
SETUP_KEYS = frozenset(
    {
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "best_of",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "ramp_up_strategy",
        "ramp_up_start_rps",
        "ramp_up_end_rps",
        "dataset_name",
        "tag",
        "sharegpt_output_len",
        "random_input_len",
        "random_output_len",
        "random_range_ratio",
        "server_info",
    }
)
_METRIC_HINTS = ('"mean_ttft_ms"', '"median_ttft_ms"', '"ttfts"', '"request_throughput"')

# Columnar fast path: files at least this large (decompressed) have their numeric per-request
# arrays parsed by Polars straight into columns instead of into Python lists.
COLUMNAR_MIN_BYTES = 32 * 1024 * 1024
NUMERIC_ARRAYS = ("input_lens", "output_lens", "ttfts", "start_times", "latencies", "queue_times")
_ARRAY_START = re.compile(
    rb'"(' + b"|".join(k.encode() for k in (*NUMERIC_ARRAYS, "itls")) + rb')"\s*:\s*\['
)
_NESTED_END = re.compile(rb"\]\s*\]")
_ARRAY_END = re.compile(rb"\]")
# Bytes a JSON array of numbers (or of lists of numbers, or nulls) can consist of; anything else
# (strings, true/false, objects) sends the file down the JSON path, which handles odd types.
_NUMERIC_BYTES = b"0123456789.eE+-,[] \t\r\nnul"
_SPAN = "\x00vllm_bench-array:"


def run_ids(ctx: ReadContext, n: int) -> list[str]:
    """One run: the file's run id; several: ``<id>#<k>`` (k = 1-based run in the file)."""
    if n == 1:
        return [ctx.default_run_id]
    return [f"{ctx.default_run_id}#{k}" for k in range(1, n + 1)]


def split_run(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, summary metrics) of one result object, per-request arrays left out."""
    meta: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for k, v in obj.items():
        if k in ARRAY_KEYS:
            continue
        if k in SETUP_KEYS or isinstance(v, str | dict | list) or v is None or isinstance(v, bool):
            meta[k] = v
        else:
            metrics[k] = v
    return meta, metrics


def _is_array(v: object) -> bool:
    """A per-request array: a Python list (JSON parse), a Series or the streamed ``itls``."""
    return isinstance(v, list | pl.Series | LazyItls)


def per_request_arrays(
    obj: dict[str, Any], run_id: str, model: str | None, engine: str | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Canonical rows (and quarantine) from vLLM/SGLang parallel per-request arrays.

    An array is a Python list (from ``json``) or an already parsed Series (columnar fast path);
    both become one frame and go through :func:`requests_from_arrays`.
    """
    lists = {k: obj.get(k) for k in ARRAY_KEYS}
    n = max((len(v) for v in lists.values() if _is_array(v)), default=0)
    if n == 0:
        return empty_requests(), empty_quarantine()

    def pad(v: object) -> list[Any]:
        v = v if isinstance(v, list) else []
        return v + [None] * (n - len(v))

    def column(key: str, name: str, nested: bool = False) -> pl.Series:
        v = lists[key]
        if isinstance(v, pl.Series):
            return v.alias(name).extend_constant(None, n - v.len())
        return (float_list_series if nested else float_series)(pad(v), name)

    df = pl.DataFrame(
        [
            column("input_lens", "in"),
            column("output_lens", "out"),
            column("ttfts", "ttft"),
            column("itls", "itl", nested=True),
            column("start_times", "start"),
            column("latencies", "lat"),
            *_error_series(pad(lists["errors"])),
        ]
    )
    return requests_from_arrays(
        df,
        run_id,
        model,
        engine,
        have_start=_is_array(lists["start_times"]),
        have_lat=_is_array(lists["latencies"]),
        have_itls=_is_array(lists["itls"]),
    )


def per_request_batches(
    obj: dict[str, Any], run_id: str, model: str | None, engine: str | None
) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """:func:`per_request_arrays` in batches of requests when ``itls`` is streamed.

    The scalar arrays are held whole (8 bytes per request each); the per-token ``itls`` are
    parsed one window of the file at a time, so memory stays bounded by the window, not the run.
    """
    itls = obj.get("itls")
    if not isinstance(itls, LazyItls):
        yield per_request_arrays(obj, run_id, model, engine)
        return
    scalars = {k: obj.get(k) for k in ARRAY_KEYS if k != "itls"}
    n_scalar = max((len(v) for v in scalars.values() if _is_array(v)), default=0)

    def rows(a: int, b: int, itl: pl.Series | None) -> tuple[pl.DataFrame, pl.DataFrame]:
        k = b - a

        def column(key: str, name: str) -> pl.Series:
            v = scalars[key]
            if isinstance(v, pl.Series):
                part = v.slice(a, k)
                return part.alias(name).extend_constant(None, k - part.len())
            v = v if isinstance(v, list) else []
            return float_series(v[a:b] + [None] * (k - len(v[a:b])), name)

        errs = scalars["errors"] if isinstance(scalars["errors"], list) else []
        errs = errs[a:b] + [None] * (k - len(errs[a:b]))
        df = pl.DataFrame(
            [
                column("input_lens", "in"),
                column("output_lens", "out"),
                column("ttfts", "ttft"),
                (
                    itl if itl is not None else pl.Series([None] * k, dtype=pl.List(pl.Float64))
                ).alias("itl"),
                column("start_times", "start"),
                column("latencies", "lat"),
                *_error_series(errs),
            ]
        )
        return requests_from_arrays(
            df,
            run_id,
            model,
            engine,
            have_start=_is_array(scalars["start_times"]),
            have_lat=_is_array(scalars["latencies"]),
            have_itls=True,
            first_line=a + 1,
        )

    done = 0
    for itl in itls.batches():
        if itl.len():
            yield rows(done, done + itl.len(), itl)
            done += itl.len()
    if n_scalar > done:  # the other arrays are longer than itls: padded as on the JSON path
        yield rows(done, n_scalar, None)


def requests_from_arrays(
    df: pl.DataFrame,
    run_id: str,
    model: str | None,
    engine: str | None,
    *,
    have_start: bool,
    have_lat: bool,
    have_itls: bool,
    first_line: int = 1,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Validate and convert one run's per-request columns into canonical rows and quarantine.

    ``df`` has one row per array index and the columns ``in``, ``out``, ``ttft``, ``start``,
    ``lat`` (Float64), ``itl`` (List(Float64)), ``err`` (Utf8) and ``err_bad`` (Boolean: the
    ``errors`` entry is not a string); ``have_*`` say whether the file had that array at all.
    """
    n = df.height
    df = df.with_columns(
        pl.int_range(first_line, first_line + n).cast(pl.Int64, strict=False).alias("_line")
    )
    is_err = pl.col("err").fill_null("").str.len_chars() > 0
    df = df.with_columns(
        pl.struct(
            pl.col("in").alias("input_len"),
            pl.col("out").alias("output_len"),
            pl.col("ttft"),
            pl.col("start").alias("start_time"),
            pl.col("lat").alias("latency"),
            pl.col("err").alias("error"),
        )
        .struct.json_encode()
        .alias("_raw"),
        is_err.alias("_is_err"),
    )

    whole = bad_count

    checks: list[tuple[pl.Expr, str]] = [
        (whole(pl.col("in")), "input_lens entry is missing or not a whole number >= 0"),
        (whole(pl.col("out")), "output_lens entry is missing or not a whole number >= 0"),
        (
            ~pl.col("_is_err") & (pl.col("ttft").is_null() | ~pl.col("ttft").is_finite()),
            "ttfts entry of a successful request is missing or not a number",
        ),
        (
            ~pl.col("_is_err") & pl.col("itl").is_null() & pl.lit(have_itls),
            "itls entry is not a list of numbers",
        ),
        (pl.col("err_bad"), "errors entry is not a string"),
    ]
    if have_start:
        checks.append(
            (
                pl.col("start").is_null() | ~pl.col("start").is_finite(),
                "start_times entry is missing or not a number",
            )
        )
    if have_lat:
        checks.append(
            (
                ~pl.col("_is_err") & (pl.col("lat").is_null() | ~pl.col("lat").is_finite()),
                "latencies entry of a successful request is missing or not a number",
            )
        )
    good, q = split_valid(df, checks)
    arrival = pl.col("start") if have_start else pl.lit(0.0)
    ok = ~pl.col("_is_err")
    gaps = pl.col("itl").fill_null(pl.lit([], dtype=pl.List(pl.Float64)))
    token_times = cum_token_times(pl.col("ttft"), gaps)
    finish_rel = pl.col("lat") if have_lat else pl.col("ttft") + gaps.list.sum()
    out = good.with_columns(
        arrival.alias("arrival_ts"),
        pl.when(ok).then(token_times).otherwise(None).alias("token_times"),
    ).select(
        # request_id: the 0-based index into the tool's arrays.
        (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
        pl.col("_line").alias("source_line"),
        pl.lit(run_id).alias("run_id"),
        pl.lit(model, pl.Utf8).alias("model"),
        pl.lit(engine, pl.Utf8).alias("engine"),
        pl.col("in").cast(pl.Int64, strict=False).alias("prompt_tokens"),
        pl.col("out").cast(pl.Int64, strict=False).alias("output_tokens"),
        # Without start_times there is no common time axis (clock 'request', views: no t_arrival).
        pl.lit("relative" if have_start else "request").alias("clock"),
        pl.col("arrival_ts"),
        pl.when(ok).then(pl.col("arrival_ts") + pl.col("ttft")).alias("first_token_ts"),
        pl.when(ok | (pl.col("lat").fill_null(0) > 0))
        .then(pl.col("arrival_ts") + finish_rel)
        .alias("finish_ts"),
        pl.col("token_times"),
        pl.when(ok)
        .then(
            ones_if_per_token(
                pl.col("itl").list.len() + 1, pl.col("out").cast(pl.Int64, strict=False)
            )
        )
        .alias("token_counts"),
        pl.when(ok).then(pl.lit("ok")).otherwise(pl.lit("error")).alias("status"),
        pl.when(ok).then(None).otherwise(pl.col("err")).alias("error"),
    )
    return requests_frame(out), q


def _error_series(errs: list[Any]) -> tuple[pl.Series, pl.Series]:
    """(error text, entry-is-not-a-string flag) of the ``errors`` array."""
    try:
        err = pl.Series("err", errs, dtype=pl.Utf8, strict=True)
        return err, pl.Series("err_bad", [False] * len(errs))
    except Exception:  # error path: some entry is not a string
        return (
            pl.Series("err", [e if isinstance(e, str) else None for e in errs], dtype=pl.Utf8),
            pl.Series("err_bad", [not (e is None or isinstance(e, str)) for e in errs]),
        )


def _request_rate(v: object) -> float | None:
    f = as_float(v)
    return f if f is None or not math.isnan(f) else None


WINDOW = 64 * 1024 * 1024  # bytes of the file looked at (or parsed) at a time
_OVERLAP = 4096  # a pattern match is never longer than this


class Source:
    """The file's bytes, read a window at a time: an in-memory ``bytes`` (tests), a plain file, or
    an open descriptor (a compressed file spilled decompressed, ``files.sources.spill``), read
    with ``os.pread`` (no page-cache pages counted in this process). Closing it closes the fd."""

    def __init__(
        self, data: bytes | None = None, path: Path | None = None, fd: int | None = None
    ) -> None:
        self.data = data
        if fd is not None:
            self.fd = fd
        else:
            self.fd = os.open(path, os.O_RDONLY) if path is not None else -1
        self.size = len(data) if data is not None else os.fstat(self.fd).st_size

    def read(self, begin: int, end: int) -> bytes:
        end = min(end, self.size)
        if begin >= end:
            return b""
        if self.data is not None:
            return self.data[begin:end]
        parts, pos = [], begin
        while pos < end:
            got = os.pread(self.fd, end - pos, pos)
            if not got:
                break
            parts.append(got)
            pos += len(got)
        return b"".join(parts)

    def search(self, pattern: re.Pattern[bytes], pos: int) -> tuple[int, int, bytes] | None:
        """(start, end, group 1 or b"") of the first match at or after ``pos``."""
        while pos < self.size:
            w = self.read(pos, pos + WINDOW + _OVERLAP)
            m = pattern.search(w)
            if m and (m.end() <= WINDOW or pos + len(w) >= self.size):
                return pos + m.start(), pos + m.end(), (m.group(1) if m.groups() else b"")
            pos += WINDOW
        return None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LazyItls:
    """The ``itls`` array of one run, parsed a window of the file at a time (see batches)."""

    def __init__(self, src: Source, begin: int, end: int) -> None:
        self.src, self.begin, self.end = src, begin, end  # "[" ... "]" inclusive

    def batches(self) -> Iterator[pl.Series]:
        """The entries as List(Float64) Series, whole entries per window, in file order.

        A window Polars cannot parse (a ``null`` entry, odd nesting) is parsed by Python's json
        and sanitised exactly like the JSON path (:func:`float_list_series`); invalid JSON
        raises InputError, and ingest keeps what was read before it."""
        pos, body_end, size = self.begin + 1, self.end - 1, WINDOW
        while pos < body_end:
            w = self.src.read(pos, min(pos + size, body_end))
            if pos + len(w) < body_end:
                cut = w.rfind(b"]")
                if cut < 0:  # one entry longer than the window
                    size *= 2
                    continue
                w = w[: cut + 1]
            at, pos = pos, pos + len(w)
            body = w.lstrip(b" \t\r\n")
            if body.startswith(b","):
                body = body[1:]
            if not body.strip():
                continue
            yield _parse_itls_window(body, at)


def _parse_itls_window(body: bytes, at: int) -> pl.Series:
    try:
        return _parse_numeric_array(b"[" + body + b"]", True).alias("itl")
    except Exception:  # error path: nulls or odd entries, sanitised as on the JSON path
        try:
            values = json.loads(b"[" + body + b"]")
        except ValueError as exc:
            raise InputError(f"itls array is not valid JSON near byte {at:,} ({exc})") from exc
        return float_list_series(values, "itl")


def columnar_documents(data: bytes | Source) -> list[tuple[int, Any, str | None]] | None:
    """The file's JSON documents like :func:`iter_json_documents`, numeric arrays as Series.

    The large numeric arrays (``ttfts``, ...) are cut out of the text by byte offsets and parsed
    by Polars; ``itls`` is left in the file as a :class:`LazyItls` and parsed in windows when its
    requests are built, so memory does not grow with the per-token data. The small rest
    (metadata, ``errors``, ``generated_texts``) is parsed by Python's ``json`` exactly as on the
    JSON path, with each cut array replaced by a placeholder string (and as many newlines, so
    line numbers do not move). None when anything is unusual (odd bytes in an array, an array
    that is not where a top-level one should be, a Polars parse error): the caller then takes the
    JSON path, so results on bad input do not change.
    """
    src = data if isinstance(data, Source) else Source(data)
    spans: list[tuple[int, int, bool]] = []  # (start of "[", end after "]", nested)
    pos = 0
    while m := src.search(_ARRAY_START, pos):
        m_start, m_end, key = m
        if m_start and src.read(m_start - 1, m_start) == b"\\":
            return None  # inside an escaped string: leave such files to the JSON path
        nested = key == b"itls"
        begin = m_end - 1
        found = src.search(_NESTED_END if nested else _ARRAY_END, begin)
        end = found[1] if found else -1
        if end <= 0:
            return None  # truncated
        spans.append((begin, end, nested))
        pos = end
    if not spans:
        return None
    pieces: list[bytes] = []
    parsed: dict[str, pl.Series | LazyItls] = {}
    prev = 0
    try:
        for i, (begin, end, nested) in enumerate(spans):
            newlines = 0
            for w0 in range(begin, end, WINDOW):
                chunk = src.read(w0, min(w0 + WINDOW, end))
                if chunk.translate(None, _NUMERIC_BYTES):
                    return None
                newlines += chunk.count(b"\n")
            if nested:
                parsed[f"{_SPAN}{i}"] = LazyItls(src, begin, end)
            else:
                parsed[f"{_SPAN}{i}"] = _parse_numeric_array(src.read(begin, end), False)
            pieces += [src.read(prev, begin), f'"\\u0000vllm_bench-array:{i}"'.encode()]
            pieces.append(b"\n" * newlines)
            prev = end
    except Exception:  # error path: Polars rejects the array (bad number, bad nesting)
        return None
    pieces.append(src.read(prev, src.size))
    docs = list(iter_json_documents(decode_text(b"".join(pieces))))
    used = 0
    for _, obj, err in docs:
        if err is None and isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(v, str) and v in parsed:
                    if k not in ARRAY_KEYS or (k == "itls") != isinstance(parsed[v], LazyItls):
                        return None
                    obj[k] = parsed[v]
                    used += 1
    if used != len(spans):
        return None  # an array sat in a nested object or a duplicated key: JSON path
    return docs


def _parse_numeric_array(chunk: bytes, nested: bool) -> pl.Series:
    """A JSON array of numbers as Float64, or of lists of numbers as List(Float64)."""
    if not nested:
        doc = b'{"v":' + chunk + b"}"
        return pl.read_json(io.BytesIO(doc), schema={"v": pl.List(pl.Float64)})["v"][0]
    body = chunk[1:-1].strip()
    if not body:
        return pl.Series("v", [], dtype=pl.List(pl.Float64))
    if b"\n" in body or b"\r" in body:
        body = body.replace(b"\r", b" ").replace(b"\n", b" ")
    lines = b'{"v":' + body.replace(b"],", b']}\n{"v":') + b"}"
    del body
    return pl.read_ndjson(io.BytesIO(lines), schema={"v": pl.List(pl.Float64)})["v"]


@dataclass
class RunParts:
    """One benchmark run of a vLLM / SGLang result file, parsed."""

    run_id: str
    obj: dict[str, Any]
    model: str | None
    meta: dict[str, Any]
    metrics: dict[str, Any]
    request_rate: float | None


def assemble_runs(
    name: str, ctx: ReadContext, runs: list[RunParts], bad: list[tuple[int, str, Any]]
) -> Iterator[ReaderOutput]:
    """Runs and summaries, then each run's per-request rows in batches, then the unparseable."""
    summaries, run_rows = [], []
    for r in runs:
        backend = r.obj.get("backend") if isinstance(r.obj.get("backend"), str) else None
        run_rows.append(
            {
                "run_id": r.run_id,
                "model": r.model,
                "backend": backend,
                "request_rate": r.request_rate,
                "max_concurrency": r.obj.get("max_concurrency"),
                "metadata": r.meta,
            }
        )
        summaries.append(summaries_frame(name, ctx, r.run_id, r.metrics))
    yield ReaderOutput(runs=runs_frame(name, ctx, run_rows), run_summaries=pl.concat(summaries))
    for r in runs:
        backend = r.obj.get("backend") if isinstance(r.obj.get("backend"), str) else None
        engine = engine_from_backend(backend)
        for reqs, q in per_request_batches(r.obj, r.run_id, r.model, engine):
            yield ReaderOutput(
                requests=reqs if reqs.height else None, quarantine=q if q.height else None
            )
    if bad:
        q = quarantine_frame([b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad])
        yield ReaderOutput(quarantine=q)


class VllmBenchReader:
    name = "vllm_bench"
    description = (
        "vLLM benchmark_serving.py / `vllm bench serve` result JSON (--save-result, "
        "--append-result, --save-detailed). Summary keys -> run_summaries and runs; with "
        "--save-detailed also one request per array index (TTFT, per-chunk token_times, errors); "
        "arrivals from start_times (relative perf_counter clock) when present, else all at t=0. "
        "No GPU in the file: use --set gpu=... gpu_count=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=True,
        arrivals_only=False,
        gpu_model_present=True,
        needs_set=("gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        if not text.startswith("{"):
            return False
        return '"model_id"' in text and any(h in text for h in _METRIC_HINTS)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        src = open_source(ctx)
        try:
            yield from self._read(ctx, src)
        finally:
            src.close()

    def _read(self, ctx: ReadContext, src: Source) -> Iterator[ReaderOutput]:
        docs = columnar_documents(src) if src.size >= COLUMNAR_MIN_BYTES else None
        if docs is None:
            docs = list(iter_json_documents(decode_text(src.read(0, src.size))))
        if not docs:
            raise InputError("file is empty")
        good = [(line, obj) for line, obj, err in docs if err is None and isinstance(obj, dict)]
        bad = [
            (line, err or f"run record is a JSON {type(obj).__name__}, not an object", obj)
            for line, obj, err in docs
            if err is not None or not isinstance(obj, dict)
        ]
        if not good:
            raise InputError(f"no vLLM benchmark result object in the file ({bad[0][1]})")
        ids = run_ids(ctx, len(good))
        runs = []
        for (line, obj), run_id in zip(good, ids, strict=True):
            meta, metrics = split_run(obj)
            meta["source_line"] = line
            meta["per_request_arrays"] = sorted(k for k in ARRAY_KEYS if k in obj)
            meta["arrival_times_known"] = _is_array(obj.get("start_times"))
            model = obj.get("model_id") if isinstance(obj.get("model_id"), str) else None
            runs.append(
                RunParts(run_id, obj, model, meta, metrics, _request_rate(obj.get("request_rate")))
            )
        yield from assemble_runs(self.name, ctx, runs, bad)


def open_source(ctx: ReadContext) -> Source:
    """A plain file is read in windows from disk; a compressed one is first decompressed to an
    unlinked temporary file (``spill``), so memory stays bounded either way."""
    with open(ctx.path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == b"\x1f\x8b" or magic == b"\x28\xb5\x2f\xfd":
        return Source(fd=spill(ctx.path))
    return Source(path=ctx.path)


READER = VllmBenchReader()
