"""NVIDIA AIPerf aggregates: ``profile_export_aiperf.json`` and ``profile_export_aiperf.csv``.

The JSON holds ``records`` (tag → ``{unit, avg, min, max, p1..p99, std, count}``) and
``input_config`` (model names, endpoint, concurrency, ...). Each statistic becomes one
``run_summaries`` row named ``<tag>.<stat> [<unit>]``; ``input_config`` goes to the ``runs`` row.
The CSV has two sections (distribution table, then ``Metric,Value`` scalars); its rows are named
``<Metric header>.<stat>`` as written.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.readers import _common as c
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput

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
        text = c.head_text(head)
        if text.startswith("{"):
            return '"records"' in text and '"tag"' in text and '"header"' in text
        line = c.first_line(head)
        return line.startswith("Metric,avg,min,max") or (
            line == "Metric,Value" and "Request Throughput" in text
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        text = c.decode_text(c.read_all(ctx))
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
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), dict):
            raise InputError("AIPerf aggregate JSON without a 'records' object")
        metrics: dict[str, object] = {}
        for tag, rec in doc["records"].items():
            if not isinstance(rec, dict):
                continue
            unit = rec.get("unit")
            suffix = f" [{unit}]" if isinstance(unit, str) and unit else ""
            for stat in (*STATS, "count"):
                if stat in rec:
                    metrics[f"{tag}.{stat}{suffix if stat != 'count' else ''}"] = rec[stat]
        cfg = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
        models = _get(cfg, "endpoint", "model_names")
        model = models[0] if isinstance(models, list) and models else None
        meta = {k: v for k, v in doc.items() if k != "records"}
        run = {
            "run_id": ctx.default_run_id,
            "model": model,
            "backend": _get(cfg, "endpoint", "type"),
            "request_rate": _get(cfg, "loadgen", "request_rate"),
            "max_concurrency": _get(cfg, "loadgen", "concurrency"),
            "metadata": meta,
        }
        return ReaderOutput(
            runs=c.runs_frame(self.name, ctx, [run]),
            run_summaries=c.summaries_frame(self.name, ctx, ctx.default_run_id, metrics),
        )

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
        return ReaderOutput(
            runs=c.runs_frame(self.name, ctx, [{"run_id": ctx.default_run_id}]),
            run_summaries=c.summaries_frame(self.name, ctx, ctx.default_run_id, metrics),
        )


READER = AiperfAggregateReader()
