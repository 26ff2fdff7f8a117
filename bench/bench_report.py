"""Benchmark `pipeline report` on a synthetic warehouse of N requests.

Builds the warehouse by writing the ``requests`` table as Parquet straight into the layout (one
staged write and manifest entry per chunk, as ingest would commit it), then times one report.

    python bench/bench_report.py                 # 1,000,000 requests
    python bench/bench_report.py --rows 10000000 --keep /tmp/wh10m
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fixtures, run as a script

from pipeline.report import build_report
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.writer import StagedWrite
from tests.fixtures.report_data import EPOCH, Spec, requests_frame

CHUNK = 1_000_000


def build_warehouse(root: Path, rows: int, rate: float) -> Layout:
    layout = Layout(root)
    layout.ensure()
    done, i = 0, 0
    while done < rows:
        n = min(CHUNK, rows - done)
        start = EPOCH + done / (rate * 2)  # two deployments, `rate` req/s each
        df = requests_frame(Spec(n=n, seed=i, start=start, rate=rate, servers=8), f"bench-{i}")
        sha = hashlib.sha256(f"bench-{rows}-{i}".encode()).hexdigest()
        staged = StagedWrite(layout, sha)
        staged.add("requests", df)
        staged.commit({"sha256": sha, "path": f"bench-{i}", "format": "native", "requests": n})
        done, i = done + n, i + 1
    return layout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=50.0, help="requests/s per deployment")
    ap.add_argument("--keep", type=Path, default=None, help="build (or reuse) the warehouse here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    root = args.keep or tmp / "wh"
    t0 = time.perf_counter()
    if not (root / "_manifest").exists():
        build_warehouse(root, args.rows, args.rate)
    t1 = time.perf_counter()
    r = build_report(Layout(root), tmp / "reports", compare_with="none")
    t2 = time.perf_counter()
    # a windowed report with a comparison period: the scheduled-run case
    r2 = build_report(Layout(root), tmp / "reports", since="6h")
    t3 = time.perf_counter()
    size = r.path.stat().st_size
    print(f"rows {args.rows:,} · warehouse build {t1 - t0:.1f} s")
    print(
        f"report (all data): {t2 - t1:.1f} s · {size / 1e6:.2f} MB · {r.summary['charts']} charts"
    )
    print(
        f"report (last 6 h vs the 6 h before): {t3 - t2:.1f} s · "
        f"{r2.path.stat().st_size / 1e6:.2f} MB · "
        f"{r2.summary['sections']['headline'].get('requests', 0):,} requests"
    )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
