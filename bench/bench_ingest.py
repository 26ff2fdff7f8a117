"""Ingest speed and memory against DuckDB's own JSON -> Parquet copy of the same file.

    python bench/bench_ingest.py [--requests 1000000] [--repeat 3] [--keep]

Makes (or reuses) a generator trace with per-token times in bench/out/, then runs, each in its own
process so peak RSS is that process's alone, interleaved (baseline, ours, baseline, ours, ...):
  baseline: duckdb  COPY (SELECT * FROM read_json('FILE')) TO 'x.parquet' (FORMAT parquet)
  ours:     pipeline ingest FILE --warehouse <fresh dir> --quiet
and prints each run's wall time, CPU time and peak RSS, then the medians and their ratio.
Results go to docs/PERFORMANCE.md by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, machine, measured_cpu

PY = sys.executable


def check(wh: Path, expected: int) -> None:
    """A fast ingest counts only if it kept every request, each at its own line."""
    from pipeline.warehouse.layout import Layout
    from pipeline.warehouse.views import connect

    con = connect(Layout(wh))
    got = con.execute(
        "SELECT count(*), count(DISTINCT source_line), min(source_line), max(source_line), "
        "sum(list_count(token_times)) FROM requests"
    ).fetchone()
    bad = con.execute("SELECT count(*) FROM quarantine").fetchone()
    assert got is not None and bad is not None
    n, lines, lo, hi, tokens = got
    if (n, lines, lo, hi, bad[0]) != (expected, expected, 1, expected, 0):
        raise SystemExit(f"ingest lost or mislabelled rows: {got}, {bad[0]} quarantined")
    print(f"  checked: {n:,} requests at lines 1..{hi:,}, {tokens:,} token times, 0 quarantined")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs of each (median)")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse and parquet output")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    trace = OUT / f"trace_{a.requests}.jsonl"
    if not trace.exists():
        t0 = time.perf_counter()
        # Default rate: 60 % of the estimated capacity (Llama-3.1-8B on one H100-SXM).
        gen = ["generate", "--out", str(trace), "--requests", str(a.requests), "--seed", "1"]
        subprocess.run([PY, "-m", "pipeline", *gen], check=True)
        print(f"generated {trace.name} in {time.perf_counter() - t0:.1f} s")
    size = trace.stat().st_size / 2**20
    print(f"machine: {machine()}, load average {os.getloadavg()[0]:.1f}")
    print(f"input: {a.requests:,} requests, {size:,.0f} MiB JSON lines with per-token times")

    base_out = OUT / "baseline.parquet"
    baseline = (
        "import duckdb, sys; duckdb.connect().execute("
        "\"COPY (SELECT * FROM read_json(?)) TO '" + str(base_out) + "' (FORMAT parquet)\", "
        "[sys.argv[1]])"
    )
    wh = OUT / "wh"
    runs: dict[str, list[tuple[float, float, float]]] = {"duckdb": [], "ingest": []}
    print(f"{'run':34}{'wall s':>9}{'CPU s':>9}{'peak RSS MiB':>15}")
    for i in range(a.repeat):
        base_out.unlink(missing_ok=True)
        runs["duckdb"].append(measured_cpu([PY, "-c", baseline, str(trace)]))
        shutil.rmtree(wh, ignore_errors=True)
        cmd = [PY, "-m", "pipeline", "ingest", str(trace), "-w", str(wh), "-q"]
        runs["ingest"].append(measured_cpu(cmd))
        check(wh, a.requests)
        for name in runs:
            w, r, c = runs[name][-1]
            print(f"{f'{name} #{i + 1}':34}{w:>9.1f}{c:>9.1f}{r:>15.0f}")
    med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in runs.items()}
    (bw, br, bc), (ow, orss, oc) = med["duckdb"], med["ingest"]
    print(f"{'median duckdb read_json -> parquet':34}{bw:>9.1f}{bc:>9.1f}{br:>15.0f}")
    print(f"{'median pipeline ingest':34}{ow:>9.1f}{oc:>9.1f}{orss:>15.0f}")
    print(f"ratio ingest / baseline (medians): {ow / bw:.2f}x wall, {oc / bc:.2f}x CPU, "
          f"{orss / br:.2f}x memory")  # fmt: skip
    print(f"throughput: {a.requests / ow:,.0f} requests/s, {size / ow:,.0f} MiB/s")
    if not a.keep:
        shutil.rmtree(wh, ignore_errors=True)
        base_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
