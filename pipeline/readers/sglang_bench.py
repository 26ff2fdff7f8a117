"""SGLang ``bench_serving`` result JSON lines: one line per benchmark invocation, appended.

Python's ``json.dumps`` writes ``request_rate: Infinity`` (bare), so lines are parsed with Python's
json (one call per run, not per request). With ``--output-details`` a line carries the same
parallel per-request arrays as vLLM's detailed output (``input_lens``, ``output_lens``, ``ttfts``,
``itls``, ``errors``) but no start times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

from pipeline.readers import vllm_bench
from pipeline.readers.base import Capabilities, InputError, ReadContext, ReaderOutput
from pipeline.readers.lines import iter_line_batches
from pipeline.readers.sniff import first_line
from pipeline.readers.units import as_float
from pipeline.readers.vllm_bench import RunParts, assemble_runs, run_ids, split_run

PRIORITY = 21


class SglangBenchReader:
    name = "sglang_bench"
    description = (
        "SGLang bench_serving JSON lines (one run per line, bare Infinity allowed). Summary keys "
        "-> run_summaries and runs; with --output-details also one request per array index "
        "(TTFT, per-chunk token_times, errors). No start times: arrivals all at t=0 of a relative "
        "clock. No GPU in the file: use --set gpu=... gpu_count=..."
    )
    capabilities = Capabilities(
        per_request=True,
        per_token=True,
        arrivals_only=False,
        gpu_model_present=False,
        needs_set=("model", "gpu", "gpu_count"),
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        line = first_line(head)
        if not line.startswith("{") or '"model_id"' in line:
            return False
        return (
            '"backend"' in line
            and ('"dataset_name"' in line)
            and ("_ttft_ms" in line or '"ttfts"' in line or '"output_throughput"' in line)
        )

    def read(self, ctx: ReadContext) -> Iterator[ReaderOutput]:
        src = vllm_bench.open_source(ctx)
        try:
            yield from self._read(ctx, src)
        finally:
            src.close()

    def _read(self, ctx: ReadContext, src: vllm_bench.Source) -> Iterator[ReaderOutput]:
        good: list[tuple[int, dict]] = []
        bad: list[tuple[int, str, str]] = []
        streamed = _streamed_runs(src)
        if streamed is not None:  # a large --output-details file: arrays parsed by window
            good = streamed
        for nums, texts in [] if streamed is not None else iter_line_batches(ctx):
            for line, text in zip(nums.to_list(), texts.to_list(), strict=True):  # one per run
                try:
                    obj = json.loads(text)
                except (ValueError, RecursionError) as exc:
                    bad.append((line, f"run line is not valid JSON (truncated?): {exc}", text))
                    continue
                if not isinstance(obj, dict):
                    bad.append((line, f"run line is a JSON {type(obj).__name__}", text))
                    continue
                good.append((line, obj))
        if not good:
            if bad:
                raise InputError(f"no SGLang bench_serving run could be parsed ({bad[0][1]})")
            raise InputError("file is empty")
        ids = run_ids(ctx, len(good))
        runs = []
        for (line, obj), run_id in zip(good, ids, strict=True):
            meta, metrics = split_run(obj)
            meta["source_line"] = line
            meta["arrival_times_known"] = False
            server_info = obj.get("server_info") if isinstance(obj.get("server_info"), dict) else {}
            model = server_info.get("model_path") if isinstance(server_info, dict) else None
            rate = as_float(obj.get("request_rate"))
            rate = None if rate is None or math.isnan(rate) else rate
            runs.append(RunParts(run_id, obj, model, meta, metrics, rate))
        yield from assemble_runs(self.name, ctx, runs, bad)


def _streamed_runs(src: vllm_bench.Source) -> list[tuple[int, dict]] | None:
    """The runs of a large file with the per-token ``itls`` left in the file (parsed later, a
    window at a time, as for vLLM's detailed result); None (read line by line) for a small file
    or one whose lines are not all whole JSON objects."""
    if src.size < vllm_bench.COLUMNAR_MIN_BYTES:
        return None
    docs = vllm_bench.columnar_documents(src)
    if not docs or any(err is not None or not isinstance(obj, dict) for _, obj, err in docs):
        return None
    return [(line, obj) for line, obj, _ in docs]


READER = SglangBenchReader()
