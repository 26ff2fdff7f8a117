"""BurstGPT traces (HPMLL/BurstGPT): 6-column (``BurstGPT_1/2``) and 8-column (``BurstGPT_3``) CSV.

``Timestamp`` is seconds from the start of the trace (relative). Columns are found by header name,
never by position, so both layouts read correctly. Arrivals only; ``Model``, ``Log Type``,
``Session ID`` and ``Elapsed time`` (full response time, not TTFT) have no column in ``arrivals``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.arrival_traces import ArrivalClock, arrivals_frame, split_csv
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num
from pipeline.readers.frames import split_valid
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import csv_header

PRIORITY = 51
SIX = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
EIGHT = (
    "Timestamp",
    "Session ID",
    "Elapsed time",
    "Model",
    "Request tokens",
    "Response tokens",
    "Total tokens",
    "Log Type",
)


class BurstGptReader:
    name = "burstgpt"
    description = (
        "BurstGPT trace CSV, 6-column (BurstGPT_1/2) or 8-column (BurstGPT_3) layout: arrivals "
        "only (relative seconds, request and response tokens; failures have 0 response tokens)."
    )
    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        return tuple(csv_header(head)) in (SIX, EIGHT)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        from pipeline.files.sources import read_head

        header = tuple(csv_header(read_head(ctx.path)))
        if header not in (SIX, EIGHT):
            raise InputError(f"BurstGPT header not recognised: {','.join(header)}")
        clock = ArrivalClock()
        for nums, texts in iter_line_batches(ctx, skip_header=True):
            df = split_csv(pl.DataFrame({"_line": nums, "_raw": texts}), header)
            df = df.with_columns(
                num(pl.col("Timestamp")).alias("t"),
                num(pl.col("Request tokens")).alias("p"),
                num(pl.col("Response tokens")).alias("o"),
            )
            good, q = split_valid(
                df,
                [
                    (pl.col("_nfields") != len(header), f"expected {len(header)} fields"),
                    (pl.col("t").is_null() | ~pl.col("t").is_finite(), "Timestamp is not a number"),
                    (bad_count(pl.col("p")), "Request tokens is not a whole number >= 0"),
                    (bad_count(pl.col("o")), "Response tokens is not a whole number >= 0"),
                ],
            )
            out = good.with_columns(clock.rebase(good["t"]).alias("t_arrival")).select(
                (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
                pl.col("_line").alias("source_line"),
                "t_arrival",
                pl.col("p").cast(pl.Int64, strict=False).alias("prompt_tokens"),
                pl.col("o").cast(pl.Int64, strict=False).alias("output_tokens"),
            )
            yield ReaderOutput(
                arrivals=arrivals_frame(self.name, ctx, out), quarantine=q if q.height else None
            )


READER = BurstGptReader()
