"""Synthetic serving logs for the report's tests and benchmark (not a user-facing generator).

Requests follow rough physics: prefill time grows with new prompt tokens, the time per output
token grows with the number of requests decoding on the same server, queueing grows with load.
``records`` yields our JSON-lines format (``pipeline/schema/record.py``); ``requests_frame`` builds
the ``requests`` table directly (for large benchmark warehouses).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.schema.tables import arrow_schema

# (model, gpu, prefill s/token, decode base s, decode s per batched request)
DEPLOYMENTS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "H100-SXM", 6.0e-5, 0.0075, 2.0e-5),
    ("meta-llama/Llama-3.1-70B-Instruct", "H200", 3.2e-4, 0.030, 9.0e-5),
)
EPOCH = dt.datetime(2026, 11, 2, tzinfo=dt.UTC).timestamp()


@dataclass
class Spec:
    n: int = 2000
    seed: int = 0
    start: float = EPOCH  # unix seconds of the first arrival
    rate: float = 4.0  # requests per second per deployment
    slowdown: float = 1.0  # multiplies prefill and decode times (to make a regression)
    deployments: tuple = DEPLOYMENTS
    error_rate: float = 0.02
    servers: int = 2


def _arrays(spec: Spec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    n = spec.n
    dep = rng.integers(0, len(spec.deployments), n)
    server = rng.integers(0, spec.servers, n)
    gaps = rng.exponential(1.0 / (spec.rate * len(spec.deployments)), n)
    arrival = spec.start + np.cumsum(gaps)
    prompt = np.clip(rng.lognormal(6.5, 1.0, n), 8, 30000).astype(np.int64)
    cached = (prompt * rng.choice([0.0, 0.25, 0.5], n, p=[0.6, 0.3, 0.1])).astype(np.int64)
    output = np.clip(rng.lognormal(5.0, 0.8, n), 1, 4000).astype(np.int64)
    pre_tok = np.array([d[2] for d in spec.deployments])[dep]
    dec_base = np.array([d[3] for d in spec.deployments])[dep]
    dec_b = np.array([d[4] for d in spec.deployments])[dep]
    queue = rng.exponential(0.02, n) * spec.slowdown
    prefill = (0.012 + pre_tok * (prompt - cached)) * spec.slowdown
    ttft = queue + prefill
    # First pass with the base decode time, then the batch each request saw sets its TPOT.
    tpot = dec_base * spec.slowdown
    finish = arrival + ttft + tpot * np.maximum(output - 1, 0)
    batch = _concurrency(dep * spec.servers + server, arrival + ttft, finish)
    tpot = (dec_base + dec_b * batch) * spec.slowdown * rng.lognormal(0.0, 0.08, n)
    decode = tpot * np.maximum(output - 1, 0)
    status = np.where(rng.random(n) < spec.error_rate, "error", "ok")
    return {
        "dep": dep,
        "server": server,
        "arrival": arrival,
        "prompt": prompt,
        "cached": cached,
        "output": output,
        "queue": queue,
        "prefill": prefill,
        "decode": decode,
        "batch": batch,
        "status": status,
    }


def _concurrency(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Requests of the same group decoding when each request starts decoding."""
    out = np.zeros(len(start))
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        ends = np.sort(end[idx])
        starts = np.sort(start[idx])
        s = start[idx]
        out[idx] = np.searchsorted(starts, s, "right") - np.searchsorted(ends, s, "right")
    return out


def records(spec: Spec) -> Iterator[dict]:
    a = _arrays(spec)
    for i in range(spec.n):
        model, gpu = spec.deployments[a["dep"][i]][:2]
        arr = float(a["arrival"][i])
        sched = arr + float(a["queue"][i])
        first = sched + float(a["prefill"][i])
        fin = first + float(a["decode"][i])
        ok = a["status"][i] == "ok"
        yield {
            "request_id": f"r{spec.seed}-{i:07d}",
            "run_id": f"run-{spec.seed}",
            "server": f"srv-{a['dep'][i]}-{a['server'][i]}",
            "model": model,
            "gpu": gpu,
            "gpu_count": 1 if "8B" in model else 4,
            "engine": "vllm",
            "weight_dtype": "bf16",
            "kv_dtype": "bf16",
            "prompt_tokens": int(a["prompt"][i]),
            "cached_tokens": int(a["cached"][i]),
            "output_tokens": int(a["output"][i]) if ok else 0,
            "arrival_ts": round(arr, 6),
            "scheduled_ts": round(sched, 6),
            "first_token_ts": round(first, 6) if ok else None,
            "finish_ts": round(fin, 6) if ok else round(first, 6),
            "status": "ok" if ok else "error",
            "error": None if ok else "CUDA out of memory",
        }


