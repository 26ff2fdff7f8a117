"""Peak memory and time of `pipeline ingest` per input format, against DuckDB reading the same file.

    python bench/bench_reader_memory.py --format FORMAT [--requests 1000000]

Builds (in a child process, so the bench's own peak does not leak into the children's figures,
see `_common.measured`) ``bench/out/mem_<format>_<N>.<ext>``: N requests with ~218 per-chunk
gaps each, from the same numpy arrays as `bench_vllm_detailed.py`:

FORMAT is one of:

  aiperf  AIPerf profile_export.jsonl lines (metadata.timestamp_ns, metrics.ttft /
          request_latency / inter_chunk_latency in ms, sequence lengths)
  otlp    OTLP/JSON trace export, one ExportTraceServiceRequest of 512 vLLM llm_request spans per
          line as the Collector's file exporter writes (no per-token times: OTLP has none)
  otlp-pretty  the same spans as one indented ExportTraceServiceRequest (a single JSON value)
  csv     a CSV trace read through a mapping (epoch-ms start, ttft and e2e in ms, the gaps as a
          quoted JSON list), as a gateway or load generator would write it
  csv-gz  the same CSV, gzipped
  json    the same records as one JSON document ({"data": {"rows": [...]}}, the gaps as JSON
          lists) read through a mapping with records = "data.rows"
  llmperf  llmperf's individual_responses.json: one JSON array of responses (durations and
          token counts only; llmperf records no timestamps or per-token times)

then measures, each in its own process:

  baseline: duckdb COPY (SELECT * FROM read_json|read_csv('FILE')) TO 'x.parquet' (a single
            JSON value: read_json with maximum_object_size large enough to hold it)
  ours:     pipeline ingest FILE [--mapping M] --set ... -w <fresh dir> -q

and prints wall time, peak RSS and the ratios. Results go to docs/PERFORMANCE.md by hand.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, machine, measured
from bench_vllm_detailed import CHUNK, synth_arrays

PY = sys.executable
EXT = {
    "aiperf": "jsonl",
    "csv": "csv",
    "csv-gz": "csv.gz",
    "json": "json",
    "llmperf": "json",
    "otlp": "jsonl",
    "otlp-pretty": "json",
}
SPANS_PER_LINE = 512  # the OpenTelemetry SDKs' default export batch (max_export_batch_size)
MAPPING = """format = "csv"
[time]
clock = "unix"
unit = "ms"
[fields]
request_id = "id"
arrival_ts = "start_ms"
ttft = "ttft_ms"
e2e = "e2e_ms"
prompt_tokens = "input_tokens"
output_tokens = "output_tokens"
itl = { column = "gaps_ms", unit = "ms" }
"""


def _frame(a: dict[str, pl.Series], k: int, n: int) -> pl.DataFrame:
    """Requests k..k+n of the synthetic arrays, times in ms, the gaps as JSON-list text."""
    s = {name: v.slice(k, n) for name, v in a.items()}
    ms = s["itls"].list.eval((pl.element() * 1000).round(3).cast(pl.Utf8))
    gaps = "[" + ms.list.join(",") + "]"
    return pl.DataFrame(
        {
            "id": pl.int_range(k, k + len(s["ttfts"]), eager=True).cast(pl.Utf8),
            "start_ms": ((s["start_times"] + 1.7e9) * 1000).round(3),
            "ttft_ms": (s["ttfts"] * 1000).round(3),
            "e2e_ms": (s["latencies"] * 1000).round(3),
            "input_tokens": s["input_lens"],
            "output_tokens": s["output_lens"],
            "gaps_ms": gaps,
        }
    )


def _otlp_spans(df: pl.DataFrame) -> pl.Series:
    """One span's JSON per request, built column-wise."""

    def attr(key: str, kind: str, value: pl.Expr) -> list[pl.Expr]:
        q = pl.lit('"') if kind == "stringValue" or kind == "intValue" else pl.lit("")
        return [pl.lit(f'{{"key": "{key}", "value": {{"{kind}": '), q, value, q, pl.lit("}}")]

    ns = (pl.col("start_ms") * 1e6).cast(pl.Int64)
    e2e_ns = (pl.col("e2e_ms") * 1e6).cast(pl.Int64)
    parts = [
        pl.lit('{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "'),
        pl.col("id").str.zfill(16),
        pl.lit('", "name": "llm_request", "kind": 2, "startTimeUnixNano": "'),
        ns.cast(pl.Utf8),
        pl.lit('", "endTimeUnixNano": "'),
        (ns + e2e_ns).cast(pl.Utf8),
        pl.lit('", "attributes": ['),
        *attr("gen_ai.request.id", "stringValue", pl.lit("cmpl-") + pl.col("id")),
        pl.lit(", "),
        *attr("gen_ai.usage.prompt_tokens", "intValue", pl.col("input_tokens").cast(pl.Utf8)),
        pl.lit(", "),
        *attr("gen_ai.usage.completion_tokens", "intValue", pl.col("output_tokens").cast(pl.Utf8)),
        pl.lit(", "),
        *attr("gen_ai.latency.time_to_first_token", "doubleValue", (pl.col("ttft_ms") / 1000)
              .cast(pl.Utf8)),
        pl.lit(", "),
        *attr("gen_ai.latency.e2e", "doubleValue", (pl.col("e2e_ms") / 1000).cast(pl.Utf8)),
        pl.lit("]}"),
    ]  # fmt: skip
    return df.select(pl.concat_str(parts).alias("s"))["s"]


