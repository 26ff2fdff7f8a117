"""NVIDIA perf_analyzer / genai-perf ``profile_export.json``.

``experiments[].requests[]``: ``timestamp`` (send time, epoch ns) and ``response_timestamps``
(epoch ns, one per streamed response) with ``response_outputs``. Empty responses and the SSE
``[DONE]`` sentinel are dropped as genai-perf does. ``token_times`` = response times − send time
(s); the token count per response is unknown (genai-perf re-tokenises the text), so
``token_counts`` and ``output_tokens`` stay null and the prompt length too. One run per experiment
(``experiment.mode`` / ``value`` → concurrency or request rate).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import num_list
from pipeline.readers.frames import records_frame, requests_frame, runs_frame, split_valid
from pipeline.readers.json_text import load_json
from pipeline.readers.sniff import head_text
from pipeline.readers.vllm_bench import run_ids

PRIORITY = 32


class GenaiPerfReader:
    name = "genai_perf"
    description = (
        "perf_analyzer / genai-perf profile_export.json: one request per entry with absolute send "
        "time and per-response timestamps (epoch ns) -> token_times (unix clock). Token counts are "
        "not in the file (null; genai-perf tokenises the text). No model/GPU: use --set."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=True,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        return text.startswith("{") and '"experiments"' in text and '"response_timestamps"' in text

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        doc = load_json(ctx)
        exps = doc.get("experiments") if isinstance(doc, dict) else None
        if not isinstance(exps, list):
            raise InputError("profile_export.json without an 'experiments' list")
        meta_top = {k: v for k, v in doc.items() if k != "experiments"}
        offset = 0
        for exp, run_id in zip(exps, run_ids(ctx, len(exps)), strict=True):
            exp = exp if isinstance(exp, dict) else {}
            reqs = exp.get("requests") if isinstance(exp.get("requests"), list) else []
            info = exp.get("experiment") if isinstance(exp.get("experiment"), dict) else {}
            mode = info.get("mode")
            run = {
                "run_id": run_id,
                "backend": doc.get("service_kind"),
                "request_rate": info.get("value") if mode == "request_rate" else None,
                "max_concurrency": info.get("value") if mode == "concurrency" else None,
                "metadata": {**meta_top, "experiment": info},
            }
            requests = quarantine = None
            if reqs:
                requests, quarantine = self._requests(reqs, run_id, offset)
            offset += len(reqs)
            yield ReaderOutput(
                requests=requests, quarantine=quarantine, runs=runs_frame(self.name, ctx, [run])
            )

    def _requests(
        self, reqs: list, run_id: str, offset: int
    ) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        df = records_frame(reqs).with_columns(pl.col("_line") + offset)
        for col in ("timestamp", "response_timestamps", "response_outputs"):
            if col not in df.columns:
                df = df.with_columns(pl.lit(None, pl.Utf8).alias(col))
        x = df.with_columns(
            pl.col("timestamp").str.strip_chars().cast(pl.Int64, strict=False).alias("t0"),
            num_list(pl.col("response_timestamps"), int_only=True).alias("rts"),
        )
        checks = [
            (pl.col("t0").is_null() | (pl.col("t0") <= 0), "timestamp missing or not ns epoch"),
            (pl.col("rts").is_null(), "response_timestamps is not a list of integers"),
        ]
        good, q = split_valid(x, checks)
        t0 = pl.col("t0")
        # Seconds since the send time, from integer ns differences (no float epoch rounding).
        token_times = pl.col("rts").list.eval(pl.element() - pl.element().first()).list.eval(
            pl.element().cast(pl.Float64) / 1e9
        ) + ((pl.col("rts").list.first() - t0).cast(pl.Float64) / 1e9)
        # The final SSE "[DONE]" response carries no tokens: genai-perf drops it, and so do we.
        done_last = pl.col("response_outputs").fill_null("").str.contains(
            r"\[DONE\][^\[]*\]\s*$"
        ) & (pl.col("rts").list.len() > 1)
        token_times = (
            pl.when(done_last)
            .then(token_times.list.head(pl.col("rts").list.len() - 1))
            .otherwise(token_times)
        )
        out = good.select(
            (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(run_id).alias("run_id"),
            pl.lit("unix").alias("clock"),
            ((t0 // 1000) / 1e6 + (t0 % 1000) / 1e9).alias("arrival_ts"),
            token_times.alias("token_times"),
            pl.lit("ok").alias("status"),
        ).with_columns(
            (pl.col("arrival_ts") + pl.col("token_times").list.first()).alias("first_token_ts"),
            (pl.col("arrival_ts") + pl.col("token_times").list.last()).alias("finish_ts"),
        )
        return requests_frame(out), (q if q.height else None)


READER = GenaiPerfReader()
