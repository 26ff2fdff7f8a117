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

from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import (
    bad_count,
    cum_token_times,
    jpath,
    num,
    num_list,
    ones_if_per_token,
)
from pipeline.readers.frames import requests_frame, split_valid
from pipeline.readers.lines import iter_line_batches, parse_ndjson
from pipeline.readers.sniff import first_line
from pipeline.readers.units import UNIT_SECONDS

PRIORITY = 30


# Every metric the reader uses. A batch decodes ``metrics`` once into this struct (one JSON
# parse per line); JSON-path lookups parse the text again per field, ~20 times per line.
SCALARS = (
    "ttft",
    "time_to_first_token",
    "request_latency",
    "input_sequence_length",
    "error_isl",
    "output_sequence_length",
    "min_request_timestamp",
)
ICL = "inter_chunk_latency"
_PAIR = {"value": pl.Float64, "unit": pl.Utf8}
METRICS_DTYPE = pl.Struct(
    {
        **{n: pl.Struct(_PAIR) for n in SCALARS},
        ICL: pl.Struct({**_PAIR, "value": pl.List(pl.Float64)}),
    }
)
# Polars' typed decode reads true/false as 1/0 and null list items as nulls, where the
# field-by-field path quarantines them; such a batch (and one the decode rejects) takes that path.
_ODD = r'\b(?:true|false|null)\b|"value"\s*:\s*"'


def _decoded(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` plus ``v:<name>`` (Float64; List(Float64) for the gaps) and ``u:<name>`` columns."""
    m = pl.col("metrics")
    if not df["metrics"].str.contains(_ODD).any():
        try:
            d = df.select(m.str.json_decode(METRICS_DTYPE).alias("d"))["d"]
            cols = [d.struct.field(n).struct.field(k).alias(f"{k[0]}:{n}")
                    for n in (*SCALARS, ICL) for k in ("value", "unit")]  # fmt: skip
            return df.with_columns(cols)
        except pl.exceptions.PolarsError:
            pass  # a value of another type: read field by field below
    path = {n: jpath("metrics", f"$.{n}.value") for n in (*SCALARS, ICL)}
    return df.with_columns(
        *(num(path[n]).alias(f"v:{n}") for n in SCALARS),
        num_list(path[ICL]).alias(f"v:{ICL}"),
        pl.when(path[ICL].is_not_null()).then(pl.lit("?")).alias("icl_given"),
        *(jpath("metrics", f"$.{n}.unit").alias(f"u:{n}") for n in (*SCALARS, ICL)),
    )


def _unit_scale(name: str, default: str) -> pl.Expr:
    """Seconds per unit of ``metrics.<name>.unit`` (the unit AIPerf wrote; default if absent)."""
    unit = pl.col(f"u:{name}").fill_null(default)
    expr = pl.lit(None, pl.Float64)
    for u, s in UNIT_SECONDS.items():
        expr = pl.when(unit == u).then(pl.lit(s)).otherwise(expr)
    return expr


def _seconds(names: tuple[str, ...], default_unit: str) -> pl.Expr:
    """The first of ``names`` present, in seconds (AIPerf renamed metrics between releases)."""
    return pl.coalesce([pl.col(f"v:{n}") * _unit_scale(n, default_unit) for n in names])


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
        line = first_line(head)
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
        for nums, texts in iter_line_batches(ctx):
            df, q0 = parse_ndjson(nums, texts, ["metadata", "metrics", "error"])
            yield self._batch(ctx, df, q0)

    def _batch(self, ctx: ReadContext, df: pl.DataFrame, q0: pl.DataFrame) -> ReaderOutput:
        err_text = pl.col("error").fill_null("null")
        has_err = (err_text != "null") & (err_text.str.strip_chars() != "")
        err_code = num(jpath("error", "$.code"))
        err_type = jpath("error", "$.type")
        icl_scale = _unit_scale(ICL, "ms")
        df = _decoded(df)
        # The gaps were given (as anything): the typed decode fails on a non-list, so there a
        # present value is a list; the field path marks it before checking it is one.
        icl_given = pl.col(f"v:{ICL}").is_not_null()
        if "icl_given" in df.columns:
            icl_given = pl.col("icl_given").is_not_null()
        x = df.with_columns(
            jpath("metadata", "$.x_request_id").alias("rid"),
            pl.coalesce(
                jpath("metadata", f"$.{k}")
                for k in ("credit_phase", "benchmark_phase", "phase_kind")
            ).alias("phase"),
            pl.coalesce(
                *(
                    jpath("metadata", f"$.{k}").str.strip_chars().cast(pl.Int64, strict=False)
                    for k in ("timestamp_ns", "request_start_ns")
                ),
                pl.col("v:min_request_timestamp").cast(pl.Int64, strict=False),
            ).alias("t0_ns"),
            _seconds(("ttft", "time_to_first_token"), "ms").alias("ttft"),
            _seconds(("request_latency",), "ms").alias("lat"),
            pl.col(f"v:{ICL}").alias("icl_raw"),
            icl_scale.alias("icl_scale"),
            icl_given.alias("icl_given"),
            pl.coalesce("v:input_sequence_length", "v:error_isl").alias("isl"),
            pl.col("v:output_sequence_length").alias("osl"),
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
                        jpath("error", "$.message").fill_null(err_text),
                    ]
                )
            )
            .alias("error_text"),
        )

        bad_int = bad_count

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
                ok & pl.col("icl_given") & pl.col("icl_raw").is_null(),
                "inter_chunk_latency is not a list of numbers",
            ),
        ]
        good, q = split_valid(x, checks)
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
            pl.when(has_icl).then(cum_token_times(pl.col("ttft"), gaps)).alias("token_times"),
            pl.when(has_icl)
            .then(ones_if_per_token(pl.col("icl_raw").list.len() + 1, osl))
            .alias("token_counts"),
            pl.col("status"),
            pl.col("error_text").alias("error"),
        ).with_columns(
            (pl.col("arrival_ts") + pl.col("ttft")).alias("first_token_ts"),
            (pl.col("arrival_ts") + pl.col("lat")).alias("finish_ts"),
        )
        quarantine = pl.concat([q0, q]) if q0.height else q
        return ReaderOutput(
            requests=requests_frame(out),
            quarantine=quarantine if quarantine.height else None,
            excluded=excluded if excluded.height else None,
        )


READER = AiperfReader()
