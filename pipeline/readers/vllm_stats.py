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

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput

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
    "num_generation_tokens",
    "output_tokens",
    "completion_tokens",
    "num_cached_tokens",
    "cached_tokens",
    "finish_reason",
    "error",
)


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
        line = c.first_line(head)
        return (
            line.startswith("{")
            and '"arrival_time"' in line
            and any(k in line for k in ('"first_token_ts"', '"queued_ts"', '"first_token_time"'))
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        for nums, texts in c.iter_line_batches(ctx):
            df, q0 = c.parse_ndjson(nums, texts, FIELDS)
            n = {f: c.num(pl.col(f)) for f in FIELDS}
            arrival = n["arrival_time"]
            ft_lat = n["first_token_latency"]
            mono_first = n["first_token_ts"]
            v1 = mono_first.is_not_null() | n["queued_ts"].is_not_null()
            # V1: anchor on the first token when vLLM gave its wall-clock latency, else on queued.
            anchor_wall = pl.when(ft_lat.is_not_null()).then(arrival + ft_lat).otherwise(arrival)
            anchor_mono = pl.when(ft_lat.is_not_null()).then(mono_first).otherwise(n["queued_ts"])
            x = df.with_columns(
                arrival.alias("t0"),
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
                pl.coalesce(n["num_prompt_tokens"], n["prompt_tokens"]).alias("inp"),
                pl.coalesce(
                    n["num_generation_tokens"], n["output_tokens"], n["completion_tokens"]
                ).alias("outp"),
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
                (c.bad_count(pl.col("inp")), "prompt token count missing or not a count"),
                (c.bad_count(pl.col("outp")), "generated token count missing or not a count"),
                (
                    pl.col("no_anchor"),
                    "monotonic timestamps without queued_ts or first_token_latency: cannot be "
                    "placed on the wall clock",
                ),
            ]
            good, q = c.split_valid(x, checks)
            out = good.select(
                pl.coalesce(pl.col("rid"), pl.col("_line").cast(pl.Utf8)).alias("request_id"),
                pl.col("_line").alias("source_line"),
                pl.lit(ctx.default_run_id).alias("run_id"),
                pl.col("model"),
                pl.lit("vllm").alias("engine"),
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
            quarantine = pl.concat([q0, q]) if q0.height else q
            yield ReaderOutput(
                requests=c.requests_frame(out), quarantine=quarantine if quarantine.height else None
            )


READER = VllmStatsReader()
