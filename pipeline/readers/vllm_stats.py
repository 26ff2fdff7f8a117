"""vLLM per-request stats as JSON lines (a dump of ``RequestStateStats`` / ``RequestMetrics``).

V1 (``RequestStateStats``): ``arrival_time`` is on the **wall clock** (epoch s, frontend) while
``queued_ts``, ``scheduled_ts``, ``first_token_ts`` and ``last_token_ts`` are on the engine
core's **monotonic clock**. Clocks are never subtracted across: the absolute arrival comes from
``arrival_time``, every other time is placed by a same-clock difference from an anchor.

- With ``first_token_latency`` (wall clock, measured from ``arrival_time`` by vLLM itself), the
  anchor is the first token: ``first_token_ts = arrival_time + first_token_latency``,
  ``scheduled_ts = first_token_ts - (first_token_ts_mono - scheduled_ts_mono)``, ``finish_ts =
  first_token_ts + (last_token_ts - first_token_ts_mono)``.
- Without it the anchor is the queue entry: ``queued_ts ≡ arrival_time`` (then TTFT misses the
  frontend time between arrival and queueing, typically < 1 ms).

V0 (``RequestMetrics``, all epoch): ``arrival_time``, ``first_scheduled_time``,
``first_token_time``, ``last_token_time`` / ``finished_time`` map directly.
Token counts: ``num_prompt_tokens`` / ``prompt_tokens``, ``num_generation_tokens`` /
``output_tokens``, ``num_cached_tokens`` / ``cached_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num
from pipeline.readers.frames import requests_frame, runs_frame, split_valid
from pipeline.readers.lines import iter_line_batches, parse_ndjson
from pipeline.readers.sniff import first_line
from pipeline.readers.units import as_int

PRIORITY = 26
FIELDS = (
    "request_id",
    "req_id",
    "model",
    "arrival_time",
    "queued_ts",
    "scheduled_ts",
    "first_token_ts",
    "last_token_ts",
    "first_token_latency",
    "first_scheduled_time",
    "first_token_time",
    "last_token_time",
    "finished_time",
    "num_prompt_tokens",
    "prompt_tokens",
    "input_toks",
    "input_tokens",
    "num_generation_tokens",
    "output_tokens",
    "output_toks",
    "completion_tokens",
    "num_cached_tokens",
    "cached_tokens",
    "finish_reason",
    "error",
)


# A harness's dump of the engine's arguments beside the stats (LLMServingSim's bench writes
# ``meta.json``; the calibration set keeps it as ``vllm_meta.json``): the run's own record of its
# model, version, scheduler limits and KV-cache size.
META_NAMES = ("vllm_meta.json", "meta.json")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}


def companion_meta(path: Path) -> dict[str, Any]:
    """Metadata columns and run facts from a ``meta.json`` beside the stats file ({} if none)."""
    for name in META_NAMES:
        f = path.parent / name
        if not f.is_file() or f.stat().st_size > 16 * 2**20:
            continue
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(d, dict) and "vllm_version" in d and isinstance(d.get("engine_kwargs"), dict):
            return _meta_columns(d, f)
    return {}


def _meta_columns(d: dict[str, Any], f: Path) -> dict[str, Any]:
    kw = d["engine_kwargs"]
    rc = d.get("resolved_config") or {}
    sched = rc.get("scheduler_config") or {}
    par = rc.get("parallel_config") or {}
    kv = d.get("kv_cache") or {}
    hw = d.get("hardware") or {}
    tp = as_int(kw.get("tensor_parallel_size")) or as_int(par.get("tensor_parallel_size"))
    pp = as_int(par.get("pipeline_parallel_size")) or 1
    version = str(d["vllm_version"])
    major_minor = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    # V1 is the only engine from 0.10 on; it always chunks prefills unless told not to.
    chunked = sched.get("enable_chunked_prefill")
    if chunked is None and major_minor >= (0, 10):
        chunked = True
    dtype = str(kw.get("dtype") or "").removeprefix("torch.")
    kv_dtype = str(kw.get("kv_cache_dtype") or "auto")
    cols = {
        "model": kw.get("model") or d.get("model"),
        "gpu": hw.get("device_name"),
        "gpu_count": (tp or 1) * pp,
        "engine_version": version,
        "max_num_seqs": as_int(kw.get("max_num_seqs") or sched.get("max_num_seqs")),
        "max_batched_tokens": as_int(
            kw.get("max_num_batched_tokens") or sched.get("max_num_batched_tokens")
        ),
        "chunked_prefill": chunked if isinstance(chunked, bool) else None,
        "weight_dtype": _DTYPES.get(dtype),
        "kv_dtype": _DTYPES.get(dtype) if kv_dtype == "auto" else kv_dtype,
    }
    facts = {
        "meta_file": f.name,
        "num_gpu_blocks": as_int(kv.get("num_gpu_blocks")),
        "block_size": as_int(kv.get("block_size")),
        "kv_capacity_tokens": as_int(kv.get("num_kv_tokens"))
        or ((as_int(kv.get("num_gpu_blocks")) or 0) * (as_int(kv.get("block_size")) or 0) or None),
        "enable_prefix_caching": kv.get("enable_prefix_caching"),
        "scheduler_reserve_full_isl": sched.get("scheduler_reserve_full_isl"),
        "long_prefill_token_threshold": sched.get("long_prefill_token_threshold"),
        "scheduler_policy": sched.get("policy"),
        "started_at": d.get("started_at"),
    }
    return {
        "columns": {k: v for k, v in cols.items() if v is not None},
        "facts": {k: v for k, v in facts.items() if v is not None},
    }


def _utc(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


# Spellings of the token counts in real dumps: vLLM's own names (RequestStateStats /
# RequestMetrics, the OpenAI usage block) and harnesses' (LLMServingSim's bench writes
# ``input_toks`` / ``output_toks``). First non-null wins, in this order.
PROMPT_KEYS = ("num_prompt_tokens", "prompt_tokens", "input_toks", "input_tokens")
OUTPUT_KEYS = ("num_generation_tokens", "output_tokens", "output_toks", "completion_tokens")


class VllmStatsReader:
    name = "vllm_request_stats"
    description = (
        "vLLM per-request stats JSON lines (V1 RequestStateStats: arrival_time on the wall "
        "clock, queued/scheduled/first/last token on the monotonic clock; or V0 RequestMetrics, "
        "all epoch): one request per line with server-side queue, prefill and decode times on "
        "the unix clock. No per-token times, no GPU: use --set gpu=... gpu_count=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        line = first_line(head)
        return (
            line.startswith("{")
            and '"arrival_time"' in line
            and any(k in line for k in ('"first_token_ts"', '"queued_ts"', '"first_token_time"'))
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        meta = companion_meta(ctx.path)
        offset: float | None = None  # wall - monotonic, one value for the whole file
        runs_done = False
        for nums, texts in iter_line_batches(ctx):
            df, q0 = parse_ndjson(nums, texts, FIELDS)
            n = {f: num(pl.col(f)) for f in FIELDS}
            arrival = n["arrival_time"]
            ft_lat = n["first_token_latency"]
            mono_first = n["first_token_ts"]
            v1 = mono_first.is_not_null() | n["queued_ts"].is_not_null()
            if offset is None:
                offset = df.select((arrival - n["queued_ts"]).median()).item()
            # V1: anchor on the first token when vLLM gave its wall-clock latency. Else the
            # engine's monotonic clock is shifted onto the wall clock by one offset for the file
            # (the median of arrival_time - queued_ts): every request keeps the engine's own
            # spacing (the frontend's tokenisation lag, ~40 ms of jitter, is not the engine's),
            # requests of one step share one time, and TTFT runs from queued_ts as vLLM's does.
            wall_q = n["queued_ts"] + pl.lit(offset, dtype=pl.Float64)
            anchor_wall = pl.when(ft_lat.is_not_null()).then(arrival + ft_lat).otherwise(wall_q)
            anchor_mono = pl.when(ft_lat.is_not_null()).then(mono_first).otherwise(n["queued_ts"])
            x = df.with_columns(
                pl.when(v1 & ft_lat.is_null() & n["queued_ts"].is_not_null())
                .then(wall_q)
                .otherwise(arrival)
                .alias("t0"),
                pl.when(v1)
                .then(anchor_wall + (n["scheduled_ts"] - anchor_mono))
                .otherwise(n["first_scheduled_time"])
                .alias("t_sched"),
                pl.when(v1)
                .then(anchor_wall + (mono_first - anchor_mono))
                .otherwise(n["first_token_time"])
                .alias("t_first"),
                pl.when(v1)
                .then(anchor_wall + (n["last_token_ts"] - anchor_mono))
                .otherwise(pl.coalesce(n["last_token_time"], n["finished_time"]))
                .alias("t_fin"),
                pl.coalesce([n[f] for f in PROMPT_KEYS]).alias("inp"),
                pl.coalesce([n[f] for f in OUTPUT_KEYS]).alias("outp"),
                pl.coalesce(n["num_cached_tokens"], n["cached_tokens"]).alias("cached"),
                pl.coalesce(pl.col("request_id"), pl.col("req_id")).alias("rid"),
                (
                    v1
                    & ft_lat.is_null()
                    & n["queued_ts"].is_null()
                    & (mono_first.is_not_null() | n["scheduled_ts"].is_not_null())
                ).alias("no_anchor"),
            )
            err = pl.col("error").is_not_null() & (pl.col("error") != "")
            checks = [
                (pl.col("t0").is_null() | ~pl.col("t0").is_finite(), "arrival_time missing"),
                (bad_count(pl.col("inp")), "prompt token count missing or not a count"),
                (bad_count(pl.col("outp")), "generated token count missing or not a count"),
                (
                    pl.col("no_anchor"),
                    "monotonic timestamps without queued_ts or first_token_latency: cannot be "
                    "placed on the wall clock",
                ),
            ]
            good, q = split_valid(x, checks)
            out = good.select(
                pl.coalesce(pl.col("rid"), pl.col("_line").cast(pl.Utf8)).alias("request_id"),
                pl.col("_line").alias("source_line"),
                pl.lit(ctx.default_run_id).alias("run_id"),
                pl.col("model"),
                pl.lit("vllm").alias("engine"),
                *[pl.lit(v).alias(k) for k, v in meta.get("columns", {}).items() if k != "model"],
                pl.col("inp").cast(pl.Int64, strict=False).alias("prompt_tokens"),
                pl.col("cached").fill_null(0).cast(pl.Int64, strict=False).alias("cached_tokens"),
                pl.col("outp").cast(pl.Int64, strict=False).alias("output_tokens"),
                pl.lit("unix").alias("clock"),
                pl.col("t0").alias("arrival_ts"),
                pl.col("t_sched").alias("scheduled_ts"),
                pl.col("t_first").alias("first_token_ts"),
                pl.col("t_fin").alias("finish_ts"),
                pl.when(err)
                .then(pl.lit("error"))
                .when(pl.col("finish_reason") == "abort")
                .then(pl.lit("cancelled"))
                .otherwise(pl.lit("ok"))
                .alias("status"),
                pl.when(err).then(pl.col("error")).alias("error"),
            )
            if "model" in meta.get("columns", {}):
                out = out.with_columns(pl.col("model").fill_null(meta["columns"]["model"]))
            quarantine = pl.concat([q0, q]) if q0.height else q
            runs = None
            if meta and not runs_done:
                runs_done = True
                cols = meta["columns"]
                runs = runs_frame(
                    self.name,
                    ctx,
                    [
                        {
                            "run_id": ctx.default_run_id,
                            "model": cols.get("model"),
                            "backend": "vllm",
                            "started_at": _utc(meta["facts"].get("started_at")),
                            "metadata": {**meta["facts"], **cols},
                        }
                    ],
                )
            yield ReaderOutput(
                requests=requests_frame(out),
                quarantine=quarantine if quarantine.height else None,
                runs=runs,
            )


READER = VllmStatsReader()