def _otlp_lines(df: pl.DataFrame) -> str:
    """Payload lines of SPANS_PER_LINE spans each."""
    spans = pl.DataFrame(
        {"s": _otlp_spans(df), "g": pl.int_range(df.height, eager=True) // SPANS_PER_LINE}
    )
    head = (
        '{"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": '
        '{"stringValue": "vllm"}}]}, "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, '
        '"spans": ['
    )
    lines = spans.group_by("g", maintain_order=True).agg(pl.col("s").str.join(", "))
    return "\n".join(head + t + "]}]}]}" for t in lines["s"]) + "\n"


PRETTY_HEAD = """{
  "resourceSpans": [
    {
      "resource": {
        "attributes": [
          {"key": "service.name", "value": {"stringValue": "vllm"}}
        ]
      },
      "scopeSpans": [
        {
          "scope": {"name": "vllm.llm_engine"},
          "spans": [
"""
PRETTY_TAIL = "\n          ]\n        }\n      ]\n    }\n  ]\n}\n"


def _pretty_spans(df: pl.DataFrame) -> str:
    """Spans indented, one key per line, as json.dumps(indent=...) would lay them out."""
    s = _otlp_spans(df).str.replace_all(r', "', ',\n              "')
    return (
        s.to_frame().select(pl.lit("            ") + pl.col("s"))["literal"].str.join(",\n").item()
    )


def _json_records(df: pl.DataFrame) -> str:
    """Mapping records: the CSV's columns, the gaps as a JSON list (not text)."""
    return (
        df.select(pl.struct(pl.all()).struct.json_encode().alias("r"))["r"]
        .str.replace(r'"gaps_ms":"(\[[^"]*\])"', '"gaps_ms":$1')
        .str.join(",\n")
        .item()
    )


def _llmperf_records(df: pl.DataFrame) -> str:
    """llmperf's individual responses: durations and counts only (no timestamps, no tokens)."""
    sec = lambda c: (pl.col(c) / 1000).cast(pl.Utf8)  # noqa: E731
    rec = pl.concat_str(
        [
            pl.lit('{"error_code": null, "error_msg": "", "ttft_s": '),
            sec("ttft_ms"),
            pl.lit(', "end_to_end_latency_s": '),
            sec("e2e_ms"),
            pl.lit(', "number_input_tokens": '),
            pl.col("input_tokens").cast(pl.Utf8),
            pl.lit(', "number_output_tokens": '),
            pl.col("output_tokens").cast(pl.Utf8),
            pl.lit("}"),
        ]
    )
    return df.select(rec.alias("r"))["r"].str.join(",\n").item()


def write(path: Path, fmt: str, n: int) -> None:
    a = synth_arrays(n)
    tmp = path.with_suffix(".tmp")
    opener = gzip.open if fmt.endswith("-gz") else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        if fmt.startswith("csv"):
            f.write("id,start_ms,ttft_ms,e2e_ms,input_tokens,output_tokens,gaps_ms\n")
        head = {"otlp-pretty": PRETTY_HEAD, "json": '{"data": {"rows": [\n', "llmperf": "[\n"}
        f.write(head.get(fmt, ""))
        for k in range(0, n, CHUNK):
            df = _frame(a, k, CHUNK)
            sep = ",\n" if k else ""
            if fmt.startswith("csv"):
                f.write(df.write_csv(include_header=False, quote_style="non_numeric"))
                continue
            if fmt == "otlp":
                f.write(_otlp_lines(df))
                continue
            if fmt == "otlp-pretty":
                f.write(sep + _pretty_spans(df))
                continue
            if fmt == "json":
                f.write(sep + _json_records(df))
                continue
            if fmt == "llmperf":
                f.write(sep + _llmperf_records(df))
                continue
            ns = (pl.col("start_ms") * 1e6).cast(pl.Int64).cast(pl.Utf8)
            line = pl.concat_str(
                [
                    pl.lit('{"metadata":{"x_request_id":"'),
                    pl.col("id"),
                    pl.lit('","timestamp_ns":'),
                    ns,
                    pl.lit(',"credit_phase":"profiling"},"metrics":{"input_sequence_length":'),
                    pl.lit('{"value":'),
                    pl.col("input_tokens").cast(pl.Utf8),
                    pl.lit(',"unit":"tokens"},"ttft":{"value":'),
                    pl.col("ttft_ms").cast(pl.Utf8),
                    pl.lit(',"unit":"ms"},"request_latency":{"value":'),
                    pl.col("e2e_ms").cast(pl.Utf8),
                    pl.lit(',"unit":"ms"},"output_sequence_length":{"value":'),
                    pl.col("output_tokens").cast(pl.Utf8),
                    pl.lit(',"unit":"tokens"},"inter_chunk_latency":{"value":'),
                    pl.col("gaps_ms"),
                    pl.lit(',"unit":"ms"}}}'),
                ]
            )
            f.write(df.select(line.alias("l"))["l"].str.join("\n").item() + "\n")
        f.write({"otlp-pretty": PRETTY_TAIL, "json": "\n]}}\n", "llmperf": "\n]\n"}.get(fmt, ""))
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=sorted(EXT), required=True)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    src = OUT / f"mem_{a.format}_{a.requests}.{EXT[a.format]}"
    if a.build_only:
        write(src, a.format, a.requests)
        return
    if not src.exists():
        t0 = time.perf_counter()
        cmd = [PY, __file__, "--build-only", "--format", a.format, "--requests", str(a.requests)]
        subprocess.run(cmd, check=True)
        print(f"built {src.name} in {time.perf_counter() - t0:.1f} s")
    print(f"machine: {machine()}")
    print(f"input: {a.requests:,} requests, {src.stat().st_size / 2**20:,.0f} MiB, {a.format}")
    base_out = OUT / "mem_baseline.parquet"
    fn = "read_csv" if a.format.startswith("csv") else "read_json"
    size = "" if a.format in ("aiperf", "otlp") or fn == "read_csv" else ", maximum_object_size=?"
    args = "[sys.argv[1]" + (", int(sys.argv[2])]" if size else "]")
    baseline = (
        f'import duckdb, sys; duckdb.connect().execute("COPY (SELECT * FROM {fn}(?{size})) '
        f"TO '{base_out}' (FORMAT parquet)\", {args})"
    )
    wh = OUT / f"wh_mem_{a.format}"
    cmd = [PY, "-m", "pipeline", "ingest", str(src), "-w", str(wh), "-q"]
    cmd += ["--set", "gpu=H100-SXM", "--set", "gpu_count=1", "--set", "model=Llama-3.1-8B"]
    if a.format.startswith("csv") or a.format == "json":
        m = OUT / "mem_csv.toml"
        text = MAPPING.replace('format = "csv"', 'format = "json"\nrecords = "data.rows"')
        m.write_text(text if a.format == "json" else MAPPING)
        cmd += ["--mapping", str(m)]
    b_cmd = [PY, "-c", baseline, str(src)]
    if size:
        b_cmd.append(str(src.stat().st_size + 1))
    b_wall, b_rss = measured(b_cmd)
    shutil.rmtree(wh, ignore_errors=True)
    o_wall, o_rss = measured(cmd)
    check = subprocess.run(
        [PY, "-m", "pipeline", "query", "-w", str(wh), "--format", "csv", "--sql",
         "SELECT count(*) AS n, sum(coalesce(len(token_times), 0)) AS t FROM requests"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    print(f"  warehouse: requests, token times = {check.stdout.splitlines()[-1]}")
    print(f"  {'':30s}  wall s   peak RSS MiB")
    print(f"  {'duckdb ' + fn + ' -> parquet':30s} {b_wall:7.1f} {b_rss:12,.0f}")
    print(f"  {'pipeline ingest':30s} {o_wall:7.1f} {o_rss:12,.0f}")
    print(f"  ratio ingest / baseline: {o_wall / b_wall:.2f}x time, {o_rss / b_rss:.2f}x memory")
    shutil.rmtree(wh, ignore_errors=True)
    base_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
