"""Speed of `pipeline fit` on a large warehouse (default 10 million requests).

    python bench/bench_fit.py [--requests 10000000] [--base 500000] [--rebuild]

How the warehouse is built (fast, reused from bench/out/fit_wh_<N> when present):
  1. `pipeline generate` two base traces of --base requests each, per-request timestamps only
     (no per-token times): Llama-3.1-8B on H100-SXM and Llama-2-13B on A100-80GB;
  2. `pipeline ingest` them into the warehouse (the real ingest path, real manifests);
  3. replicate the ingested requests Parquet with Polars until --requests rows: each copy gets
     a new run_id, request ids and server name (so every copy is its own server), and is
     committed like an ingest commits: data file first, then its manifest entry.
Then it runs `pipeline fit --warehouse WH --quiet` in a fresh process and prints wall time and
peak RSS. Results go to docs/PERFORMANCE.md ("Fit") by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

OUT = Path(__file__).resolve().parent / "out"
PY = sys.executable
BASES = (("H100-SXM", "llama-3.1-8b", 1), ("A100-80GB", "llama-2-13b", 1))


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def measured(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def build(wh: Path, total: int, base: int) -> dict[str, float]:
    from pipeline.warehouse.layout import Layout

    t0 = time.perf_counter()
    traces = []
    for gpu, model, tp in BASES:
        path = OUT / f"fitbase_{model}_{gpu}_{base}.jsonl.zst"
        if not path.exists():
            run([PY, "-m", "pipeline", "generate", "--out", str(path), "-n", str(base),
                 "--gpu", gpu, "--model", model, "--gpu-count", str(tp), "--no-token-times",
                 "--seed", "7"])  # fmt: skip
        traces.append(path)
    t_gen = time.perf_counter() - t0
    run([PY, "-m", "pipeline", "ingest", *map(str, traces), "--warehouse", str(wh), "--quiet"])
    t_ingest = time.perf_counter() - t0 - t_gen
    layout = Layout(wh)
    base_files = layout.committed_files("requests")
    frame = pl.read_parquet(base_files, hive_partitioning=False)
    copies = -(-total // frame.height) - 1
    for c in range(1, copies + 1):
        rows = min(frame.height, total - frame.height * c)
        if rows <= 0:
            break
        f = frame.head(rows).with_columns(
            pl.col("run_id") + f"-copy{c}",
            pl.col("request_id") + f"-c{c}",
            pl.col("server").fill_null("?") + f"-copy{c}",
        )
        sha = hashlib.sha256(f"bench-fit-copy-{c}".encode()).hexdigest()
        rel = f"requests/day=2026-01-01/part-{sha[:16]}-0.parquet"
        (wh / rel).parent.mkdir(parents=True, exist_ok=True)
        f.write_parquet(wh / rel, compression="zstd")
        layout.write_manifest(sha, {"sha256": sha, "files": [rel], "status": "ingested",
                                    "path": f"bench-copy-{c}", "format": "native",
                                    "counts": {"ingested": f.height}})  # fmt: skip
    return {"generate_s": t_gen, "ingest_s": t_ingest, "replicate_s": time.perf_counter() - t0
            - t_gen - t_ingest}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--base", type=int, default=500_000)
    ap.add_argument("--rebuild", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    wh = OUT / f"fit_wh_{a.requests}"
    if a.rebuild and wh.exists():
        shutil.rmtree(wh)
    if not wh.exists():
        print("build:", json.dumps(build(wh, a.requests, a.base)))
    import duckdb

    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{wh}/requests/**/*.parquet')").fetchall()[
        0
    ][0]
    wall, rss = measured([PY, "-m", "pipeline", "fit", "--warehouse", str(wh), "--quiet"])
    print(f"pipeline fit: {n:,} requests, {wall:.1f} s wall, {rss:.0f} MiB peak RSS, "
          f"{os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    main()
