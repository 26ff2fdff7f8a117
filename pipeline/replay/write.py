"""Write a replay into the warehouse beside (never among) the observed data.

Replayed requests become ``replay_requests`` rows (the ``requests`` contract, source_format
'replay'), with ``run_id`` naming the scenario and ``source_file`` naming the replayed workload
(the recorded run id, trace id or file). Observed views, named queries, fit, attribute and the
report read ``requests`` and ``runs`` only, so a replay can never pass for a measurement. The rows
pass through :func:`pipeline.ingest.validate.validate`, so they obey the same contract as
ingested ones, and are committed by :class:`StagedWrite` with a manifest entry keyed by the
sha256 of (workload, resolved scenario): replaying the same thing again finds the manifest and
writes nothing. One ``replay_runs`` row carries the scenario as JSON; the ``replay_steps``
derived table (``<warehouse>/replay_steps/part-<sha16>.parquet``) gets one row per engine step.
"""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from pipeline import __version__
from pipeline.ingest.validate import validate
from pipeline.readers.base import conform_requests
from pipeline.replay.result import ReplayResult
from pipeline.sim.records import request_frame
from pipeline.sim.result import since
from pipeline.warehouse.derived import write_derived
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.writer import StagedWrite, recover

SOURCE_FORMAT = "replay"
REQUESTS_TABLE = "replay_requests"
RUNS_TABLE = "replay_runs"
STEPS_TABLE = "replay_steps"


def _meta(res: ReplayResult, run_id: str) -> dict[str, Any]:
    sc = res.scenario
    cfg = sc.pools[-1].pool.config
    return {
        "run_id": run_id,
        "model": sc.model.hf_id,
        "gpu": sc.gpu.name,
        "gpu_count": sc.pools[-1].tp,
        "engine": "replay",
        "engine_version": __version__,
        "max_num_seqs": cfg.max_num_seqs,
        "max_batched_tokens": cfg.max_batched_tokens,
        "chunked_prefill": cfg.chunked_prefill,
        "attention": "flash" if sc.flash_attention else "eager",
        "weight_dtype": sc.weight_dtype,
        "kv_dtype": sc.kv_dtype,
    }


def _frame(
    res: ReplayResult, g: np.ndarray, meta: dict[str, Any], token_lists: Any | None
) -> pl.DataFrame:
    w = res.workload
    ok = res.ok[g]
    df = request_frame(
        [w.request_id[i] for i in g.tolist()],
        meta,
        server=res.server[g],
        prompt=w.prompt[g],
        cached=w.cached[g],
        output=w.output[g],
        clock=w.clock,
        t0=w.t0,
        arrival=w.arrival[g],
        scheduled=res.scheduled[g],
        first_token=res.first_token[g],
        finish=res.finish[g],
        status=np.where(ok, "ok", "error"),
        error=np.where(
            ok, None, "refused: prompt + output does not fit this configuration's KV / step"
        ),
        source_line=g.astype(np.int64) + 1,
    )
    if token_lists is not None:
        df = df.with_columns(pl.Series("token_times", token_lists))
    return conform_requests(df)


def write_replay(layout: Layout, res: ReplayResult, run_id: str, key: str) -> dict[str, Any]:
    """Commit the replay (idempotent on ``key``); returns counts and whether it was written."""
    layout.ensure()
    if layout.manifest_file(key).exists():
        return {"status": "already", "run_id": run_id}
    # The commit protocol of pipeline/warehouse/writer.py, as ingest runs it: recover what a
    # killed writer left, wait for the content's lock (a concurrent writer of the same replay
    # finishes first), then re-check the manifest.
    recover(layout)
    with layout.lock(key[:16], blocking=True):
        if layout.manifest_file(key).exists():
            return {"status": "already", "run_id": run_id}
        for orphan in layout.data_files_of(key[:16]):
            orphan.unlink(missing_ok=True)
        return _write_locked(layout, res, run_id, key)


