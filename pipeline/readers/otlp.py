"""OpenTelemetry OTLP/JSON trace exports with vLLM / SGLang ``llm_request`` spans.

One ``ExportTraceServiceRequest`` per document (a file may hold one, or one per line as the
Collector's file exporter writes). A span is a request when its name is ``llm_request`` or it
carries ``gen_ai.usage.*`` / ``gen_ai.latency.*`` attributes; other spans (SGLang's child spans,
unrelated services) are skipped. ``*UnixNano`` and ``intValue`` may be strings. Times:

- ``arrival_ts`` = span start (epoch ns → s, unix clock);
- ``first_token_ts`` = arrival + ``gen_ai.latency.time_to_first_token``;
- ``scheduled_ts`` = first_token − ``gen_ai.latency.time_in_model_prefill`` (else arrival +
  ``time_in_queue``);
- ``finish_ts`` = arrival + ``gen_ai.latency.e2e`` (else span end).

OTLP metrics/logs payloads and traces without such spans are recognised and yield one quarantine
row that says why nothing was ingested.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.files.sources import compression, iter_blocks
from pipeline.readers import otlp_streamed, vllm_bench
from pipeline.readers.base import RAW_LIMIT, Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.columns import bad_count, jpath, num
from pipeline.readers.frames import quarantine_frame, records_frame, requests_frame, split_valid
from pipeline.readers.json_text import decode_text, iter_json_documents, read_all
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import head_text

PRIORITY = 25
# A pretty-printed payload this large (or compressed) is streamed a batch of spans at a time
# (otlp_streamed); smaller ones are parsed whole, as always.
STREAM_MIN_BYTES = vllm_bench.COLUMNAR_MIN_BYTES
# A string value is taken up to its closing quote (commas, braces and escaped quotes inside it
# are kept; escapes stay as written); a number or bool up to the next delimiter.
_STRING_VALUE = r'"stringValue": "((?:[^"\\]|\\.)*)"'
_OTHER_VALUE = r'"(?:intValue|doubleValue|boolValue)": "?([^",}\]]*)"?'


def _attr(name: str) -> pl.Expr:
    """Value of span attribute ``name`` (as text) from the JSON text of the attributes list."""
    head = r'"key": "' + re.escape(name) + r'", "value": \{'
    text = pl.col("attributes")
    return pl.coalesce(
        text.str.extract(head + _STRING_VALUE, 1), text.str.extract(head + _OTHER_VALUE, 1)
    )


def _first_attr(*names: str) -> pl.Expr:
    return pl.coalesce([_attr(n) for n in names])


class OtlpReader:
    name = "otlp_llm_spans"
    description = (
        "OpenTelemetry OTLP/JSON trace export (one payload or one per line) with vLLM/SGLang "
        "llm_request spans (gen_ai.* attributes): one request per span, absolute unix times, "
        "server-side queue/prefill/decode split. Non-LLM spans are skipped; metrics and logs "
        "payloads are recognised and quarantined. No per-token times, no GPU: use --set gpu=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=True,
        needs_set=("gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        return text.startswith("{") and any(
            k in text[:2000] for k in ('"resourceSpans"', '"resourceMetrics"', '"resourceLogs"')
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        seen = _Seen()
        if _one_payload_per_line(ctx):
            # The Collector's file exporter: read line batches, so memory stays bounded.
            for nums, texts in iter_line_batches(ctx):
                docs = (_parse_line(n, t) for n, t in zip(nums, texts, strict=True))
                yield from self._batch(ctx, docs, seen)
        else:  # one (pretty-printed) payload: a single JSON value
            big = compression(ctx.path) is not None or ctx.path.stat().st_size >= STREAM_MIN_BYTES
            plan = otlp_streamed.plan(ctx) if big else None
            if plan is None:
                docs = iter_json_documents(decode_text(read_all(ctx)))
                yield from self._batch(ctx, docs, seen)
            else:
                try:
                    yield from self._batch(ctx, [(1, plan.doc, None)], seen, plan)
                finally:
                    plan.close()
        if seen.docs == 0:
            raise InputError("file is empty")
        if not seen.spans:
            kinds = " and ".join(sorted(seen.other)) or "no"
            reason = (
                f"OTLP payload with {kinds} data and no spans: OTLP metrics and logs are "
                "aggregates, not per-request records; nothing ingested"
            )
        elif not seen.llm:
            names = sorted(seen.names)[:5]
            reason = (
                f"OTLP trace with {seen.spans} span(s) ({', '.join(map(repr, names))}) but "
                "none is an LLM request span (name 'llm_request' or gen_ai.usage/latency "
                "attributes): nothing ingested"
            )
        else:
            return
        yield ReaderOutput(quarantine=quarantine_frame([0], [reason], [None]))

    def _batch(
        self,
        ctx: ReadContext,
        docs: Iterable[tuple[int, Any, str | None]],
        seen: _Seen,
        plan: otlp_streamed.Plan | None = None,
    ) -> Iterator[ReaderOutput]:
        """Requests of the LLM spans in ``docs``, in frames of about ``ctx.batch_rows`` spans
        (span arrays the ``plan`` located are parsed from the file a batch at a time)."""
        spans: list[Any] = []
        resource_of: list[str | None] = []
        bad: list[tuple[int, str, Any]] = []
        for line, doc, err in docs:  # one per payload (a batch of spans), not per span
            seen.docs += 1
            if err is not None or not isinstance(doc, dict):
                bad.append((line, err or "payload is not a JSON object", doc))
                continue
            if "resourceMetrics" in doc:
                seen.other.add("metrics")
            if "resourceLogs" in doc:
                seen.other.add("logs")
            for part, service in _span_lists(doc, plan, ctx.batch_rows):
                spans.extend(part)
                resource_of.extend([service] * len(part))
                # A streamed batch (<= json_elements.BATCH_BYTES of text) is converted at once:
                # gathering batch_rows spans as Python dicts peaked at 1.8 GB for 1M spans.
                if len(spans) >= ctx.batch_rows or plan is not None:
                    yield from self._spans(ctx, spans, resource_of, bad, seen)
                    spans, resource_of, bad = [], [], []
        if spans or bad:
            yield from self._spans(ctx, spans, resource_of, bad, seen)

    def _spans(
        self,
        ctx: ReadContext,
        spans: list[Any],
        resource_of: list[str | None],
        bad: list[tuple[int, str, Any]],
        seen: _Seen,
    ) -> Iterator[ReaderOutput]:
        q_frames = [quarantine_frame(*zip(*bad, strict=True))] if bad else []
        if not spans:
            yield ReaderOutput(quarantine=pl.concat(q_frames))
            return
        df = records_frame(spans).with_columns(
            pl.Series("service", resource_of, pl.Utf8),
            pl.col("_line") + seen.spans,  # the span's index in the file, across batches
        )
        seen.spans += len(spans)
        for col in ("name", "spanId", "startTimeUnixNano", "endTimeUnixNano", "attributes"):
            if col not in df.columns:
                df = df.with_columns(pl.lit(None, pl.Utf8).alias(col))
        is_llm = (pl.col("name") == "llm_request") | pl.col("attributes").fill_null(
            ""
        ).str.contains(r'"key": "gen_ai\.(usage|latency)\.')
        llm = df.filter(is_llm)
        seen.llm += llm.height
        if len(seen.names) < 5:
            seen.names.update(df["name"].drop_nulls().unique().to_list())
        if llm.height == 0:
            if q_frames:
                yield ReaderOutput(quarantine=pl.concat(q_frames))
            return
        yield self._requests(ctx, llm, q_frames)

    def _requests(
        self, ctx: ReadContext, df: pl.DataFrame, q_frames: list[pl.DataFrame]
    ) -> ReaderOutput:
        start_ns = pl.col("startTimeUnixNano").str.strip_chars().cast(pl.Int64, strict=False)
        end_ns = pl.col("endTimeUnixNano").str.strip_chars().cast(pl.Int64, strict=False)
        x = df.with_columns(
            (start_ns // 1000 / 1e6 + start_ns % 1000 / 1e9).alias("t0"),
            (end_ns // 1000 / 1e6 + end_ns % 1000 / 1e9).alias("tend"),
            num(_first_attr("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")).alias(
                "inp"
            ),
            num(_first_attr("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")).alias(
                "outp"
            ),
            num(
                _first_attr("gen_ai.usage.cached_tokens", "gen_ai.usage.cache_read.input_tokens")
            ).alias("cached"),
            num(_attr("gen_ai.latency.time_to_first_token")).alias("ttft"),
            num(_attr("gen_ai.latency.e2e")).alias("e2e"),
            num(_attr("gen_ai.latency.time_in_queue")).alias("queue"),
            num(_attr("gen_ai.latency.time_in_model_prefill")).alias("prefill"),
            _first_attr("gen_ai.request.id", "gen_ai.response.id").alias("rid"),
            _first_attr("gen_ai.response.model", "gen_ai.request.model").alias("model"),
            jpath("status", "$.code").alias("scode")
            if "status" in df.columns
            else pl.lit(None, pl.Utf8).alias("scode"),
            jpath("status", "$.message").alias("smsg")
            if "status" in df.columns
            else pl.lit(None, pl.Utf8).alias("smsg"),
        )
        is_err = (pl.col("scode") == "2") | (pl.col("scode") == "STATUS_CODE_ERROR")
        checks = [
            (pl.col("t0").is_null(), "startTimeUnixNano missing or not an integer"),
            (bad_count(pl.col("inp")), "gen_ai.usage.prompt_tokens missing or not a count"),
            (
                ~is_err & bad_count(pl.col("outp")),
                "gen_ai.usage.completion_tokens missing or not a count",
            ),
        ]
        good, q = split_valid(x, checks)
        engine = (
            pl.when(pl.col("service").str.contains("(?i)sglang"))
            .then(pl.lit("sglang"))
            .when(pl.col("service").str.contains("(?i)vllm"))
            .then(pl.lit("vllm"))
        )
        first = pl.col("t0") + pl.col("ttft")
        out = good.select(
            pl.coalesce(pl.col("rid"), pl.col("spanId"), pl.col("_line").cast(pl.Utf8)).alias(
                "request_id"
            ),
            pl.col("_line").alias("source_line"),
            pl.lit(ctx.default_run_id).alias("run_id"),
            pl.col("model"),
            engine.alias("engine"),
            pl.col("inp").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            pl.col("cached").fill_null(0).cast(pl.Int64, strict=False).alias("cached_tokens"),
            pl.col("outp").fill_null(0).cast(pl.Int64, strict=False).alias("output_tokens"),
            pl.lit("unix").alias("clock"),
            pl.col("t0").alias("arrival_ts"),
            pl.coalesce(first - pl.col("prefill"), pl.col("t0") + pl.col("queue")).alias(
                "scheduled_ts"
            ),
            first.alias("first_token_ts"),
            pl.coalesce(pl.col("t0") + pl.col("e2e"), pl.col("tend")).alias("finish_ts"),
            pl.when(is_err).then(pl.lit("error")).otherwise(pl.lit("ok")).alias("status"),
            pl.when(is_err).then(pl.col("smsg").fill_null("span status ERROR")).alias("error"),
        )
        if q.height:
            q_frames.append(q)
        return ReaderOutput(
            requests=requests_frame(out), quarantine=pl.concat(q_frames) if q_frames else None
        )


@dataclass
class _Seen:
    """What the batches read so far held (for the file-level "nothing ingested" messages)."""

    docs: int = 0
    spans: int = 0
    llm: int = 0
    other: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)


def _span_lists(
    doc: dict, plan: otlp_streamed.Plan | None, batch_rows: int
) -> Iterator[tuple[list[Any], str | None]]:
    """(spans, service name) per resource and scope (a streamed array: per batch of spans)."""
    for i, rs in enumerate(doc.get("resourceSpans") or []):  # per resource and scope
        if not isinstance(rs, dict):
            continue
        service = None
        for a in (rs.get("resource") or {}).get("attributes") or []:
            if isinstance(a, dict) and a.get("key") == "service.name":
                service = (a.get("value") or {}).get("stringValue")
        key = "scopeSpans" if rs.get("scopeSpans") else "instrumentationLibrarySpans"
        for j, ss in enumerate(rs.get(key) or []):
            arr = plan.spans(i, key, j, ss) if plan is not None else None
            if arr is not None:
                yield from ((part, service) for part in otlp_streamed.span_batches(arr, batch_rows))
            elif isinstance(ss, dict) and isinstance(ss.get("spans"), list):
                yield ss["spans"], service


def _one_payload_per_line(ctx: ReadContext) -> bool:
    """True unless the first line is not a whole JSON value (a pretty-printed payload)."""
    head = next(iter_blocks(ctx.path), b"")
    text = head_text(head)
    if "\n" not in text:
        return True  # one line (or a first line longer than a block): read it as a line
    try:
        json.loads(text.split("\n", 1)[0])
    except ValueError:
        return False
    return True


def _parse_line(line: int, text: str) -> tuple[int, Any, str | None]:
    try:
        return line, json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return line, text[:RAW_LIMIT], f"invalid or truncated JSON: {exc}"


READER = OtlpReader()
