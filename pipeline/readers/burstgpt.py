"""BurstGPT traces (HPMLL/BurstGPT): 6-column (``BurstGPT_1/2``) and 8-column (``BurstGPT_3``) CSV.

``Timestamp`` is seconds from the start of the trace (relative). Columns are found by header name,
never by position, so both layouts read correctly. Arrivals only; ``Model``, ``Log Type``,
``Session ID`` and ``Elapsed time`` (full response time, not TTFT) have no column in ``arrivals``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput

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
        return tuple(c.csv_header(head)) in (SIX, EIGHT)

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        from pipeline.files.sources import read_head

        header = tuple(c.csv_header(read_head(ctx.path)))
        if header not in (SIX, EIGHT):
            raise InputError(f"BurstGPT header not recognised: {','.join(header)}")
        clock = c.ArrivalClock()
        for nums, texts in c.iter_line_batches(ctx, skip_header=True):
            df = c.split_csv(pl.DataFrame({"_line": nums, "_raw": texts}), header)
            df = df.with_columns(
                c.num(pl.col("Timestamp")).alias("t"),
                c.num(pl.col("Request tokens")).alias("p"),
                c.num(pl.col("Response tokens")).alias("o"),
            )
            good, q = c.split_valid(
                df,
                [
                    (pl.col("_nfields") != len(header), f"expected {len(header)} fields"),
                    (pl.col("t").is_null() | ~pl.col("t").is_finite(), "Timestamp is not a number"),
                    (c.bad_count(pl.col("p")), "Request tokens is not a whole number >= 0"),
                    (c.bad_count(pl.col("o")), "Response tokens is not a whole number >= 0"),
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
                arrivals=c.arrivals_frame(self.name, ctx, out), quarantine=q if q.height else None
            )


READER = BurstGptReader()