def write_jsonl(path: Path, spec: Spec, extra: list[dict] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for rec in records(spec):
            f.write(json.dumps(rec) + "\n")
        for rec in extra or []:
            f.write(json.dumps(rec) + "\n")
    return path


def requests_frame(spec: Spec, run_id: str) -> pl.DataFrame:
    """The ``requests`` table rows (plus the ``day`` partition) for ``spec``, built directly."""
    a = _arrays(spec)
    models = [d[0] for d in spec.deployments]
    gpus = [d[1] for d in spec.deployments]
    ok = a["status"] == "ok"
    out = np.where(ok, a["output"], 0)
    ttft = np.where(ok, a["queue"] + a["prefill"], np.nan)
    decode = np.where(ok, a["decode"], np.nan)
    tpot = np.where(ok & (out > 1), decode / np.maximum(out - 1, 1), np.nan)
    arrival_at = (a["arrival"] * 1e6).astype("int64").astype("datetime64[us]")
    df = pl.DataFrame(
        {
            "request_id": np.char.add("r", np.arange(spec.n).astype(str)),
            "run_id": run_id,
            "source_format": "native",
            "source_file": f"bench/{run_id}.jsonl",
            "source_line": np.arange(1, spec.n + 1),
            "server": np.char.add(np.char.add(a["dep"].astype(str), "-"), a["server"].astype(str)),
            "model": np.array(models)[a["dep"]],
            "gpu": np.array(gpus)[a["dep"]],
            "gpu_count": np.where(a["dep"] == 0, 1, 4).astype(np.int32),
            "engine": "vllm",
            "weight_dtype": "bf16",
            "kv_dtype": "bf16",
            "prompt_tokens": a["prompt"],
            "cached_tokens": a["cached"],
            "output_tokens": out,
            "clock": "unix",
            "t_arrival": a["arrival"],
            "arrival_at": arrival_at,
            "queue_s": a["queue"],
            "prefill_s": np.where(ok, a["prefill"], np.nan),
            "ttft_s": ttft,
            "decode_s": decode,
            "tpot_s": tpot,
            "e2e_s": np.where(ok, ttft + decode, a["queue"] + a["prefill"]),
            "n_emissions": np.zeros(spec.n, np.int32),
            "status": a["status"],
            "error": pl.Series(np.where(ok, "", "CUDA out of memory")).replace("", None),
        },
        nan_to_null=True,
    )
    df = df.with_columns(
        pl.col("arrival_at").dt.replace_time_zone("UTC"),
        day=pl.col("arrival_at").dt.strftime("%Y-%m-%d"),
    )
    full = pl.from_arrow(arrow_schema("requests").empty_table()).schema
    return df.with_columns(
        [pl.lit(None, dtype).alias(name) for name, dtype in full.items() if name not in df.columns]
    )


XSS = "<img src=x onerror=alert(1)>"


def odd_records(start: float = EPOCH) -> list[dict]:
    """Records that exercise escaping and the data-quality section.

    Five requests of a model named like an XSS payload, two without a GPU, three on a relative
    clock (their own run), and one whose first token precedes its arrival (quarantined).
    """
    out: list[dict] = []
    for i in range(5):
        t = start + 10 + i
        out.append(
            {
                "request_id": f"xss-{i}", "run_id": "run-xss", "model": XSS, "gpu": "H100-SXM",
                "server": "srv-xss", "prompt_tokens": 100 * (i + 1), "output_tokens": 20,
                "arrival_ts": t, "scheduled_ts": t + 0.01, "first_token_ts": t + 0.05,
                "finish_ts": t + 0.5,
            }
        )  # fmt: skip
    for i in range(2):
        t = start + 20 + i
        out.append(
            {
                "request_id": f"nogpu-{i}", "run_id": "run-nogpu", "model": "mystery-model",
                "prompt_tokens": 50, "output_tokens": 5, "arrival_ts": t,
                "first_token_ts": t + 0.1, "finish_ts": t + 0.2,
            }
        )  # fmt: skip
    for i in range(3):
        out.append(
            {
                "request_id": f"rel-{i}", "run_id": "run-relative", "clock": "relative",
                "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100-SXM",
                "prompt_tokens": 64, "output_tokens": 8, "arrival_ts": 100.0 + i,
                "first_token_ts": 100.2 + i, "finish_ts": 100.5 + i,
            }
        )  # fmt: skip
    out.append(
        {
            "request_id": "bad-0", "run_id": "run-bad", "model": "m", "gpu": "H100-SXM",
            "prompt_tokens": 10, "output_tokens": 2, "arrival_ts": start + 30,
            "first_token_ts": start + 29.5, "finish_ts": start + 31,
        }
    )  # fmt: skip
    return out


def make_warehouse(root: Path, logs: Path, specs: list[Spec], odd: bool = False):
    """Write one log per spec (plus the odd records in the first) and ingest them all."""
    from pipeline.ingest.run import IngestOptions, ingest_paths
    from pipeline.warehouse.layout import Layout

    paths = [
        write_jsonl(logs / f"log-{i}.jsonl", s, odd_records(s.start) if odd and i == 0 else None)
        for i, s in enumerate(specs)
    ]
    layout = Layout(root)
    ingest_paths(paths, layout, IngestOptions())
    return layout
