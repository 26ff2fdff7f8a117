"""NVIDIA AIPerf aggregates: ``profile_export_aiperf.json`` and ``profile_export_aiperf.csv``.

The JSON holds the metrics (tag → ``{unit, avg, min, max, p1..p99, std, count}``) under
``records`` (AIPerf <= 0.12) or at the top level (0.13, ``schema_version`` 1.4), and
``input_config`` (model names, endpoint, concurrency, ...). Each statistic becomes one
``run_summaries`` row named ``<tag>.<stat> [<unit>]``; ``input_config`` goes to the ``runs`` row.
The CSV has two sections (distribution table, then ``Metric,Value`` scalars); its rows are named
``<Metric header>.<stat>`` as written.

Both describe the requests of the ``profile_export.jsonl`` beside them, so they take that file's
run id (:func:`pipeline.readers.base.sibling_run_id`): one run, its requests and the tool's own
figures, which the report's parity table compares.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.readers.base import (
    Capabilities,
    InputError,
    ReadContext,
    ReaderOutput,
    sibling_run_id,
)
from pipeline.readers.frames import runs_frame, summaries_frame
from pipeline.readers.json_text import decode_text, read_all
from pipeline.readers.sniff import first_line, head_text

PRIORITY = 31
STATS = ("avg", "min", "max", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std")


def _get(d: object, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


class AiperfAggregateReader:
    name = "aiperf_aggregate"
    description = (
        "NVIDIA AIPerf aggregate profile_export_aiperf.json / .csv: the tool's own statistics -> "
        "run_summaries (metric '<tag>.<stat> [unit]'), input_config -> runs (model, endpoint, "
        "concurrency). No per-request rows; pair with profile_export.jsonl (reader aiperf)."
    )
    capabilities = Capabilities(
        per_request=False,
        per_token=False,
        arrivals_only=False,
        gpu_model_present=True,
        needs_set=(),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head_text(head)
        if text.startswith("{"):
            old = '"records"' in text and '"tag"' in text and '"header"' in text
            return old or ('"schema_version"' in text and '"aiperf_version"' in text)
        line = first_line(head)
        return line.startswith("Metric,avg,min,max") or (
            line == "Metric,Value" and "Request Throughput" in text
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        text = decode_text(read_all(ctx))
        if text.lstrip().startswith("{"):
            yield self._json(ctx, text)
        else:
            yield self._csv(ctx, text)

    def _json(self, ctx: ReadContext, text: str) -> ReaderOutput:
        import json

        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(f"not valid JSON (truncated?): {exc}") from exc
        if not isinstance(doc, dict):
            raise InputError("AIPerf aggregate JSON is not an object")
        if isinstance(doc.get("records"), dict):
            records = doc["records"]
        elif "schema_version" in doc:  # 0.13: the metrics are top-level {unit, avg, ...} objects
            records = {
                k: v
                for k, v in doc.items()
                if isinstance(v, dict) and isinstance(v.get("unit"), str)
            }
        else:
            raise InputError("AIPerf aggregate JSON without a 'records' object or schema_version")
        if not records:
            raise InputError("AIPerf aggregate JSON without any metric")
        metrics: dict[str, object] = {}
        for tag, rec in records.items():
            if not isinstance(rec, dict):
                continue
            unit = rec.get("unit")
            suffix = f" [{unit}]" if isinstance(unit, str) and unit else ""
            for stat in (*STATS, "count"):
                if stat in rec:
                    metrics[f"{tag}.{stat}{suffix if stat != 'count' else ''}"] = rec[stat]
        cfg = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
        models = _get(cfg, "endpoint", "model_names")  # <= 0.12
        if not models:  # 0.13: input_config.models.items[].name
            items = _get(cfg, "models", "items")
            models = [i.get("name") for i in items if isinstance(i, dict)] if items else None
        model = models[0] if isinstance(models, list) and models else None
        profiling = [
            p
            for p in cfg.get("phases") or []
            if isinstance(p, dict) and p.get("kind") == "profiling"
        ]
        phase = profiling[0] if profiling else {}
        meta = {k: v for k, v in doc.items() if k not in ("records", *records)}
        run_id = self._run_id(ctx)
        run = {
            "run_id": run_id,
            "model": model,
            "backend": _get(cfg, "endpoint", "type"),
            "request_rate": _get(cfg, "loadgen", "request_rate") or phase.get("request_rate"),
            "max_concurrency": _get(cfg, "loadgen", "concurrency") or phase.get("concurrency"),
            "metadata": meta,
        }
        return ReaderOutput(
            runs=runs_frame(self.name, ctx, [run]),
            run_summaries=summaries_frame(self.name, ctx, run_id, metrics),
        )

    @staticmethod
    def _run_id(ctx: ReadContext) -> str:
        """The run of the profile_export.jsonl beside this file, else this file's own."""
        return sibling_run_id(ctx.path.parent / "profile_export.jsonl") or ctx.default_run_id

    def _csv(self, ctx: ReadContext, text: str) -> ReaderOutput:
        metrics: dict[str, object] = {}
        header: list[str] | None = None
        try:
            rows = list(csv.reader(io.StringIO(text)))  # a few dozen metric rows, not requests
        except csv.Error as exc:
            raise InputError(f"not a readable AIPerf CSV: {exc}") from exc
        for row in rows:
            if not row or not any(cell.strip() for cell in row):
                header = None
                continue
            if row[0] == "Metric":
                header = row
                continue
            if header is None:
                continue
            if header[1:] == ["Value"]:
                metrics[row[0]] = row[1] if len(row) > 1 else None
            else:
                for stat, value in zip(header[1:], row[1:], strict=False):
                    metrics[f"{row[0]}.{stat}"] = value
        if not metrics:
            raise InputError("AIPerf aggregate CSV without any metric rows")
        run_id = self._run_id(ctx)
        return ReaderOutput(
            runs=runs_frame(self.name, ctx, [{"run_id": run_id}]),
            run_summaries=summaries_frame(self.name, ctx, run_id, metrics),
        )


READER = AiperfAggregateReader()
