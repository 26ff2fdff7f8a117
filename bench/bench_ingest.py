"""Ingest speed and memory against DuckDB's own JSON -> Parquet copy of the same file.

    python bench/bench_ingest.py [--requests 1000000] [--keep]

Makes (or reuses) a generator trace with per-token times in bench/out/, then runs, each in its own
process so peak RSS is that process's alone:
  baseline: duckdb  COPY (SELECT * FROM read_json('FILE')) TO 'x.parquet'
  ours:     pipeline ingest FILE --warehouse <fresh dir> --quiet
and prints wall time, peak RSS and the ratio. Results go to docs/PERFORMANCE.md by hand.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT, machine, measured

PY = sys.executable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the warehouse and parquet output")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    trace = OUT / f"trace_{a.requests}.jsonl"
    if not trace.exists():
        t0 = time.perf_counter()
        subprocess.run(
            [
                PY,
                "-m",
                "pipeline",
                "generate",
                "--out",
                str(trace),
                "--requests",
                str(a.requests),
                "--rate",
                str(a.rate),
                "--seed",
                "1",
            ],
            check=True,
        )
        print(f"generated {trace.name} in {time.perf_counter() - t0:.1f} s")
    size = trace.stat().st_size / 2**20
    print(f"machine: {machine()}")
    print(f"input: {a.requests:,} requests, {size:,.0f} MiB JSON lines with per-token times")

    base_out = OUT / "baseline.parquet"
    baseline = (
        "import duckdb, sys; duckdb.connect().execute("
        "\"COPY (SELECT * FROM read_json(?)) TO '" + str(base_out) + "' (FORMAT parquet)\", "
        "[sys.argv[1]])"
    )
    b_wall, b_rss = measured([PY, "-c", baseline, str(trace)])
    wh = OUT / "wh"
    shutil.rmtree(wh, ignore_errors=True)
    o_wall, o_rss = measured([PY, "-m", "pipeline", "ingest", str(trace), "-w", str(wh), "-q"])
    print(f"{'':28}{'wall s':>10}{'peak RSS MiB':>15}")
    print(f"{'duckdb read_json -> parquet':28}{b_wall:>10.1f}{b_rss:>15.0f}")
    print(f"{'pipeline ingest':28}{o_wall:>10.1f}{o_rss:>15.0f}")
    print(f"ratio ingest / baseline: {o_wall / b_wall:.2f}x time, {o_rss / b_rss:.2f}x memory")
    print(f"throughput: {a.requests / o_wall:,.0f} requests/s, {size / o_wall:,.0f} MiB/s")
    if not a.keep:
        shutil.rmtree(wh, ignore_errors=True)
        base_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