def _write_locked(layout: Layout, res: ReplayResult, run_id: str, key: str) -> dict[str, Any]:
    import pyarrow as pa

    source = res.workload.run_id
    meta = _meta(res, run_id)
    staged = StagedWrite(layout, key)
    counts = {"requests": 0, "refused": 0, "tokens": 0, "steps": 0}
    # The steps table is built and encoded on its own thread while the requests stream: at a
    # million requests it was 4.8 s after them, on one core (the other one idle).
    steps_pool = ThreadPoolExecutor(1, thread_name_prefix="replay-steps")
    try:
        steps_done = steps_pool.submit(_write_steps, layout, res, run_id, key)
        w = res.workload
        for g, offs, times in res.token_chunks():
            since(times, offs, w.arrival[g])  # relative to arrival, in place
            lists = pa.ListArray.from_arrays(pa.array(offs, pa.int32()), pa.array(times))
            v = validate(_frame(res, g, meta, lists), SOURCE_FORMAT, source)
            if v.rejected.height:  # a bug in the simulator, never the user's data
                raise RuntimeError(f"replayed rows broke the contract: {v.rejected.row(0)}")
            staged.add(REQUESTS_TABLE, v.requests)
            counts["requests"] += v.requests.height
            counts["tokens"] += v.emissions
        refused = np.flatnonzero(~res.ok)
        if len(refused):
            v = validate(_frame(res, refused, meta, None), SOURCE_FORMAT, source)
            staged.add(REQUESTS_TABLE, v.requests)
            counts["refused"] += v.requests.height
        staged.add(RUNS_TABLE, _runs_row(res, run_id, source))
        # Derived table first: a crash before the manifest leaves a part a re-run overwrites.
        counts["steps"] = steps_done.result()
        staged.commit(
            {
                "sha256": key,
                "path": f"replay:{source}",
                "size": -1,
                "mtime_ns": -1,
                "format": SOURCE_FORMAT,
                "run_id": run_id,
                "counts": {
                    "read": counts["requests"] + counts["refused"],
                    "ingested": counts["requests"] + counts["refused"],
                    "quarantined": 0,
                    "duplicates": 0,
                    "arrivals": 0,
                    "tokens": counts["tokens"],
                    "summaries": 0,
                },
                "status": "ingested",
                "ingested_at": dt.datetime.now(dt.UTC).isoformat(),
            }
        )
    except BaseException:
        steps_pool.shutdown(wait=True, cancel_futures=True)  # nothing writes after we return
        staged.abort()
        raise
    steps_pool.shutdown()
    return {"status": "written", "run_id": run_id, **counts}


def _write_steps(layout: Layout, res: ReplayResult, run_id: str, key: str) -> int:
    write_derived(layout, STEPS_TABLE, res.steps_frames(run_id), part=f"part-{key[:16]}")
    return sum(len(st["t_start"]) for pr in res.pools.values() for st in pr.steps)


def _runs_row(res: ReplayResult, run_id: str, source: str) -> pl.DataFrame:
    sc = res.scenario
    started = None
    if res.workload.clock == "unix":
        started = dt.datetime.fromtimestamp(res.workload.t0, dt.UTC)
    meta = {
        "replay_of": source,
        "workload_kind": res.workload.kind,
        **sc.describe(),
        "whatif": json.loads(sc.whatif.canonical()),
    }
    return pl.DataFrame(
        {
            "run_id": [run_id],
            "model": [sc.model.hf_id],
            "backend": ["replay"],
            "request_rate": [float(res.ok.sum()) / max(float(res.workload.arrival.max()), 1e-9)],
            "max_concurrency": [None],
            "started_at": [started],
            "metadata_json": [json.dumps(meta, sort_keys=True, default=str)],
            "source_file": [source],
            "source_format": [SOURCE_FORMAT],
        },
        schema={
            "run_id": pl.Utf8,
            "model": pl.Utf8,
            "backend": pl.Utf8,
            "request_rate": pl.Float64,
            "max_concurrency": pl.Int64,
            "started_at": pl.Datetime("us", "UTC"),
            "metadata_json": pl.Utf8,
            "source_file": pl.Utf8,
            "source_format": pl.Utf8,
        },
    )
