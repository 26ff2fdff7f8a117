"""DistServe's benchmark results (``<backend>-<N>-<rate>.exp``): per-request rows and a summary.

Written by DistServe's ``benchmark_serving`` harness (LLMServe/DistServe). Line 1 is a Python
literal list of dicts, one per request: ``prompt_len``, ``output_len`` (tokens), ``issue_time``,
``first_token_time``, ``complete_time`` (seconds on one monotonic clock: ``clock = relative``),
``ttft_ms``, ``tpot_ms``, ``latency_ms``. The remaining lines are a ``{ key: value }`` summary
block (not JSON) with the run's averages, kept as ``run_summaries``. The harness names the file
after the backend, the number of requests and the request rate; that name is the only record of
the engine and the offered rate, and both are taken from it when it has that shape.

Streaming: line 1 can be long, so it is cut into the flat ``{...}`` dicts block by block; the
dicts (numbers only) become JSON by swapping quotes and are parsed in one Polars call per batch.
A dict that is not flat numbers (a string value, ``inf``) is quarantined with its index.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.files.sources import iter_blocks
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count
from pipeline.readers.frames import requests_frame, runs_frame, split_valid, summaries_frame
from pipeline.readers.units import as_float

PRIORITY = 24
FIELDS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time")
_HEAD = re.compile(rb"^\s*\[\s*\{\s*'prompt_len'")
_DICT = re.compile(rb"\{[^{}]*\}")
_NAME = re.compile(
    r"^(?P<backend>[a-z][a-z0-9_]*)-(?:[a-z0-9]+-)?(?P<n>\d+)-(?P<rate>\d+(?:\.\d+)?)$"
)
_SUMMARY_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(\S+)\s*$")


def name_facts(path: Path) -> dict[str, object]:
    """Backend, request count and rate from the harness's file name (empty if not that shape)."""
    stem = path.name.split(".", 1)[0]
    m = _NAME.match(stem)
    if not m:
        return {}
    return {"backend": m["backend"], "num_requests": int(m["n"]), "request_rate": float(m["rate"])}


class DistServeExpReader:
    name = "distserve_exp"
    description = (
        "DistServe benchmark results (.exp): line 1 a Python-literal list of per-request dicts "
        "(prompt_len, output_len, issue/first_token/complete times on one monotonic clock), then "
        "a { key: value } summary block. No model or GPU: use --set or a run manifest."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )
    required_fields = ("prompt_tokens", "output_tokens")

    def sniff(self, path: Path, head: bytes) -> bool:
        return bool(_HEAD.match(head)) and b"'issue_time'" in head and b"'first_token_time'" in head

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        facts = name_facts(ctx.path)
        engine = facts.get("backend")
        pending = b""
        index = 0  # 1-based record index within line 1
        in_list = True
        tail = bytearray()  # everything after line 1: the summary block
        for block in iter_blocks(ctx.path):
            if not in_list:
                tail += block
                continue
            pending += block
            nl = pending.find(b"\n")
            if nl >= 0:
                tail += pending[nl + 1 :]
                pending, in_list = pending[:nl], False
            dicts = [m.group(0) for m in _DICT.finditer(pending)]
            if in_list:
                last = pending.rfind(b"}")
                pending = pending[last + 1 :] if last >= 0 else pending
            if len(pending) > ctx.max_line_bytes:
                raise InputError("line 1 holds no per-request dict where one was expected")
            if dicts:
                out = self._batch(dicts, index, ctx, engine)
                index += len(dicts)
                yield out
        summary = _summary(tail.decode("utf-8", errors="replace"))
        if summary or facts:
            meta = {k: v for k, v in facts.items() if k != "backend"}
            yield ReaderOutput(
                runs=runs_frame(
                    self.name,
                    ctx,
                    [
                        {
                            "run_id": ctx.default_run_id,
                            "backend": engine,
                            "request_rate": facts.get("request_rate"),
                            "metadata": meta or None,
                        }
                    ],
                ),
                run_summaries=summaries_frame(self.name, ctx, ctx.default_run_id, summary)
                if summary
                else None,
            )

    def _batch(
        self, dicts: list[bytes], start: int, ctx: ReadContext, engine: object
    ) -> ReaderOutput:
        raw = pl.Series("_raw", [d.decode("utf-8", errors="replace") for d in dicts])
        nums = pl.int_range(start + 1, start + 1 + len(dicts), eager=True).alias("_line")
        as_json = raw.str.replace_all("'", '"', literal=True)
        df = pl.DataFrame({"_raw": raw, "_line": nums, "_json": as_json})
        flat = pl.col("_raw").str.contains(r"^\{(\s*'[A-Za-z_]+'\s*:\s*-?[0-9.eE+-]+\s*,?)*\s*\}$")
        schema = pl.Struct({f: pl.Float64 for f in FIELDS})
        df = df.with_columns(
            pl.when(flat).then(pl.col("_json")).str.json_decode(schema).alias("_s")
        ).unnest("_s")
        t0, t1, t2 = pl.col("issue_time"), pl.col("first_token_time"), pl.col("complete_time")
        checks = [
            (~flat, "not a flat dict of numbers (string, inf or nested value)"),
            (t0.is_null(), "issue_time missing"),
            (bad_count(pl.col("prompt_len")), "prompt_len missing or not a count"),
            (bad_count(pl.col("output_len")), "output_len missing or not a count"),
        ]
        good, q = split_valid(df, checks)
        out = good.select(
            pl.col("_line").cast(pl.Utf8).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(ctx.default_run_id).alias("run_id"),
            pl.lit(engine, dtype=pl.Utf8).alias("engine"),
            pl.col("prompt_len").cast(pl.Int64).alias("prompt_tokens"),
            pl.col("output_len").cast(pl.Int64).alias("output_tokens"),
            pl.lit("relative").alias("clock"),
            t0.alias("arrival_ts"),
            t1.alias("first_token_ts"),
            t2.alias("finish_ts"),
            pl.lit("ok").alias("status"),
        )
        return ReaderOutput(requests=requests_frame(out), quarantine=q if q.height else None)


def _summary(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SUMMARY_LINE.match(line)
        if m:
            v = as_float(m.group(2))
            if v is not None:
                out[m.group(1)] = v
    return out


READER = DistServeExpReader()
