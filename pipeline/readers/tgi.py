"""HuggingFace text-generation-inference (TGI) router logs, text or ``--json-output``.

A request is one ``INFO ... Success`` event whose request span carries Rust ``Duration`` strings
(``986.532642ms``, ``681.374µs``, ``4.06s``): ``total_time``, ``validation_time``,
``queue_time``, ``inference_time``, ``time_per_token``. The line's timestamp (UTC) is the
completion time, so ``finish_ts`` = timestamp, ``arrival_ts`` = finish − total_time and
``scheduled_ts`` = arrival + validation + queue (the batch start). ``inference_time`` mixes
prefill and decode, so there is no first-token time. Generated tokens are recovered exactly as
``inference_time / time_per_token`` (TGI computes the latter by that division); the prompt length
is not logged at INFO level and stays null. Other lines (startup, warnings) are not records; the
launcher's ``model_id`` is taken from them when present.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import jpath, parse_datetime_utc
from pipeline.readers.frames import requests_frame, runs_frame, split_valid
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import head_text
from pipeline.readers.units import rust_duration

PRIORITY = 27
DURATIONS = ("total_time", "validation_time", "queue_time", "inference_time", "time_per_token")
_SPANS = (
    r"(generate_stream|generate|chat_completions|completions|compat_generate|vertex_compatibility)"
)


def _text_field(name: str) -> pl.Expr:
    return pl.col("_raw").str.extract(name + r'="([^"]*)"', 1)


class TgiReader:
    name = "tgi_router_log"
    description = (
        "HuggingFace TGI router log, text or --json-output: one request per 'Success' line with "
        "queue and inference durations (Rust Duration strings), completion timestamp (unix). No "
        "first-token time or prompt length at INFO level; generated tokens recovered from "
        "inference_time / time_per_token. No GPU: use --set gpu=... gpu_count=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        return "text_generation_router" in text or "text_generation_launcher" in text

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        model: str | None = None
        for nums, texts in iter_line_batches(ctx):
            df = pl.DataFrame({"_line": nums, "_raw": texts})
            is_json = pl.col("_raw").str.starts_with("{")
            found = (
                df.select(
                    pl.coalesce(
                        pl.col("_raw").str.extract(r'model_id: "([^"]+)"', 1),
                        pl.col("_raw").str.extract(r'\\"model_id\\": ?\\"([^"\\]+)', 1),
                    )
                )
                .to_series()
                .drop_nulls()
            )
            if model is None and found.len():
                model = found[0]
            msg = pl.coalesce(
                jpath("_raw", "$.message"), jpath("_raw", "$.fields.message")
            ).fill_null("")
            is_record = (
                pl.when(is_json)
                .then((msg == "Success") & pl.col("_raw").str.contains("total_time"))
                .otherwise(
                    pl.col("_raw").str.contains(r"\bSuccess\s*$")
                    & pl.col("_raw").str.contains("total_time=")
                )
            )
            rec = df.filter(is_record)
            cols = {
                f: pl.when(is_json).then(jpath("_raw", f"$.span.{f}")).otherwise(_text_field(f))
                for f in DURATIONS
            }
            x = rec.with_columns(
                pl.when(is_json)
                .then(jpath("_raw", "$.timestamp"))
                .otherwise(pl.col("_raw").str.extract(r"^\s*(\S+)", 1))
                .alias("ts_text"),
                pl.when(is_json)
                .then(jpath("_raw", "$.span.name"))
                .otherwise(pl.col("_raw").str.extract(r"\b" + _SPANS + r"\{", 1))
                .alias("span"),
                *[rust_duration(e).alias(f) for f, e in cols.items()],
                *[e.alias(f + "_text") for f, e in cols.items()],
            ).with_columns(parse_datetime_utc(pl.col("ts_text")).alias("ts"))
            checks = [
                (pl.col("ts").is_null(), "timestamp is not an RFC 3339 date-time"),
                (pl.col("total_time").is_null(), "total_time is not a Duration (e.g. 1.2s)"),
                (pl.col("inference_time").is_null(), "inference_time is not a Duration"),
                (
                    pl.col("time_per_token_text").is_not_null()
                    & pl.col("time_per_token").is_null(),
                    "time_per_token is not a Duration",
                ),
            ]
            good, q = split_valid(x, checks)
            finish = pl.col("ts").dt.epoch("us").cast(pl.Float64) / 1e6
            arrival = finish - pl.col("total_time")
            tokens = (pl.col("inference_time") / pl.col("time_per_token")).round(0)
            out = good.select(
                pl.col("_line").cast(pl.Utf8).alias("request_id"),
                pl.col("_line").alias("source_line"),
                pl.lit(ctx.default_run_id).alias("run_id"),
                pl.lit(model, pl.Utf8).alias("model"),
                pl.lit("tgi").alias("engine"),
                pl.when(pl.col("time_per_token") > 0)
                .then(tokens)
                .cast(pl.Int64, strict=False)
                .alias("output_tokens"),
                pl.lit("unix").alias("clock"),
                arrival.alias("arrival_ts"),
                (
                    arrival
                    + pl.col("validation_time").fill_null(0.0)
                    + pl.col("queue_time").fill_null(0.0)
                ).alias("scheduled_ts"),
                finish.alias("finish_ts"),
                pl.lit("ok").alias("status"),
            )
            yield ReaderOutput(requests=requests_frame(out), quarantine=q if q.height else None)
        if model is not None:
            yield ReaderOutput(
                runs=runs_frame(
                    self.name,
                    ctx,
                    [{"run_id": ctx.default_run_id, "model": model, "backend": "tgi"}],
                )
            )


READER = TgiReader()
