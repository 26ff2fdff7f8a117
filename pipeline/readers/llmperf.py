"""ray-project llmperf: ``*_individual_responses.json`` (array of requests) and ``*_summary.json``.

Individual responses carry durations only (``ttft_s``, ``end_to_end_latency_s``), token counts
and ``error_code``/``error_msg``: no request timestamps, no per-token times. Requests therefore
all sit at t=0 of a relative clock. llmperf's ``inter_token_latency_s`` includes the TTFT (it is
≈ e2e / output tokens) and is not mapped to anything; TPOT is recomputed from first token and
finish. The summary is a flat object: ``results_*`` numbers (min/max sometimes written as strings)
→ ``run_summaries``; model, concurrency and ``--metadata`` keys → ``runs``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from pipeline.files.sources import compression
from pipeline.readers import element_frames as ef
from pipeline.readers.base import (
    Capabilities,
    InputError,
    ReadContext,
    ReaderOutput,
    sibling_run_id,
)
from pipeline.readers.columns import bad_count, col_or_null, num
from pipeline.readers.frames import (
    records_frame,
    requests_frame,
    runs_frame,
    split_valid,
    summaries_frame,
)
from pipeline.readers.json_elements import ElementArray
from pipeline.readers.json_text import load_json
from pipeline.readers.sniff import head_text
from pipeline.readers.units import as_float
from pipeline.readers.vllm_bench import COLUMNAR_MIN_BYTES, Source

PRIORITY = 40
STREAM_MIN_BYTES = COLUMNAR_MIN_BYTES  # arrays this large (or compressed) are streamed


def _records_array(src: Source) -> tuple[ElementArray, dict[str, pl.DataType]] | None:
    """The document's top-level array and its columns, when the structural scan can stream it
    (None for the summary object or anything unusual: the whole path reads those)."""
    arr = ef.array_at(src, [])
    schema = ef.sample_schema(arr) if arr is not None else None
    return (arr, schema) if arr is not None and schema is not None else None


class LlmperfReader:
    name = "llmperf"
    description = (
        "ray-project llmperf individual_responses.json (one request per element: TTFT, E2E, "
        "token counts, errors; no timestamps, so all arrivals at t=0 relative) and summary.json "
        "(results_* -> run_summaries, model/concurrency/metadata -> runs). No per-token times. "
        "No model or GPU in the individual file: use --set model=... gpu=..."
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
        if text.startswith("["):
            return '"end_to_end_latency_s"' in text and '"ttft_s"' in text
        if text.startswith("{"):
            return '"results_ttft_s_' in text or (
                '"num_concurrent_requests"' in text and '"results_' in text
            )
        return False

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        # A large (or compressed) array of responses is streamed a batch of elements at a time,
        # as GuideLLM's and a mapping's arrays are; the tables are those of the whole path.
        big = compression(ctx.path) is not None or ctx.path.stat().st_size >= STREAM_MIN_BYTES
        found = ef.located(ctx, _records_array) if big else None
        if found is not None:
            arr, schema = found
            try:
                yield from self._streamed(ctx, arr, schema)
            finally:
                arr.src.close()
            return
        doc = load_json(ctx)
        if isinstance(doc, list):
            yield self._individual(ctx, doc)
        elif isinstance(doc, dict):
            yield self._summary(ctx, doc)
        else:
            raise InputError(f"llmperf file is a JSON {type(doc).__name__}, not an array/object")

    def _streamed(
        self, ctx: ReadContext, arr: ElementArray, schema: dict[str, pl.DataType]
    ) -> Iterator[ReaderOutput]:
        runs = True
        for first, chunk, is_obj in arr.batches(max_rows=ctx.batch_rows):
            df = ef.batch_frame(chunk, is_obj, schema, lambda: load_json(ctx))
            del chunk
            lines = pl.int_range(first + 1, first + 1 + df.height, eager=True)
            df = df.with_columns(lines.cast(pl.Int64).alias("_line"))
            out = self._frame(ctx, df, runs)
            if out.quarantine is not None:  # raw as the whole path re-dumps it
                out = dataclasses.replace(out, quarantine=ef.redump_raw(out.quarantine, df))
            runs = False
            yield out
        if runs:  # an empty array: its run, as the whole path gives it
            yield self._individual(ctx, [])

    def _individual(self, ctx: ReadContext, records: list) -> ReaderOutput:
        return self._frame(ctx, records_frame(records), runs=True)

    def _frame(self, ctx: ReadContext, df: pl.DataFrame, runs: bool) -> ReaderOutput:
        g = lambda n: col_or_null(df, n)  # noqa: E731
        x = df.with_columns(
            num(g("ttft_s")).alias("ttft"),
            num(g("end_to_end_latency_s")).alias("e2e"),
            num(g("number_input_tokens")).alias("inp"),
            num(g("number_output_tokens")).alias("outp"),
            g("error_code").alias("code"),
            g("error_msg").alias("msg"),
        )
        is_err = pl.col("code").is_not_null() & (pl.col("code").str.strip_chars() != "")

        bad_int = bad_count

        checks = [
            (pl.col("_raw").str.starts_with('{"_not_an_object"'), "element is not an object"),
            (bad_int(pl.col("inp")), "number_input_tokens missing or not a whole number"),
            (bad_int(pl.col("outp")), "number_output_tokens missing or not a whole number"),
            (~is_err & pl.col("ttft").is_null(), "ttft_s missing or not a number"),
            (~is_err & pl.col("e2e").is_null(), "end_to_end_latency_s missing or not a number"),
        ]
        good, q = split_valid(x, checks)
        ok = ~is_err
        out = good.select(
            (pl.col("_line") - 1).cast(pl.Utf8).alias("request_id"),
            pl.col("_line").alias("source_line"),
            pl.lit(ctx.default_run_id).alias("run_id"),
            pl.col("inp").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.col("outp").cast(pl.Int64, strict=False).alias("output_tokens"),
            pl.lit("request").alias("clock"),  # no arrival times: each request from its own 0
            pl.lit(0.0).alias("arrival_ts"),
            pl.col("ttft").alias("first_token_ts"),
            pl.col("e2e").alias("finish_ts"),
            pl.when(ok).then(pl.lit("ok")).otherwise(pl.lit("error")).alias("status"),
            pl.when(ok)
            .then(None)
            .otherwise(
                pl.concat_str(
                    [
                        pl.lit("error_code "),
                        pl.col("code"),
                        pl.lit(": "),
                        pl.col("msg").fill_null(""),
                    ]
                )
            )
            .alias("error"),
        )
        return ReaderOutput(
            requests=requests_frame(out),
            quarantine=q if q.height else None,
            runs=runs_frame(
                self.name,
                ctx,
                [{"run_id": ctx.default_run_id, "metadata": {"arrival_times_known": False}}],
            )
            if runs
            else None,
        )

    def _summary(self, ctx: ReadContext, doc: dict) -> ReaderOutput:
        metrics = {k: v for k, v in doc.items() if k.startswith("results_")}
        meta = {k: v for k, v in doc.items() if not k.startswith("results_")}
        meta["results_error_code_frequency"] = doc.get("results_error_code_frequency")
        run_id = _per_request_run(ctx)
        rpm = as_float(doc.get("results_num_completed_requests_per_min"))
        run = {
            "run_id": run_id,
            "model": doc.get("model"),
            "max_concurrency": doc.get("num_concurrent_requests"),
            # llmperf's own completed-requests rate: the per-request file has no clock to give one.
            "request_rate": rpm / 60.0 if rpm is not None else None,
            "metadata": meta,
        }
        if not metrics:
            raise InputError("llmperf summary without any results_* keys")
        return ReaderOutput(
            runs=runs_frame(self.name, ctx, [run]),
            run_summaries=summaries_frame(self.name, ctx, run_id, metrics),
        )


def _per_request_run(ctx: ReadContext) -> str:
    """The run of the per-request file this summary describes, when it sits beside it:
    llmperf writes ``<prefix>_summary.json`` and ``<prefix>_individual_responses.json`` (also
    seen renamed ``summary_<x>.json`` / ``individual_<x>.json``)."""
    name = ctx.path.name
    for candidate in (
        name.replace("_summary.json", "_individual_responses.json"),
        name.replace("summary_", "individual_", 1) if name.startswith("summary_") else "",
    ):
        if candidate and candidate != name:
            found = sibling_run_id(ctx.path.parent / candidate)
            if found:
                return found
    return ctx.default_run_id


READER = LlmperfReader()
