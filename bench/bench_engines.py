"""Every named query on DuckDB and on Spark over one synthetic warehouse; times side by side.

    python bench/bench_engines.py                      # 1 M requests (builds once, then reuses)
    python bench/bench_engines.py --requests 1000000 --engines duckdb,spark --markdown

How the warehouse is built (fast, and exactly what ingest would commit): request rows are
generated with NumPy / Polars in chunks of 1 M, cast to the table's Arrow schema
(pipeline.schema.tables) and written as zstd Parquet straight into the layout,
``requests/day=YYYY-MM-DD/part-<sha16>-<n>.parquet``; then one manifest entry
``_manifest/<sha>.json`` lists every file, which is the commit point ingest uses too. The
warehouse is reused when ``_bench.json`` in it records the same size and seed.

Timings: "open" is connecting and registering the views (for Spark it includes starting the JVM
when no session runs yet); each query is timed once, end to end, result collected to Python.
Spark runs after DuckDB has been closed, so they do not compete for the two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.engines import open_engine  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _common import machine  # noqa: E402

from pipeline.query.named import all_queries, queries_dir  # noqa: E402
from pipeline.schema.tables import PARTITIONED, TABLES, arrow_schema  # noqa: E402
from pipeline.warehouse.arrow import to_arrow  # noqa: E402
from pipeline.warehouse.layout import Layout  # noqa: E402

MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-70B",
]
GPUS = ["H100-SXM", "A100-80G", "L40S"]
T0 = 1762041600.0  # 2025-11-02 00:00 UTC
CHUNK = 1_000_000


def _chunk(rng: np.random.Generator, lo: int, hi: int, n_total: int, runs: int, emissions: int):
    m = hi - lo
    idx = np.arange(lo, hi)
    span = 7 * 86400.0
    arrival = T0 + idx * (span / n_total) + rng.uniform(0, 0.5, m)
    run = idx * runs // n_total
    prompt = np.minimum(rng.lognormal(6.5, 1.1, m).astype(np.int64) + 1, 32000)
    cached = np.where(rng.random(m) < 0.3, (prompt * rng.random(m)).astype(np.int64), 0)
    output = emissions + rng.geometric(1 / 150, m).astype(np.int64)
    queue = rng.exponential(0.05, m)
    prefill = 0.01 + prompt * rng.uniform(4e-5, 1.2e-4, m)
    gaps = rng.uniform(0.004, 0.05, (m, max(emissions - 1, 0)))
    ttft = queue + prefill
    offsets = np.concatenate([np.zeros((m, 1)), np.cumsum(gaps, axis=1)], axis=1) + ttft[:, None]
    decode = offsets[:, -1] - ttft
    e2e = ttft + decode
    status = rng.choice(np.array(["ok", "error", "cancelled"]), m, p=[0.95, 0.03, 0.02])
    model = rng.integers(0, len(MODELS), m)
    gpu = rng.integers(0, len(GPUS), m)
    arrival_at = (arrival * 1e6).astype("datetime64[us]")
    day = np.datetime_as_string(arrival_at, unit="D")
    df = pl.DataFrame(
        {
            "request_id": pl.int_range(lo, hi, eager=True).cast(pl.Utf8),
            "run_id": pl.Series(run).cast(pl.Utf8),
            "model": np.array(MODELS)[model],
            "gpu": np.array(GPUS)[gpu],
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "output_tokens": output,
            "t_arrival": arrival,
            "arrival_at": pl.Series(arrival_at).dt.replace_time_zone("UTC"),
            "queue_s": queue,
            "prefill_s": prefill,
            "ttft_s": ttft,
            "decode_s": decode,
            "tpot_s": decode / (output - 1),
            "e2e_s": e2e,
            "status": status,
            "day": day,
        }
    ).with_columns(
        request_id=pl.lit("req-") + pl.col("request_id"),
        run_id=pl.lit("bench-run-") + pl.col("run_id"),
        source_format=pl.lit("native"),
        source_file=pl.lit("bench/synthetic.jsonl"),
        source_line=pl.int_range(lo + 1, hi + 1),
        server=pl.lit("vllm-") + (pl.int_range(lo, hi) % 8).cast(pl.Utf8),
        gpu_count=pl.lit(1, pl.Int32),
        engine=pl.lit("vllm"),
        engine_version=pl.lit("0.6.3"),
        max_num_seqs=pl.lit(256, pl.Int32),
        max_batched_tokens=pl.lit(8192, pl.Int32),
        chunked_prefill=pl.lit(True),
        attention=pl.lit("flash"),
        weight_dtype=pl.lit("bf16"),
        kv_dtype=pl.lit("bf16"),
        clock=pl.lit("unix"),
        n_emissions=pl.lit(emissions, pl.Int32),
        error=pl.when(pl.col("status") != "ok").then(pl.lit("synthetic failure")),
    )
    flat = offsets - arrival[:, None] + arrival[:, None]  # seconds since arrival
    times = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (m + 1) * emissions, emissions, dtype=np.int32)),
        pa.array(flat.ravel()),
    )
    return df, times, flat


def _requests_table(df: pl.DataFrame, times: pa.ListArray) -> pa.Table:
    names = arrow_schema("requests").names
    if "token_times" in names:  # tokens stored as lists on requests, unnested by the view
        df = df.with_columns(
            token_times=pl.Series(times), token_counts=pl.lit(None, pl.List(pl.Int32))
        )
    return to_arrow(df, "requests")


def _tokens_table(df: pl.DataFrame, flat: np.ndarray) -> pa.Table:
    m, k = flat.shape
    gaps = np.concatenate([np.full((m, 1), np.nan), np.diff(flat, axis=1)], axis=1).ravel()
    t = pl.DataFrame(
        {
            "request_id": df["request_id"].gather(np.repeat(np.arange(m), k)),
            "run_id": df["run_id"].gather(np.repeat(np.arange(m), k)),
            "token_index": np.tile(np.arange(k, dtype=np.int32), m),
            "t_s": flat.ravel(),
            "n_tokens": pl.Series([None] * (m * k), dtype=pl.Int32),
            "gap_s": gaps,
            "day": df["day"].gather(np.repeat(np.arange(m), k)),
        }
    ).with_columns(gap_s=pl.col("gap_s").fill_nan(None))
    return t


def build(layout: Layout, n: int, seed: int, runs: int, emissions: int) -> float:
    """Write the warehouse; returns seconds taken."""
    start = time.perf_counter()
    if layout.root.exists():
        shutil.rmtree(layout.root)
    layout.ensure()
    sha = hashlib.sha256(f"bench-engines-{n}-{seed}".encode()).hexdigest()
    rng = np.random.default_rng(seed)
    files: list[str] = []
    part = 0

    def put(table: str, df: pl.DataFrame) -> None:
        nonlocal part
        groups = df.partition_by("day", as_dict=True) if table in PARTITIONED else {(None,): df}
        for (day,), g in groups.items():
            rel = f"{layout.relative_dir(table, day)}/{layout.part_name(sha, part)}"
            part += 1
            (layout.root / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                to_arrow(g, table) if table in TABLES else g.to_arrow(),
                layout.root / rel,
                compression="zstd",
                compression_level=1,
                row_group_size=1 << 20,
            )
            files.append(rel)

    for lo in range(0, n, CHUNK):
        hi = min(n, lo + CHUNK)
        df, times, flat = _chunk(rng, lo, hi, n, runs, emissions)
        req = pl.from_arrow(_requests_table(df, times)).with_columns(day=df["day"])
        put("requests", req)
        if "tokens" in TABLES:  # the older layout: one stored row per emission
            put("tokens", _tokens_table(df, flat))
        print(f"  built {hi:,} / {n:,} requests", file=sys.stderr)
    bad = pl.DataFrame(
        {
            "source_file": ["bench/synthetic.jsonl"] * 3,
            "source_format": ["native"] * 3,
            "line": [17, 4242, 99999],
            "reason": ["not JSON", "cached_tokens exceeds prompt_tokens", "not JSON"],
            "raw": ["{", None, "x"],
            "file_sha256": [sha] * 3,
        }
    )
    put("quarantine", bad)
    layout.write_manifest(
        sha,
        {
            "sha256": sha,
            "path": "bench/synthetic.jsonl",
            "size": 0,
            "mtime_ns": 0,
            "format": "native",
            "counts": {"read": n + 3, "ingested": n, "quarantined": 3},
            "status": "ingested",
            "files": sorted(files),
        },
    )
    return time.perf_counter() - start


def same(a: pl.DataFrame, b: pl.DataFrame, rel: float = 1e-9) -> bool:
    if a.columns != b.columns or a.height != b.height:
        return False
    for c in a.columns:
        x, y = a[c].to_list(), b[c].to_list()
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, float):
                if not (
                    math.isclose(u, v, rel_tol=rel, abs_tol=1e-12)
                    or (math.isnan(u) and math.isnan(v))
                ):
                    return False
            elif u != v:
                return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--requests",
        type=int,
        default=1_000_000,
        help="1 M by default: on 2 cores Spark's exact percentiles take ~2 min per 1 M requests "
        "(latency_percentiles), so 10 M would take well over half an hour",
    )
    ap.add_argument("--emissions", type=int, default=4, help="token emissions per request")
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warehouse", type=Path, default=Path("/tmp/bench-engines-warehouse"))
    ap.add_argument("--engines", default="duckdb,spark")
    ap.add_argument("--queries", default="", help="comma-separated names [default: all]")
    ap.add_argument("--spark-master", default="local[*]")
    ap.add_argument("--spark-driver-memory", default="12g")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()

    layout = Layout(args.warehouse)
    stamp = {
        "requests": args.requests,
        "seed": args.seed,
        "runs": args.runs,
        "emissions": args.emissions,
        "columns": arrow_schema("requests").names,
        "tables": sorted(TABLES),
    }
    marker = args.warehouse / "_bench.json"
    if args.rebuild or not marker.exists() or json.loads(marker.read_text()) != stamp:
        print(f"building {args.requests:,} requests in {args.warehouse} ...", file=sys.stderr)
        secs = build(layout, args.requests, args.seed, args.runs, args.emissions)
        marker.write_text(json.dumps(stamp))
        print(f"built in {secs:.1f} s", file=sys.stderr)
    size = sum(p.stat().st_size for p in args.warehouse.rglob("*.parquet")) / 2**20
    wanted = [q for q in args.queries.split(",") if q]
    queries = [q for q in all_queries(queries_dir()) if not wanted or q.name in wanted]

    times: dict[str, dict[str, float | None]] = {}
    results: dict[str, dict[str, pl.DataFrame]] = {}
    for name in args.engines.split(","):
        opts = {}
        if name == "spark":
            opts = {
                "master": args.spark_master,
                "conf": {"spark.driver.memory": args.spark_driver_memory},
            }
        t = time.perf_counter()
        eng = open_engine(name, layout, **opts)
        times.setdefault("(open)", {})[name] = time.perf_counter() - t
        for q in queries:
            t = time.perf_counter()
            try:
                results.setdefault(q.name, {})[name] = eng.named(q)
                times.setdefault(q.name, {})[name] = time.perf_counter() - t
            except Exception as exc:  # a query over a derived table that is absent, ...
                times.setdefault(q.name, {})[name] = None
                print(f"{name} {q.name}: {str(exc).splitlines()[0][:160]}", file=sys.stderr)
            print(f"{name:>7} {q.name:<32} {times[q.name][name]}", file=sys.stderr)
        eng.close()
        if name == "spark":
            eng.spark.sparkContext._gateway and eng.spark.stop()

    engines = args.engines.split(",")
    print(
        f"\n{args.requests:,} requests, {args.emissions} emissions each; "
        f"{size:,.0f} MiB of Parquet; {machine()}"
    )
    head = ["query", *[f"{e} (s)" for e in engines]] + (["same result"] if len(engines) > 1 else [])
    rows = []
    for qname, per in times.items():
        cells = [qname] + [f"{per[e]:.2f}" if per.get(e) is not None else "-" for e in engines]
        if len(engines) > 1:
            r = results.get(qname, {})
            if qname == "(open)":
                verdict = ""
            elif len(r) < len(engines):
                verdict = "- (did not run)"
            else:
                verdict = "yes" if same(*[r[e] for e in engines]) else "NO"
            cells.append(verdict)
            rows_n = r.get(engines[0])
            cells[0] += f" ({rows_n.height} rows)" if rows_n is not None else ""
        rows.append(cells)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for r in rows:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))


if __name__ == "__main__":
    main()
