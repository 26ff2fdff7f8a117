"""guidellm ``benchmarks.json``: one report with a list of benchmarks (one per load strategy).

Requests live in ``benchmarks[].requests.{successful, errored, incomplete}``. The ≈v0.3 schema
has flat epoch-second fields (``start_time``, ``first_token_time``, ``last_token_time``,
``end_time``); the v2 schema nests them in ``info.timings`` (``request_start``,
``first_token_iteration``, ``last_token_iteration``, ``request_end``). Both are read. Benchmark
level ``metrics.*`` distributions → ``run_summaries`` (``<metric>.<status>.<stat>``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pipeline.files.sources import compression
from pipeline.readers import element_frames as ef
from pipeline.readers import json_elements as je
from pipeline.readers import vllm_bench
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, jpath, num
from pipeline.readers.frames import (
    quarantine_frame,
    records_frame,
    requests_frame,
    runs_frame,
    split_valid,
    summaries_frame,
)
from pipeline.readers.json_text import decode_text, load_json
from pipeline.readers.sniff import head_text
from pipeline.readers.units import as_float
from pipeline.readers.vllm_bench import Source, run_ids

PRIORITY = 41
STATUS = {"successful": "ok", "errored": "error", "incomplete": "cancelled"}
_STATS = ("mean", "median", "mode", "variance", "std_dev", "min", "max", "count", "total_sum")

# Plain files at least this large are streamed: the request arrays are located by a structural
# scan (json_elements) and parsed a batch of elements at a time, so memory does not grow with
# the number of requests; smaller ones (and compressed ones) are parsed whole, as always.
STREAM_MIN_BYTES = vllm_bench.COLUMNAR_MIN_BYTES
# Levels of the structural scan kept: document {0} > benchmarks [1] > benchmark {2} >
# requests {3} > successful [4] > the request objects' own braces and separating commas (5).
_ELEMENT_LEVEL = 5
_PLACEHOLDER = "\x00guidellm-requests:"


def _first(df: pl.DataFrame, *candidates: tuple[str, str | None]) -> pl.Expr:
    """First non-null of several (column, JSON path inside it) candidates, as text."""
    exprs = []
    for col, path in candidates:
        if col in df.columns:
            exprs.append(pl.col(col) if path is None else jpath(col, path))
    return pl.coalesce(exprs) if exprs else pl.lit(None, pl.Utf8)


def _get(d: object, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _model(bench: dict, doc: dict) -> Any:
    return (
        _get(bench, "worker", "backend_model")
        or _get(bench, "config", "backend", "model")  # 0.8: benchmarks[].config.backend
        or _get(doc, "config", "spec", "backend", "model")
        or _get(doc, "config", "backend_kwargs", "model")
    )


@dataclass
class _Plan:
    """A large report located by the structural scan: the document with every streamed request
    array replaced by a placeholder string, and those arrays (by placeholder)."""

    src: Source
    doc: dict
    # (benchmark index, status key) -> the streamed array there and its frame's text columns;
    # by position, not by the placeholder's value, so no string in a file can pose as one.
    arrays: dict[tuple[int, str], tuple[je.ElementArray, dict[str, pl.DataType]]]


def _plan(ctx: ReadContext) -> _Plan | None:
    """The streamed reading of a plain file, or None (compressed, or anything unusual: invalid
    JSON, no ``benchmarks`` list, a request array that is not one), so the whole-document path
    reads it and its errors and quarantine stay what they always were."""
    return ef.located(ctx, _locate)


def _locate(src: Source) -> _Plan | None:
    """Scan, find each benchmarks[j].requests.<status> array, parse the rest with Python's json
    and check every placeholder sits where the scan found its array."""
    st = je.scan(src, _ELEMENT_LEVEL)
    if st is None or st.char[0] != ord("{") or st.level[0] != 0:
        return None
    bi = je.members(src, st, 0).get(b"benchmarks")
    benches = je.array_elements(src, st, bi) if bi is not None else None
    if benches is None:
        return None
    spans: list[tuple[int, str, je.ElementArray]] = []  # (benchmark index, key, array)
    for j in np.flatnonzero(benches.is_object).tolist():  # one per benchmark
        oi = int(np.searchsorted(st.pos, benches.starts[j]))  # the benchmark's "{"
        ri = je.members(src, st, oi).get(b"requests")
        if ri is None or st.char[ri] != ord("{"):
            continue
        for key, ai in je.members(src, st, ri).items():
            if ai is None or key.decode() not in STATUS or st.char[ai] != ord("["):
                continue
            arr = je.array_elements(src, st, ai)
            if arr is None:
                return None
            spans.append((j, key.decode(), arr))
    spans.sort(key=lambda s: s[2].begin)
    pieces: list[bytes] = []
    prev = 0
    for k, (_, _, arr) in enumerate(spans):
        pieces += [src.read(prev, arr.begin), f'"\\u0000guidellm-requests:{k}"'.encode()]
        prev = arr.end
    pieces.append(src.read(prev, src.size))
    try:
        doc = json.loads(decode_text(b"".join(pieces)))
    except (InputError, ValueError, RecursionError):
        return None
    del pieces
    docs = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(docs, list):
        return None
    arrays: dict[tuple[int, str], tuple[je.ElementArray, dict[str, pl.DataType]]] = {}
    for k, (j, key, arr) in enumerate(spans):
        bench = docs[j] if j < len(docs) else None
        reqs = bench.get("requests") if isinstance(bench, dict) else None
        if not isinstance(reqs, dict) or reqs.get(key) != f"{_PLACEHOLDER}{k}":
            return None  # shadowed by a duplicate key, or not where the scan put it
        schema = ef.sample_schema(arr)
        if schema is None:
            return None
        arrays[(j, key)] = (arr, schema)
    return _Plan(src, doc, arrays)


def _invalid(ctx: ReadContext) -> None:
    """Raise the whole-document parser's error for an element Python's json rejects, as the
    whole-document path did."""
    load_json(ctx)
    raise InputError("a guidellm request entry is not valid JSON")


class GuidellmReader:
    name = "guidellm"
    description = (
        "guidellm benchmarks.json (≈v0.3 flat and v2 nested schemas): one run per benchmark, one "
        "request per successful/errored/incomplete entry with epoch-second start, first and last "
        "token times (unix clock; no per-token times). metrics.* -> run_summaries. Model from "
        "the backend; no GPU: use --set gpu=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=True,
        needs_set=("gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        return (
            text.startswith("{")
            and '"benchmarks"' in text
            and ('"generative_benchmark"' in text or '"guidellm_version"' in text)
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        # A compressed file's size says nothing of its text: it is always spilled and streamed
        # (the size gate on the compressed bytes kept a 2.9 MB result in a 0.2 MB .gz whole).
        big = compression(ctx.path) is not None or ctx.path.stat().st_size >= STREAM_MIN_BYTES
        plan = _plan(ctx) if big else None
        if plan is None:
            yield from self._read_whole(ctx)
            return
        try:
            yield from self._read_streamed(ctx, plan)
        finally:
            plan.src.close()

    def _read_whole(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        doc = load_json(ctx)
        benches = doc.get("benchmarks") if isinstance(doc, dict) else None
        if not isinstance(benches, list):
            raise InputError("guidellm report without a 'benchmarks' list")
        n = len(benches)
        ids = run_ids(ctx, n)
        offset = 0
        for bench, run_id in zip(benches, ids, strict=True):
            if not isinstance(bench, dict):
                yield ReaderOutput(
                    quarantine=quarantine_frame([0], ["benchmark entry is not an object"], [bench])
                )
                continue
            out = self._bench(ctx, bench, run_id, offset, doc)
            offset += out[1]
            yield out[0]

    def _read_streamed(self, ctx: ReadContext, plan: _Plan) -> Iterator[ReaderOutput]:
        """Like _read_whole, request arrays streamed: per benchmark its run and summaries,
        then its requests a batch of elements at a time (``_line`` numbered as before)."""
        doc = plan.doc
        benches = doc["benchmarks"]
        ids = run_ids(ctx, len(benches))
        offset = 0
        for j, (bench, run_id) in enumerate(zip(benches, ids, strict=True)):
            if not isinstance(bench, dict):
                yield ReaderOutput(
                    quarantine=quarantine_frame([0], ["benchmark entry is not an object"], [bench])
                )
                continue
            model = _model(bench, doc)
            runs, summaries = self._run_frames(ctx, bench, run_id, model)
            yield ReaderOutput(runs=runs, run_summaries=summaries)
            reqs = bench.get("requests") if isinstance(bench.get("requests"), dict) else {}
            count = 0
            for key, status in STATUS.items():
                items = reqs.get(key)
                if (j, key) in plan.arrays:
                    arr, schema = plan.arrays[(j, key)]
                    for first, chunk, is_obj in arr.batches(max_rows=ctx.batch_rows):
                        df = ef.batch_frame(chunk, is_obj, schema, lambda: _invalid(ctx))
                        del chunk
                        start = offset + count + first + 1
                        df = df.with_columns(
                            pl.lit(status).alias("_status"),
                            pl.int_range(start, start + df.height, eager=True)
                            .cast(pl.Int64, strict=False)
                            .alias("_line"),
                        )
                        requests, quarantine = self._requests(df, run_id, model)
                        if quarantine is not None:
                            quarantine = ef.redump_raw(quarantine, df)
                        yield ReaderOutput(requests=requests, quarantine=quarantine)
                    count += len(arr)
                elif isinstance(items, list) and items:  # a list the scan did not stream
                    df = records_frame(items).with_columns(
                        pl.lit(status).alias("_status"),
                        (pl.col("_line") + offset + count).alias("_line"),
                    )
                    count += len(items)
                    requests, quarantine = self._requests(df, run_id, model)
                    yield ReaderOutput(requests=requests, quarantine=quarantine)
            offset += count

    def _bench(
        self, ctx: ReadContext, bench: dict, run_id: str, offset: int, doc: dict
    ) -> tuple[ReaderOutput, int]:
        reqs = bench.get("requests") if isinstance(bench.get("requests"), dict) else {}
        frames = []
        count = 0
        for key, status in STATUS.items():
            items = reqs.get(key)
            if not isinstance(items, list) or not items:
                continue
            df = records_frame(items).with_columns(
                pl.lit(status).alias("_status"),
                (pl.col("_line") + offset + count).alias("_line"),
            )
            count += len(items)
            frames.append(df)
        model = _model(bench, doc)
        requests = quarantine = None
        if frames:
            df = pl.concat(frames, how="diagonal_relaxed")
            requests, quarantine = self._requests(df, run_id, model)
        runs, summaries = self._run_frames(ctx, bench, run_id, model)
        return (
            ReaderOutput(
                requests=requests, quarantine=quarantine, runs=runs, run_summaries=summaries
            ),
            count,
        )

    def _run_frames(
        self, ctx: ReadContext, bench: dict, run_id: str, model: object
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The benchmark's ``runs`` row and its ``run_summaries`` (no request needed)."""
        metrics: dict[str, object] = {}
        for mname, dist in (bench.get("metrics") or {}).items():
            if not isinstance(dist, dict):
                continue
            for status, summ in dist.items():
                if not isinstance(summ, dict):
                    continue
                for stat in _STATS:
                    if stat in summ:
                        metrics[f"{mname}.{status}.{stat}"] = summ[stat]
                for p, v in (summ.get("percentiles") or {}).items():
                    metrics[f"{mname}.{status}.percentiles.{p}"] = v
        for k in ("duration", "start_time", "end_time"):
            if k in bench:
                metrics[k] = bench[k]
        started = as_float(bench.get("start_time"))
        strategy = _get(bench, "args", "strategy") or _get(bench, "config", "strategy") or {}
        meta = {
            k: bench.get(k)
            for k in ("id_", "run_id", "args", "run_stats", "worker", "request_loader", "config")
            if k in bench
        }
        meta["request_totals"] = bench.get("request_totals")
        run = {
            "run_id": run_id,
            "model": model,
            "backend": _get(bench, "worker", "backend_type")
            or _get(bench, "worker", "type_")
            or _get(bench, "config", "backend", "kind"),
            "request_rate": strategy.get("rate") if isinstance(strategy, dict) else None,
            # streams (<= 0.7); 0.8 writes max_concurrency in config.strategy.
            "max_concurrency": (strategy.get("streams") or strategy.get("max_concurrency"))
            if isinstance(strategy, dict)
            else None,
            "started_at": datetime.fromtimestamp(started, UTC) if started else None,
            "metadata": meta,
        }
        return (
            runs_frame(self.name, ctx, [run]),
            summaries_frame(self.name, ctx, run_id, metrics),
        )

    def _requests(
        self, df: pl.DataFrame, run_id: str, model: object
    ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        x = df.with_columns(
            _first(df, ("request_id", None), ("response_id", None)).alias("rid"),
            num(_first(df, ("prompt_tokens", None), ("input_metrics", "$.text_tokens"))).alias(
                "inp"
            ),
            num(_first(df, ("output_tokens", None), ("output_metrics", "$.text_tokens"))).alias(
                "outp"
            ),
            num(
                _first(
                    df,
                    ("start_time", None),
                    ("request_start_time", None),
                    ("info", "$.timings.request_start"),
                )
            ).alias("t0"),
            num(
                _first(
                    df,
                    ("first_token_time", None),
                    ("info", "$.timings.first_token_iteration"),
                )
            ).alias("t1"),
            num(
                _first(
                    df,
                    ("last_token_time", None),
                    ("info", "$.timings.last_token_iteration"),
                    ("end_time", None),
                    ("request_end_time", None),
                    ("info", "$.timings.request_end"),
                )
            ).alias("t2"),
            _first(df, ("error", None), ("info", "$.error")).alias("err"),
        )
        ok = pl.col("_status") == "ok"

        bad_int = bad_count

        checks = [
            (pl.col("_raw").str.starts_with('{"_not_an_object"'), "entry is not an object"),
            (pl.col("t0").is_null(), "request start time missing or not a number"),
            (ok & bad_int(pl.col("inp")), "prompt_tokens missing or not a whole number"),
            (ok & bad_int(pl.col("outp")), "output_tokens missing or not a whole number"),
            (ok & pl.col("t1").is_null(), "first token time missing or not a number"),
        ]
        good, q = split_valid(x, checks)
        out = good.select(
            pl.coalesce(pl.col("rid"), pl.col("_line").cast(pl.Utf8)).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(run_id).alias("run_id"),
            pl.lit(model if isinstance(model, str) else None, pl.Utf8).alias("model"),
            pl.col("inp").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.when(ok | pl.col("outp").is_not_null())
            .then(pl.col("outp"))
            .otherwise(0)
            .cast(pl.Int64, strict=False)
            .alias("output_tokens"),
            pl.lit("unix").alias("clock"),
            pl.col("t0").alias("arrival_ts"),
            pl.col("t1").alias("first_token_ts"),
            pl.col("t2").alias("finish_ts"),
            pl.col("_status").alias("status"),
            pl.when(ok).then(None).otherwise(pl.col("err")).alias("error"),
        )
        return requests_frame(out), (q if q.height else None)


READER = GuidellmReader()
