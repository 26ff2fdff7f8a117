"""Azure LLM inference traces (AzurePublicDataset): ``TIMESTAMP,ContextTokens,GeneratedTokens``.

2023 (Splitwise): naive datetimes with 7 fractional digits (``2023-11-16 18:17:03.9799600``),
no time zone — read as UTC. 2024 (DynamoLLM): ``2024-05-10 00:00:00.009930+00:00``, fraction
dropped on whole seconds. Both are arrivals only (no latencies): they feed the ``arrivals`` table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.arrival_traces import ArrivalClock, arrivals_frame, split_csv
from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num, parse_datetime_utc
from pipeline.readers.frames import split_valid
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import csv_header

PRIORITY = 50
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class AzureTraceReader:
    name = "azure_llm_trace"
    description = (
        "Azure LLM inference trace CSV, 2023 and 2024 (TIMESTAMP,ContextTokens,GeneratedTokens): "
        "arrivals only (absolute UTC arrival, prompt and output tokens); no latencies, model, GPU."
    )
    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        return tuple(csv_header(head)) == COLUMNS

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        clock = ArrivalClock()
        for nums, texts in iter_line_batches(ctx, skip_header=True):
            df = split_csv(pl.DataFrame({"_line": nums, "_raw": texts}), COLUMNS)
            df = df.with_columns(
                parse_datetime_utc(pl.col("TIMESTAMP")).alias("arrival_at"),
                num(pl.col("ContextTokens")).alias("p"),
                num(pl.col("GeneratedTokens")).alias("o"),
            )
            good, q = split_valid(
                df,
                [
                    (pl.col("_nfields") != 3, "expected 3 comma-separated fields"),
                    (pl.col("arrival_at").is_null(), "TIMESTAMP is not a date-time"),
                    (bad_count(pl.col("p")), "ContextTokens is not a whole number >= 0"),
                    (bad_count(pl.col("o")), "GeneratedTokens is not a whole number >= 0"),
                ],
            )
            epoch = good["arrival_at"].dt.epoch("us").cast(pl.Float64) / 1e6
            out = good.with_columns(clock.rebase(epoch).alias("t_arrival")).select(
                (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
                pl.col("_line").alias("source_line"),
                "t_arrival",
                "arrival_at",
                pl.col("p").cast(pl.Int64, strict=False).alias("prompt_tokens"),
                pl.col("o").cast(pl.Int64, strict=False).alias("output_tokens"),
            )
            yield ReaderOutput(
                arrivals=arrivals_frame(self.name, ctx, out), quarantine=q if q.height else None
            )


READER = AzureTraceReader()
