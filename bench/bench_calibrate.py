"""Speed of calibration by replay (`pipeline fit`'s calibration step) on 2 cores.

    python bench/bench_calibrate.py [--repeats 3]

Cases: the real calibration runs (vLLM 0.19 on an RTX 4090, 300 requests; DistServe's four vLLM
OPT-13B runs, 1,000 requests), and synthetic deployments of 3,000 and 10,000 requests
(Llama-3.1-8B on one H100-SXM at 8 req/s, prompts / outputs lognormal as in bench_replay.py),
whose "observed" times come from our simulator with known parameters (a speed case only:
accuracy is measured on real runs, docs/accuracy.md). Prints wall (median of the repeats) and
CPU seconds per case, and the baseline in the same run: one replay of the same requests, so the
ratio says how many replays a calibration costs. Results go to docs/PERFORMANCE.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import machine
from pipeline.fit.calibrate import Deployment, Run, calibrate
from pipeline.fit.calibration_store import load_deployments
from pipeline.ingest.run import IngestOptions, ingest_paths
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.fixtures.calibration_data import synthetic_log

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO.parent / "shared" / "real_traces" / "serving_runs"


def real_cases() -> list[tuple[str, Deployment, list[Run]]]:
    out = []
    sets = [
        ("RTX 4090 vLLM 0.19 (real, 300 req)", [RUNS / "llmservingsim_vllm019" /
                                               "bench-RTX4090-Llama-3.1-8B"], None),
        ("DistServe vLLM OPT-13B (real, 4 runs, 1,000 req)",
         sorted((RUNS / "distserve_opt13b_a100").glob("vllm-*.exp.txt")),
         REPO / "examples" / "manifests" / "distserve-vllm-opt13b.run.toml"),
    ]  # fmt: skip
    for name, files, manifest in sets:
        if not RUNS.is_dir():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp) / "wh")
            ingest_paths(files, layout, IngestOptions(manifest=manifest))
            ((dep, runs),) = load_deployments(connect(layout)).runs.items()
        out.append((name, dep, runs))
    return out


def synthetic(n: int, rate: float = 8.0, seed: int = 0) -> tuple[str, Deployment, list[Run]]:
    dep, runs = synthetic_log(n, rate, seed)
    return f"synthetic vLLM V1 ({n:,} req)", dep, runs


def timed(fn) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(machine())
    cases = [*real_cases(), synthetic(3_000), synthetic(10_000)]
    print("| case | requests | calibration wall s (median) | CPU s | one replay s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, dep, runs in cases:
        walls, cpus = [], []
        for _ in range(args.repeats):
            w, c = timed(lambda d=dep, r=runs: calibrate(r, d))
            walls.append(w)
            cpus.append(c)
        cal = calibrate(runs, dep)
        rep, _ = timed(lambda c=cal, rs=runs: [c.replay(r) for r in rs])
        wall = statistics.median(walls)
        n = sum(r.n for r in runs)
        print(f"| {name} | {n:,} | {wall:.1f} | {statistics.median(cpus):.1f} | {rep:.3f} "
              f"| {wall / max(rep, 1e-9):.0f}x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
