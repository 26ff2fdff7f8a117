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

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput

PRIORITY = 25
_ATTR_VALUE = r'"(?:stringValue|intValue|doubleValue|boolValue)": "?([^",}\]]*)"?'


def _attr(name: str) -> pl.Expr:
    """Value of span attribute ``name`` (as text) from the JSON text of the attributes list."""
    pattern = r'"key": "' + re.escape(name) + r'", "value": \{' + _ATTR_VALUE
    return pl.col("attributes").str.extract(pattern, 1)


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
        text = c.head_text(head)
        return text.startswith("{") and any(
            k in text[:2000] for k in ('"resourceSpans"', '"resourceMetrics"', '"resourceLogs"')
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        text = c.decode_text(c.read_all(ctx))
        spans: list[Any] = []
        resource_of: list[str | None] = []
        other: list[str] = []
        bad: list[tuple[int, str, Any]] = []
        n_docs = 0
        for line, doc, err in c.iter_json_documents(text):  # one per payload
            n_docs += 1
            if err is not None or not isinstance(doc, dict):
                bad.append((line, err or "payload is not a JSON object", doc))
                continue
            if "resourceMetrics" in doc:
                other.append("metrics")
            if "resourceLogs" in doc:
                other.append("logs")
            for rs in doc.get("resourceSpans") or []:  # per resource and scope, not per span
                if not isinstance(rs, dict):
                    continue
                service = None
                for a in (rs.get("resource") or {}).get("attributes") or []:
                    if isinstance(a, dict) and a.get("key") == "service.name":
                        service = (a.get("value") or {}).get("stringValue")
                for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                    if isinstance(ss, dict) and isinstance(ss.get("spans"), list):
                        spans.extend(ss["spans"])
                        resource_of.extend([service] * len(ss["spans"]))
        if n_docs == 0:
            raise InputError("file is empty")
        q_frames = []
        if bad:
            q_frames.append(c.quarantine_frame(*zip(*bad, strict=True)))
        if not spans:
            kinds = " and ".join(sorted(set(other))) or "no"
            q_frames.append(
                c.quarantine_frame(
                    [0],
                    [
                        f"OTLP payload with {kinds} data and no spans: OTLP metrics and logs are "
                        "aggregates, not per-request records; nothing ingested"
                    ],
                    [None],
                )
            )
            yield ReaderOutput(quarantine=pl.concat(q_frames))
            return
        df = c.records_frame(spans).with_columns(pl.Series("service", resource_of, pl.Utf8))
        for col in ("name", "spanId", "startTimeUnixNano", "endTimeUnixNano", "attributes"):
            if col not in df.columns:
                df = df.with_columns(pl.lit(None, pl.Utf8).alias(col))
        is_llm = (pl.col("name") == "llm_request") | pl.col("attributes").fill_null(
            ""
        ).str.contains(r'"key": "gen_ai\.(usage|latency)\.')
        llm = df.filter(is_llm)
        if llm.height == 0:
            names = sorted(set(df["name"].drop_nulls().to_list()))[:5]
            q_frames.append(
                c.quarantine_frame(
                    [0],
                    [
                        f"OTLP trace with {df.height} span(s) ({', '.join(map(repr, names))}) but "
                        "none is an LLM request span (name 'llm_request' or gen_ai.usage/latency "
                        "attributes): nothing ingested"
                    ],
                    [None],
                )
            )
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
            c.num(_first_attr("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")).alias(
                "inp"
            ),
            c.num(
                _first_attr("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")
            ).alias("outp"),
            c.num(
                _first_attr("gen_ai.usage.cached_tokens", "gen_ai.usage.cache_read.input_tokens")
            ).alias("cached"),
            c.num(_attr("gen_ai.latency.time_to_first_token")).alias("ttft"),
            c.num(_attr("gen_ai.latency.e2e")).alias("e2e"),
            c.num(_attr("gen_ai.latency.time_in_queue")).alias("queue"),
            c.num(_attr("gen_ai.latency.time_in_model_prefill")).alias("prefill"),
            _first_attr("gen_ai.request.id", "gen_ai.response.id").alias("rid"),
            _first_attr("gen_ai.response.model", "gen_ai.request.model").alias("model"),
            c.jpath("status", "$.code").alias("scode")
            if "status" in df.columns
            else pl.lit(None, pl.Utf8).alias("scode"),
            c.jpath("status", "$.message").alias("smsg")
            if "status" in df.columns
            else pl.lit(None, pl.Utf8).alias("smsg"),
        )
        is_err = (pl.col("scode") == "2") | (pl.col("scode") == "STATUS_CODE_ERROR")
        checks = [
            (pl.col("t0").is_null(), "startTimeUnixNano missing or not an integer"),
            (c.bad_count(pl.col("inp")), "gen_ai.usage.prompt_tokens missing or not a count"),
            (
                ~is_err & c.bad_count(pl.col("outp")),
                "gen_ai.usage.completion_tokens missing or not a count",
            ),
        ]
        good, q = c.split_valid(x, checks)
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
            requests=c.requests_frame(out), quarantine=pl.concat(q_frames) if q_frames else None
        )


READER = OtlpReader()
