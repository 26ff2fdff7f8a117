"""vLLM ``benchmark_serving.py`` / ``vllm bench serve`` result JSON.

One JSON object per run (``--save-result``), several concatenated ones (``--append-result``). With
``--save-detailed`` the object carries parallel per-request arrays: ``input_lens``, ``output_lens``,
``ttfts`` (s), ``itls`` (per-chunk gaps, s), ``errors``, and in newer versions ``start_times``
(perf_counter, s) and ``latencies`` (s). Aggregates (``*_ms`` etc.) go to ``run_summaries``.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import (
    Capabilities,
    InputError,
    ReadContext,
    ReaderOutput,
    empty_requests,
)

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
    """A per-request array: a Python list (JSON parse) or a Series (columnar fast path)."""
    return isinstance(v, list | pl.Series)


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
        return empty_requests(), c.empty_quarantine()

    def pad(v: object) -> list[Any]:
        v = v if isinstance(v, list) else []
        return v + [None] * (n - len(v))

    def column(key: str, name: str, nested: bool = False) -> pl.Series:
        v = lists[key]
        if isinstance(v, pl.Series):
            return v.alias(name).extend_constant(None, n - v.len())
        return (c.float_list_series if nested else c.float_series)(pad(v), name)

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


def requests_from_arrays(
    df: pl.DataFrame,
    run_id: str,
    model: str | None,
    engine: str | None,
    *,
    have_start: bool,
    have_lat: bool,
    have_itls: bool,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Validate and convert one run's per-request columns into canonical rows and quarantine.

    ``df`` has one row per array index and the columns ``in``, ``out``, ``ttft``, ``start``,
    ``lat`` (Float64), ``itl`` (List(Float64)), ``err`` (Utf8) and ``err_bad`` (Boolean: the
    ``errors`` entry is not a string); ``have_*`` say whether the file had that array at all.
    """
    n = df.height
    df = df.with_columns(pl.int_range(1, n + 1).cast(pl.Int64, strict=False).alias("_line"))
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

    whole = c.bad_count

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
    good, q = c.split_valid(df, checks)
    arrival = pl.col("start") if have_start else pl.lit(0.0)
    ok = ~pl.col("_is_err")
    gaps = pl.col("itl").fill_null(pl.lit([], dtype=pl.List(pl.Float64)))
    token_times = c.cum_token_times(pl.col("ttft"), gaps)
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
            c.ones_if_per_token(
                pl.col("itl").list.len() + 1, pl.col("out").cast(pl.Int64, strict=False)
            )
        )
        .alias("token_counts"),
        pl.when(ok).then(pl.lit("ok")).otherwise(pl.lit("error")).alias("status"),
        pl.when(ok).then(None).otherwise(pl.col("err")).alias("error"),
    )
    return c.requests_frame(out), q


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
    f = c.as_float(v)
    return f if f is None or not math.isnan(f) else None


def columnar_documents(data: bytes) -> list[tuple[int, Any, str | None]] | None:
    """The file's JSON documents like :func:`c.iter_json_documents`, numeric arrays as Series.

    The large numeric arrays (``itls``, ``ttfts``, ...) are cut out of the text by byte offsets and
    parsed by Polars (``itls`` as JSON lines, one per request, so the parse is parallel and its
    memory bounded); the small rest (metadata, ``errors``, ``generated_texts``) is parsed by
    Python's ``json`` exactly as on the JSON path, with each cut array replaced by a placeholder
    string (and as many newlines, so line numbers do not move). None when anything is unusual
    (odd bytes in an array, an array that is not where a top-level one should be, a Polars parse
    error): the caller then takes the JSON path, so results on bad input do not change.
    """
    spans: list[tuple[int, int, bool]] = []  # (start of "[", end after "]", nested)
    pos = 0
    while m := _ARRAY_START.search(data, pos):
        if m.start() and data[m.start() - 1 : m.start()] == b"\\":
            return None  # inside an escaped string: leave such files to the JSON path
        nested = m.group(1) == b"itls"
        begin = m.end() - 1
        if nested:
            end_m = _NESTED_END.search(data, begin)
            end = end_m.end() if end_m else -1
        else:
            end = data.find(b"]", begin) + 1
        if end <= 0:
            return None  # truncated
        spans.append((begin, end, nested))
        pos = end
    if not spans:
        return None
    pieces: list[bytes] = []
    parsed: dict[str, pl.Series] = {}
    prev = 0
    try:
        for i, (begin, end, nested) in enumerate(spans):
            chunk = data[begin:end]
            if chunk.translate(None, _NUMERIC_BYTES):
                return None
            parsed[f"{_SPAN}{i}"] = _parse_numeric_array(chunk, nested)
            pieces += [data[prev:begin], f'"\\u0000vllm_bench-array:{i}"'.encode()]
            pieces.append(b"\n" * chunk.count(b"\n"))
            prev = end
            del chunk
    except Exception:  # error path: Polars rejects the array (bad number, bad nesting)
        return None
    pieces.append(data[prev:])
    docs = list(c.iter_json_documents(c.decode_text(b"".join(pieces))))
    used = 0
    for _, obj, err in docs:
        if err is None and isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(v, str) and v in parsed:
                    if k not in ARRAY_KEYS or (k == "itls") != (parsed[v].dtype != pl.Float64):
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
) -> ReaderOutput:
    """Runs, summaries and per-request rows of parsed runs, plus the unparseable ones."""
    summaries, req_frames, q_frames, run_rows = [], [], [], []
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
        summaries.append(c.summaries_frame(name, ctx, r.run_id, r.metrics))
        reqs, q = per_request_arrays(r.obj, r.run_id, r.model, c.engine_from_backend(backend))
        if reqs.height:
            req_frames.append(reqs)
        if q.height:
            q_frames.append(q)
    if bad:
        q_frames.append(
            c.quarantine_frame([b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad])
        )
    return ReaderOutput(
        requests=pl.concat(req_frames) if req_frames else None,
        quarantine=pl.concat(q_frames) if q_frames else None,
        runs=c.runs_frame(name, ctx, run_rows),
        run_summaries=pl.concat(summaries),
    )


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
        text = c.head_text(head)
        if not text.startswith("{"):
            return False
        return '"model_id"' in text and any(h in text for h in _METRIC_HINTS)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        data = c.read_all(ctx)
        docs = columnar_documents(data) if len(data) >= COLUMNAR_MIN_BYTES else None
        if docs is None:
            docs = list(c.iter_json_documents(c.decode_text(data)))
        del data
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
        yield assemble_runs(self.name, ctx, runs, bad)


READER = VllmBenchReader()
