"""Ingest of a 1M-request vLLM ``--save-detailed`` result file against DuckDB's own read of it.

    python bench/bench_vllm_detailed.py [--requests 1000000] [--repeat 1] [--keep] [--tool sglang]

``--tool sglang`` writes the same arrays (no start times or latencies) as one SGLang
``bench_serving --output-details`` line instead.

Builds (or reuses) ``bench/out/vllm_detailed_<N>.json``: one vLLM ``benchmark_serving.py`` result
object on one line, as ``json.dump`` writes it, with the per-request arrays ``input_lens``,
``output_lens``, ``ttfts``, ``itls`` (one list of per-chunk gaps per request, ~200 per request),
``start_times``, ``latencies`` and ``errors``. The arrays are synthesised with numpy and rendered
to JSON text with Polars (no Python loop per token). Times are rounded to microseconds, so a gap
is ~9 bytes of JSON. Then, each in its own process so peak RSS is that process's alone:

  baseline: duckdb  COPY (SELECT * FROM read_json('FILE', maximum_object_size=...)) TO 'x.parquet'
  ours:     pipeline ingest FILE --set gpu=H100-SXM -w <fresh dir> -q

and prints wall time, peak RSS (os.wait4) and the ratio. Results go to docs/PERFORMANCE.md by hand.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, machine, measured

PY = sys.executable
CHUNK = 100_000  # requests rendered to JSON text per Polars call


def synth_arrays(n: int, seed: int = 1) -> dict[str, pl.Series]:
    """vLLM-like per-request arrays for n requests (0.5% failures, 10% multi-token chunks)."""
    rng = np.random.default_rng(seed)
    out_lens = np.clip(rng.lognormal(5.2, 0.7, n), 1, 2048).astype(np.int64)
    in_lens = np.clip(rng.lognormal(6.5, 1.0, n), 4, 32768).astype(np.int64)
    failed = rng.random(n) < 0.005
    out_lens[failed] = 0
    n_gaps = np.maximum(out_lens - 1, 0)
    multi = rng.random(n) < 0.1  # speculative decoding / stream batching: fewer chunks
    n_gaps[multi] //= 2
    gaps = np.round(rng.gamma(4.0, 0.004, int(n_gaps.sum())) + 0.002, 6)
    ttfts = np.round(rng.uniform(0.05, 0.8, n), 6)
    ttfts[failed] = 0.0
    owner = np.repeat(np.arange(n), n_gaps)
    lats = np.round(ttfts + np.bincount(owner, weights=gaps, minlength=n), 6)
    lats[failed] = 0.0
    starts = np.round(np.cumsum(rng.exponential(0.01, n)) + 1000.0, 6)
    offsets = np.concatenate([[0], np.cumsum(n_gaps)]).astype(np.int64)
    itls = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(gaps))
    errors = np.where(failed, "HTTP 500: Internal Server Error", "")
    return {
        "input_lens": pl.Series(in_lens),
        "output_lens": pl.Series(out_lens),
        "ttfts": pl.Series(ttfts),
        "itls": pl.Series(pl.from_arrow(itls)),
        "start_times": pl.Series(starts),
        "latencies": pl.Series(lats),
        "errors": pl.Series(errors),
    }


def json_text(s: pl.Series) -> pl.Series:
    """Each element of a Series as JSON text (numbers, strings, lists of numbers)."""
    if s.dtype == pl.Utf8:
        return (
            s.to_frame("v")
            .select(pl.struct("v").struct.json_encode())["v"]
            .str.slice(5, None)
            .str.head(-1)
        )
    if isinstance(s.dtype, pl.List):
        inner = s.cast(pl.List(pl.Utf8)).list.join(",")
        return ("[" + inner + "]").alias(s.name)
    return s.cast(pl.Utf8)


def write_detailed(path: Path, n: int, tool: str = "vllm") -> None:
    arrays = synth_arrays(n)
    ok = int((arrays["errors"] == "").sum())
    duration = float(arrays["start_times"].max()) - 1000.0
    if tool == "sglang":  # bench_serving --output-details: one JSON line, no start times
        arrays = {k: v for k, v in arrays.items() if k not in ("start_times", "latencies")}
    head = (
        '{"date": "20260101-120000", "endpoint_type": "vllm", "backend": "vllm", "label": null, '
        '"model_id": "meta-llama/Llama-3.1-8B-Instruct", '
        '"tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct", '
        if tool == "vllm"
        else '{"backend": "sglang", "dataset_name": "random", '
        '"server_info": {"model_path": "meta-llama/Llama-3.1-8B-Instruct"}, '
    ) + (
        f'"num_prompts": {n}, "request_rate": "inf", "burstiness": 1.0, '
        f'"max_concurrency": 256, "duration": {duration}, '
        f'"completed": {ok}, "failed": {n - ok}, '
        f'"total_input_tokens": {int(arrays["input_lens"].sum())}, '
        f'"total_output_tokens": {int(arrays["output_lens"].sum())}, '
        f'"request_throughput": {ok / duration}, "request_goodput": null, '
        f'"output_throughput": {int(arrays["output_lens"].sum()) / duration}'
    )
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(head)
        for key, s in arrays.items():
            f.write(f', "{key}": [')
            for k in range(0, n, CHUNK):
                if k:
                    f.write(", ")
                f.write(json_text(s.slice(k, CHUNK)).str.join(", ").item())
            f.write("]")
        f.write(', "mean_ttft_ms": 120.5, "median_ttft_ms": 100.25, "p99_ttft_ms": 700.0}\n')
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="measure each side this many times")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse and parquet output")
    ap.add_argument(
        "--tool",
        choices=("vllm", "sglang"),
        default="vllm",
        help="vllm: --save-detailed object; sglang: bench_serving --output-details line",
    )
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    src = OUT / (
        f"vllm_detailed_{a.requests}.json"
        if a.tool == "vllm"
        else f"sglang_details_{a.requests}.jsonl"
    )
    if a.build_only:
        write_detailed(src, a.requests, a.tool)
        return
    if not src.exists():
        # Built in a child: Linux carries a process's RSS high-water mark across fork + exec, so
        # children forked from a parent that held the synthesised arrays (~3.6 GB at 1M) would
        # report that as their own peak in wait4 (seen: 3,618 MiB for an ingest that peaks at
        # ~1.3 GB measured alone).
        t0 = time.perf_counter()
        build = [PY, __file__, "--build-only", "--requests", str(a.requests), "--tool", a.tool]
        subprocess.run(build, check=True)
        print(f"built {src.name} in {time.perf_counter() - t0:.1f} s")
    size = src.stat().st_size
    print(f"machine: {machine()}")
    print(f"input: {a.requests:,} requests, {size / 2**20:,.0f} MiB, one JSON object")

    base_out = OUT / "vllm_detailed_baseline.parquet"
    baseline = (
        "import duckdb, sys; duckdb.connect().execute("
        '"COPY (SELECT * FROM read_json(?, maximum_object_size=' + str(size + 2**20) + ")) "
        "TO '" + str(base_out) + "' (FORMAT parquet)\", [sys.argv[1]])"
    )
    wh = OUT / f"wh_{a.tool}_detailed"
    sets = ["--set", "gpu=H100-SXM"] + (["--set", "gpu_count=1"] if a.tool == "sglang" else [])
    ingest = [PY, "-m", "pipeline", "ingest", str(src), *sets, "-w", str(wh)]
    for rep in range(1, a.repeat + 1):
        b_wall, b_rss = measured([PY, "-c", baseline, str(src)])
        shutil.rmtree(wh, ignore_errors=True)
        o_wall, o_rss = measured([*ingest, "-q"])
        check = subprocess.run(
            [
                PY,
                "-m",
                "pipeline",
                "query",
                "-w",
                str(wh),
                "--format",
                "csv",
                "--sql",
                "SELECT count(*) AS n, sum(len(token_times)) AS t FROM requests",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        print(f"  warehouse: requests, token times = {check[-1]}")
        print(f"run {rep}:")
        print(f"  {'':28}{'wall s':>10}{'peak RSS MiB':>15}")
        print(f"  {'duckdb read_json -> parquet':28}{b_wall:>10.1f}{b_rss:>15.0f}")
        print(f"  {'pipeline ingest':28}{o_wall:>10.1f}{o_rss:>15.0f}")
        print(
            f"  ratio ingest / baseline: {o_wall / b_wall:.2f}x time, {o_rss / b_rss:.2f}x memory"
        )
        mib_s = size / 2**20 / o_wall
        print(f"  throughput: {a.requests / o_wall:,.0f} requests/s, {mib_s:,.0f} MiB/s")
    if not a.keep:
        shutil.rmtree(wh, ignore_errors=True)
        base_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
