"""Speed of `pipeline replay`'s simulation: 1 million requests under continuous batching, and
the speed-up of the event-driven engine over the step-by-step oracle on a smaller trace.

    python bench/bench_replay.py [--requests 1000000] [--oracle-requests 3000] [--write]
                                 [--scenarios] [--python-requests 100000]

Workload: Llama-3.1-8B on one H100-SXM (roofline step costs, MFU 0.5, MBU 0.7, 2 ms per step,
10 us per sequence), chunked prefill, paged KV at vLLM's default sizing; prompts lognormal
(median 700, sigma 0.9), outputs lognormal (median 200, sigma 0.9), Poisson arrivals at 8/s
(about 75 % of the server's capacity). The replay path is the real one (`resolve` +
`simulate_scenario` with the per-step log that feeds the `steps` table); `--write` also times
writing it into a fresh warehouse (requests with per-token times + steps), against DuckDB's own
`COPY ... TO (FORMAT parquet)` of the same rows in the same run. `--scenarios` also
replays the million under disaggregation (one prefill + one decode server, 12/s) and on 8
replicas (64/s, the same load per server) with round-robin and least-loaded routing; the
least-loaded row is timed against the Python engine (closed-form decode runs, the path before
the compiled kernel) on the first `--python-requests`. Results go to docs/PERFORMANCE.md
("Replay") by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import catalog
from pipeline.physics import StepCost
from pipeline.replay import (
    replay_run_id,
    resolve_scenario,
    run_key,
    simulate_scenario,
    write_replay,
)
from pipeline.replay.config import WhatIf
from pipeline.replay.workload import RecordedWorkload
from pipeline.sim import EngineConfig
from pipeline.sim.cluster import Pool, simulate_pool
from pipeline.warehouse.layout import Layout

WHATIF = WhatIf.model_validate(
    {"name": "bench", "cost": {"source": "roofline", "mfu": 0.5, "mbu": 0.7,
                               "step_overhead": 2e-3, "seq_overhead": 1e-5}}
)  # fmt: skip


def workload(n: int, rate: float, seed: int = 0) -> RecordedWorkload:
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    p = np.clip(np.rint(np.exp(rng.normal(np.log(700), 0.9, n))), 8, 8000).astype(np.int64)
    o = np.clip(np.rint(np.exp(rng.normal(np.log(200), 0.9, n))), 1, 4096).astype(np.int64)
    return RecordedWorkload(
        source="bench", run_id="bench", kind="arrivals",
        request_id=[f"r{i}" for i in range(n)], arrival=arr - arr[0], prompt=p, output=o,
        cached=np.zeros(n, np.int64), recorded={"model": "llama-3.1-8b", "gpu": "H100-SXM"},
    )  # fmt: skip


def bench_big(n: int, rate: float, do_write: bool) -> dict:
    w = workload(n, rate)
    sc = resolve_scenario(WHATIF, w)
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate_scenario(sc, w, record_steps=True)
    sim_s, sim_cpu = time.perf_counter() - t0, time.process_time() - c0
    pr = res.pools["main"]
    out = {
        "requests": n,
        "rate": rate,
        "simulate_s": round(sim_s, 2),
        "simulate_cpu_s": round(sim_cpu, 2),  # CPU time: what a shared box's load does not inflate
        "engine_steps": pr.engine_steps,
        "python_iterations": pr.iterations,
        "simulated_hours": round(float(np.nanmax(res.finish)) / 3600, 2),
        "ttft_p50_s": round(res.summary()["ttft_p50"], 4),
        "steps_logged": int(sum(len(s["t_start"]) for s in pr.steps)),
    }
    if do_write:
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp) / "wh")
            key = run_key(w, sc, 1.0)
            rss = _RssPeak()  # what the write-back adds on top of the replay result it holds
            t1 = time.perf_counter()
            counts = write_replay(layout, res, replay_run_id(sc, key), key)
            out["write_s"] = round(time.perf_counter() - t1, 2)
            out["write_rss_growth_gb"] = rss.stop()
            out["write_vs_replay"] = round(out["write_s"] / sim_s, 1)
            out["tokens_written"] = counts["tokens"]
            out["peak_rss_after_write_gb"] = _peak_rss_gb()
            files = list(layout.root.rglob("*.parquet"))
            written = sum(f.stat().st_size for f in files)
            out["written_mib"] = round(written / 2**20)
            # Floor: the same number of bytes written and fsynced raw, in 1 MiB blocks (on this
            # box a fresh page-cache page costs about as much as encoding it).
            block = os.urandom(1 << 20)
            t2 = time.perf_counter()
            with open(f"{tmp}/raw.bin", "wb") as fh:
                for _ in range(written >> 20):
                    fh.write(block)
                os.fsync(fh.fileno())
            out["raw_write_s"] = round(time.perf_counter() - t2, 2)
            os.unlink(f"{tmp}/raw.bin")
            out["write_vs_raw_bytes"] = round(out["write_s"] / out["raw_write_s"], 2)
            # Baseline in the same run: DuckDB's own writer on the same rows (read back from
            # what we wrote, default COPY settings) -- what a plain Parquet write of them costs.
            con = duckdb.connect()
            t2 = time.perf_counter()
            for table in ("replay_requests", "replay_steps"):
                src = f"{layout.root}/{table}/**/*.parquet"
                con.execute(f"COPY (SELECT * FROM read_parquet('{src}')) TO "
                            f"'{tmp}/{table}.parquet' (FORMAT parquet)")  # fmt: skip
            out["duckdb_copy_s"] = round(time.perf_counter() - t2, 2)
            out["write_vs_duckdb_copy"] = round(out["write_s"] / out["duckdb_copy_s"], 2)
    out["peak_rss_gb"] = _peak_rss_gb()
    return out


class _RssPeak:
    """Peak resident set above its value at start, sampled every 20 ms on a thread."""

    def __init__(self) -> None:
        self.start = self.peak = _rss_gb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, _rss_gb())

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return round(self.peak - self.start, 2)


def _rss_gb() -> float:
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return kb / 2**20


def _peak_rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def bench_oracle(n: int, rate: float) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_sim_engine import oracle

    w = workload(n, rate, seed=1)
    m, g = catalog.model("llama-3.1-8b"), catalog.gpu("H100-SXM")
    cost = StepCost(m, g, mfu=0.5, mbu=0.7, step_overhead=2e-3, seq_overhead=1e-5)
    cfg = EngineConfig(kv_capacity_tokens=400_000)
    # Load numba's compiled kernel (from its on-disk cache) with a tiny run before timing.
    simulate_pool(w.arrival[:5], w.prompt[:5], w.output[:5], Pool(cfg, cost), record_steps=True)
    t0 = time.perf_counter()
    ref = oracle(w.arrival.tolist(), w.prompt.tolist(), w.output.tolist(), [0] * n, cfg, cost)
    oracle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = simulate_pool(w.arrival, w.prompt, w.output, Pool(cfg, cost), record_steps=True)
    engine_s = time.perf_counter() - t0
    fin = np.asarray(ref[2] if isinstance(ref, tuple) else ref["finish"], dtype=float)
    err = float(np.nanmax(np.abs(fin - r.finish) / np.maximum(np.abs(fin), 1e-9)))
    return {
        "requests": n,
        "rate": rate,
        "oracle_s": round(oracle_s, 3),
        "replay_engine_s": round(engine_s, 3),
        "speedup": round(oracle_s / engine_s, 1),
        "max_rel_diff_finish": err,
        "engine_steps": r.engine_steps,
    }


SCENARIOS = {
    "disaggregated-1p1d": ({"disaggregation": {"enabled": True}}, 12.0),
    "8-replicas-round-robin": ({"deployment": {"replicas": 8}}, 64.0),
    "8-replicas-least-loaded": ({"deployment": {"replicas": 8, "routing": "least-loaded"}}, 64.0),
}


def _whatif(patch: dict) -> WhatIf:
    return WhatIf.model_validate({**WHATIF.model_dump(exclude_defaults=True), **patch})


def _timed(sc, w: RecordedWorkload) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    res = simulate_scenario(sc, w, record_steps=True)
    return time.perf_counter() - t0, res


def bench_scenarios(n: int, python_n: int) -> list[dict]:
    from pipeline.sim import compiled

    rows = []
    for name, (patch, rate) in SCENARIOS.items():
        w = workload(n, rate)
        sc = resolve_scenario(_whatif(patch), w)
        dt, res = _timed(sc, w)
        s = res.summary()
        row = {
            "scenario": name, "requests": n, "rate": rate, "simulate_s": round(dt, 2),
            "engine_steps": sum(p.engine_steps for p in res.pools.values()),
            "ttft_p50_s": round(s["ttft_p50"], 4), "tpot_p50_s": round(s["tpot_p50"], 4),
        }  # fmt: skip
        if "least-loaded" in name and python_n:
            small = workload(python_n, rate)
            sc_small = resolve_scenario(_whatif(patch), small)
            fast_s, a = _timed(sc_small, small)
            real = compiled.eligible
            compiled.eligible = lambda cost: False  # the Python engine, as before the kernel
            try:
                py_s, b = _timed(sc_small, small)
            finally:
                compiled.eligible = real
            row["python_engine"] = {
                "requests": python_n, "python_s": round(py_s, 2), "compiled_s": round(fast_s, 3),
                "speedup": round(py_s / fast_s, 1),
                "max_rel_diff_finish": float(np.nanmax(np.abs(a.finish - b.finish) / b.finish)),
            }  # fmt: skip
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--oracle-requests", type=int, default=3000)
    ap.add_argument("--oracle-rate", type=float, default=2.0)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--scenarios", action="store_true")
    ap.add_argument("--python-requests", type=int, default=100_000)
    a = ap.parse_args()
    info = {"cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}
    print(json.dumps({"machine": info}), flush=True)
    print(json.dumps({"oracle": bench_oracle(a.oracle_requests, a.oracle_rate)}), flush=True)
    print(json.dumps({"oracle": bench_oracle(a.oracle_requests, a.rate)}), flush=True)
    print(json.dumps({"big": bench_big(a.requests, a.rate, a.write)}), flush=True)
    if a.scenarios:
        for row in bench_scenarios(a.requests, a.python_requests):
            print(json.dumps({"scenario": row}), flush=True)


if __name__ == "__main__":
    main()
