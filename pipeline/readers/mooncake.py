"""Mooncake FAST'25 traces: JSON lines ``{timestamp, input_length, output_length, hash_ids}``.

``timestamp`` is milliseconds from the trace start; ``hash_ids`` are prefix-cache block hashes
(512 tokens per block) → ``prefix_hash_ids``. Arrivals only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.arrival_traces import ArrivalClock, arrivals_frame
from pipeline.readers.base import Capabilities, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, num, num_list
from pipeline.readers.frames import split_valid
from pipeline.readers.lines import iter_line_batches, parse_ndjson
from pipeline.readers.sniff import first_line

PRIORITY = 53


class MooncakeReader:
    name = "mooncake"
    description = (
        "Mooncake trace JSON lines (timestamp in ms, input_length, output_length, hash_ids): "
        "arrivals only, with prefix-cache block hashes (512 tokens per block) in prefix_hash_ids."
    )
    capabilities = Capabilities(
        per_request=False, per_token=False, arrivals_only=True, gpu_model_present=False
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        line = first_line(head)
        return (
            line.startswith("{")
            and '"timestamp"' in line
            and '"input_length"' in line
            and '"output_length"' in line
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        clock = ArrivalClock()
        for nums, texts in iter_line_batches(ctx):
            df, q0 = parse_ndjson(
                nums, texts, ["timestamp", "input_length", "output_length", "hash_ids"]
            )
            df = df.with_columns(
                (num(pl.col("timestamp")) / 1000.0).alias("t"),
                num(pl.col("input_length")).alias("p"),
                num(pl.col("output_length")).alias("o"),
                num_list(pl.col("hash_ids"), int_only=True).alias("h"),
            )
            good, q = split_valid(
                df,
                [
                    (pl.col("t").is_null() | ~pl.col("t").is_finite(), "timestamp is not a number"),
                    (bad_count(pl.col("p")), "input_length is not a whole number >= 0"),
                    (bad_count(pl.col("o")), "output_length is not a whole number >= 0"),
                    (
                        pl.col("hash_ids").is_not_null() & pl.col("h").is_null(),
                        "hash_ids is not a list of integers",
                    ),
                ],
            )
            out = good.with_columns(clock.rebase(good["t"]).alias("t_arrival")).select(
                (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
                pl.col("_line").alias("source_line"),
                "t_arrival",
                pl.col("p").cast(pl.Int64, strict=False).alias("prompt_tokens"),
                pl.col("o").cast(pl.Int64, strict=False).alias("output_tokens"),
                pl.col("h").alias("prefix_hash_ids"),
            )
            quarantine = pl.concat([q0, q]) if q0.height else q
            yield ReaderOutput(
                arrivals=arrivals_frame(self.name, ctx, out),
                quarantine=quarantine if quarantine.height else None,
            )


READER = MooncakeReader()
