"""Splitwise simulator files (Mutinifni/splitwise-sim).

- Request traces ``traces/*.csv``: ``request_id,request_type,application_id,arrival_timestamp,
  batch_size,prompt_size,token_size`` with ``arrival_timestamp`` in seconds → ``arrivals``.
- The profiling table ``data/perf_model.csv`` (prefill/decode latency per model × GPU × TP × batch)
  is recognised but not ingested: it holds no requests. It is calibration data for cost models.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.arrival_traces import ArrivalClock, arrivals_frame, split_csv
from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num
from pipeline.readers.frames import file_quarantine, split_valid
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import csv_header

PRIORITY = 52
TRACE = (
    "request_id",
    "request_type",
    "application_id",
    "arrival_timestamp",
    "batch_size",
    "prompt_size",
    "token_size",
)
PERF_MODEL = ("model", "hardware", "prompt_size", "batch_size", "token_size")


class SplitwiseReader:
    name = "splitwise"
    description = (
        "Splitwise-sim request trace CSV (arrival_timestamp in s, prompt_size, token_size): "
        "arrivals only. Its perf_model.csv profiling table is recognised and skipped (one "
        "quarantine row saying why): it holds no requests."
    )
    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        h = tuple(csv_header(head))
        return h == TRACE or h[: len(PERF_MODEL)] == PERF_MODEL

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        from pipeline.files.sources import read_head

        header = tuple(csv_header(read_head(ctx.path)))
        if header != TRACE:
            yield file_quarantine(
                "splitwise-sim perf_model.csv is a profiling table (prefill/decode latency per "
                "model x GPU x TP x batch size, in ms), not requests or arrivals: not ingested. "
                "Use it as calibration data for cost models.",
                ",".join(header),
            )
            return
        clock = ArrivalClock()
        for nums, texts in iter_line_batches(ctx, skip_header=True):
            df = split_csv(pl.DataFrame({"_line": nums, "_raw": texts}), TRACE)
            df = df.with_columns(
                num(pl.col("arrival_timestamp")).alias("t"),
                num(pl.col("prompt_size")).alias("p"),
                num(pl.col("token_size")).alias("o"),
                pl.col("request_id").str.strip_chars().alias("rid"),
            )
            good, q = split_valid(
                df,
                [
                    (pl.col("_nfields") != len(TRACE), f"expected {len(TRACE)} fields"),
                    (pl.col("rid").fill_null("") == "", "request_id is empty"),
                    (
                        pl.col("t").is_null() | ~pl.col("t").is_finite(),
                        "arrival_timestamp is not a number",
                    ),
                    (bad_count(pl.col("p")), "prompt_size is not a whole number >= 0"),
                    (bad_count(pl.col("o")), "token_size is not a whole number >= 0"),
                ],
            )
            out = good.with_columns(clock.rebase(good["t"]).alias("t_arrival")).select(
                pl.col("rid").alias("request_id"),
                pl.col("_line").alias("source_line"),
                "t_arrival",
                pl.col("p").cast(pl.Int64, strict=False).alias("prompt_tokens"),
                pl.col("o").cast(pl.Int64, strict=False).alias("output_tokens"),
            )
            yield ReaderOutput(
                arrivals=arrivals_frame(self.name, ctx, out), quarantine=q if q.height else None
            )


READER = SplitwiseReader()
