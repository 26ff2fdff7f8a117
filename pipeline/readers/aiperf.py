"""NVIDIA AIPerf ``profile_export.jsonl``: one JSON object per request.

``metadata.timestamp_ns`` (0.13: ``metadata.request_start_ns``) is the request start (epoch ns);
``metrics.<name>`` are ``{"value", "unit"}`` pairs: ``ttft`` (0.13: ``time_to_first_token``) and
``request_latency`` (ms), ``inter_chunk_latency`` (list of ms gaps between streamed chunks),
``input_sequence_length`` / ``output_sequence_length`` (tokens, output incl. reasoning; a failed
request's prompt length is ``error_isl`` in 0.13). Failed rows carry ``error {code, type,
message}``; code 499 (``RequestCancellationError``) is a cancellation. Warmup records
(``credit_phase``, 0.13: ``benchmark_phase`` / ``phase_kind`` = warmup) are excluded, not
quarantined: AIPerf itself leaves them out of its figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput

PRIORITY = 30


def _metric(name: str) -> pl.Expr:
    return c.jpath("metrics", f"$.{name}.value")


def _first_metric(names: tuple[str, ...], default_unit: str) -> pl.Expr:
    """The first of ``names`` present, in seconds (AIPerf renamed metrics between releases)."""
    return pl.coalesce([c.num(_metric(n)) * _unit_scale(n, default_unit) for n in names])


def _unit_scale(name: str, default: str) -> pl.Expr:
    """Seconds per unit of ``metrics.<name>.unit`` (the unit AIPerf wrote; default if absent)."""
    unit = c.jpath("metrics", f"$.{name}.unit").fill_null(default)
    expr = pl.lit(None, pl.Float64)
    for u, s in c.UNIT_SECONDS.items():
        expr = pl.when(unit == u).then(pl.lit(s)).otherwise(expr)
    return expr


class AiperfReader:
    name = "aiperf"
    description = (
        "NVIDIA AIPerf profile_export.jsonl: one request per line with absolute start (epoch ns), "
        "TTFT, latency and per-chunk inter_chunk_latency -> token_times (unix clock). Cancelled "
        "(499) and failed requests keep their row with status cancelled/error; warmup rows are "
        "excluded (counted, not quarantined). AIPerf <= 0.12 and 0.13 field names. Model only "
        "in the aggregate profile_export_aiperf.json; no GPU: use --set."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=True,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        line = c.first_line(head)
        return (
            line.startswith("{")
            and '"metadata"' in line
            and '"metrics"' in line
            and any(
                f'"{k}"' in line
                for k in ("x_request_id", "timestamp_ns", "credit_phase", "request_start_ns")
            )
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        for nums, texts in c.iter_line_batches(ctx):
            df, q0 = c.parse_ndjson(nums, texts, ["metadata", "metrics", "error"])
            yield self._batch(ctx, df, q0)

    def _batch(self, ctx: ReadContext, df: pl.DataFrame, q0: pl.DataFrame) -> ReaderOutput:
        err_text = pl.col("error").fill_null("null")
        has_err = (err_text != "null") & (err_text.str.strip_chars() != "")
        err_code = c.num(c.jpath("error", "$.code"))
        err_type = c.jpath("error", "$.type")
        lat_scale = _unit_scale("request_latency", "ms")
        icl_scale = _unit_scale("inter_chunk_latency", "ms")
        x = df.with_columns(
            c.jpath("metadata", "$.x_request_id").alias("rid"),
            pl.coalesce(
                c.jpath("metadata", f"$.{k}")
                for k in ("credit_phase", "benchmark_phase", "phase_kind")
            ).alias("phase"),
            pl.coalesce(
                *(
                    c.jpath("metadata", f"$.{k}").str.strip_chars().cast(pl.Int64, strict=False)
                    for k in ("timestamp_ns", "request_start_ns")
                ),
                c.num(_metric("min_request_timestamp")).cast(pl.Int64, strict=False),
            ).alias("t0_ns"),
            _first_metric(("ttft", "time_to_first_token"), "ms").alias("ttft"),
            (c.num(_metric("request_latency")) * lat_scale).alias("lat"),
            c.num_list(_metric("inter_chunk_latency")).alias("icl_raw"),
            icl_scale.alias("icl_scale"),
            _metric("inter_chunk_latency").alias("icl_text"),
            pl.coalesce(c.num(_metric("input_sequence_length")), c.num(_metric("error_isl"))).alias(
                "isl"
            ),
            c.num(_metric("output_sequence_length")).alias("osl"),
            has_err.alias("is_err"),
            pl.when(has_err & ((err_code == 499) | err_type.str.contains("(?i)cancel")))
            .then(pl.lit("cancelled"))
            .when(has_err)
            .then(pl.lit("error"))
            .otherwise(pl.lit("ok"))
            .alias("status"),
            pl.when(has_err)
            .then(
                pl.concat_str(
                    [
                        err_type.fill_null("error"),
                        pl.lit(": "),
                        c.jpath("error", "$.message").fill_null(err_text),
                    ]
                )
            )
            .alias("error_text"),
        )

        bad_int = c.bad_count

        warmup = pl.col("phase").fill_null("") == "warmup"
        excluded = x.filter(warmup).select(
            pl.col("_line").alias("line"),
            pl.lit("AIPerf warmup request (not part of the profile)").alias("reason"),
        )
        x = x.filter(~warmup)
        ok = ~pl.col("is_err")
        checks = [
            (pl.col("metadata").is_null() & pl.col("metrics").is_null(), "no metadata/metrics"),
            (
                pl.col("t0_ns").is_null() | (pl.col("t0_ns") <= 0),
                "metadata.timestamp_ns / request_start_ns missing or not a number",
            ),
            (ok & bad_int(pl.col("isl")), "input_sequence_length missing or not a whole number"),
            (ok & bad_int(pl.col("osl")), "output_sequence_length missing or not a whole number"),
            (
                ok & pl.col("ttft").is_null(),
                "ttft / time_to_first_token missing, not a number, or unknown unit",
            ),
            (
                ok & pl.col("lat").is_null(),
                "request_latency missing, not a number, or unknown unit",
            ),
            (
                ok & pl.col("icl_text").is_not_null() & pl.col("icl_raw").is_null(),
                "inter_chunk_latency is not a list of numbers",
            ),
        ]
        good, q = c.split_valid(x, checks)
        gaps = (pl.col("icl_raw") * pl.col("icl_scale")).fill_null(
            pl.lit([], dtype=pl.List(pl.Float64))
        )
        has_icl = pl.col("icl_raw").is_not_null()
        osl = pl.col("osl").cast(pl.Int64, strict=False)
        base = pl.col("t0_ns")
        out = good.select(
            pl.coalesce(pl.col("rid"), pl.col("_line").cast(pl.Utf8)).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(ctx.default_run_id).alias("run_id"),
            pl.col("isl").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.when(pl.col("is_err") & osl.is_null()).then(0).otherwise(osl).alias("output_tokens"),
            pl.lit("unix").alias("clock"),
            # ns → s in two steps keeps sub-µs precision of the large epoch values.
            ((base // 1000) / 1e6 + (base % 1000) / 1e9).alias("arrival_ts"),
            pl.col("ttft"),
            pl.col("lat"),
            pl.when(has_icl).then(c.cum_token_times(pl.col("ttft"), gaps)).alias("token_times"),
            pl.when(has_icl)
            .then(c.ones_if_per_token(pl.col("icl_raw").list.len() + 1, osl))
            .alias("token_counts"),
            pl.col("status"),
            pl.col("error_text").alias("error"),
        ).with_columns(
            (pl.col("arrival_ts") + pl.col("ttft")).alias("first_token_ts"),
            (pl.col("arrival_ts") + pl.col("lat")).alias("finish_ts"),
        )
        quarantine = pl.concat([q0, q]) if q0.height else q
        return ReaderOutput(
            requests=c.requests_frame(out),
            quarantine=quarantine if quarantine.height else None,
            excluded=excluded if excluded.height else None,
        )


READER = AiperfReader()
