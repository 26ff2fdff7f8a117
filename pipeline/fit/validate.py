"""``pipeline validate``: the model's error on runs it was not fitted on.

For every deployment with two or more runs, each run is replayed with a calibration fitted on
the others (leave one run out). A deployment with one run is fitted on the requests that arrived
in the first half of it; the whole recorded arrival sequence is then replayed and only the
second half's requests are scored (their outcomes were not seen). The in-sample replay (fitted on
everything) is kept beside them, labelled as such: it shows what the model can express, not
what it predicts.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.fit.calibrate import METRICS, Calibration, Deployment, Run, calibrate, run_metrics
from pipeline.schema import deployment as deployment_key

Progress = Callable[[str], None]


def _rows(
    dep: Deployment, cal: Calibration, run: Run, split: str, mask: np.ndarray | None = None
) -> list[dict[str, Any]]:
    ttft, e2e = cal.replay(run)
    return _metric_rows(dep, cal.scheduler, run, split, ttft, e2e, mask)


def _metric_rows(
    dep: Deployment,
    scheduler: str,
    run: Run,
    split: str,
    ttft: np.ndarray,
    e2e: np.ndarray,
    mask: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """`validation` rows: each metric of ``run`` observed vs replayed (``ttft``, ``e2e``)."""
    obs = run_metrics(run.arrival, run.ttft, run.e2e, run.output, mask)
    sim = run_metrics(run.arrival, ttft, e2e, run.output, mask)
    n = int(run.n if mask is None else mask.sum())
    return [
        {
            "run_id": run.run_id,
            **deployment_key.row(dep),
            "scheduler": scheduler,
            "split": split,
            "metric": m,
            "observed": obs[m],
            "replayed": sim[m],
            "error": sim[m] / obs[m] - 1.0 if obs[m] else None,
            "requests": n,
        }
        for m in METRICS
    ]


def _first_half(run: Run) -> tuple[Run, np.ndarray]:
    """The run with only its first half's outcomes visible (the second half is replayed as
    load but never scored: its TTFT and E2E are NaN), and the mask of the second half."""
    cut = float(np.median(run.arrival))
    early = run.arrival <= cut
    return replace(run, scored=early), ~early


def validate_deployment(
    dep: Deployment, runs: list[Run], progress: Progress | None = None, workers: int | None = None
) -> tuple[list[dict[str, Any]], list[Calibration]]:
    """Validation rows (held-out and in-sample) and the calibrations fitted on the way.

    The calibrations are independent, so they run in ``workers`` processes (default: the CPUs
    this process may use); each is deterministic, so the result does not depend on the count."""
    say = progress or (lambda _: None)
    if len(runs) >= 2:
        train = [runs] + [runs[:i] + runs[i + 1 :] for i in range(len(runs))]
        what = [f"calibrating on all {len(runs)} run(s)"]
        what += [f"leaving out {r.run_id}" for r in runs]
    else:
        (r,) = runs
        first, later = _first_half(r)
        train = [runs, [first]]
        what = ["calibrating on its whole run", f"fitting the first half of {r.run_id}"]
    cals = _calibrations(dep, train, [f"{dep.label()}: {w}" for w in what], say, workers)
    full = cals[0]
    rows: list[dict[str, Any]] = []
    for r in runs:
        rows += _rows(dep, full, r, "in-sample")
    if len(runs) >= 2:
        for r, cal in zip(runs, cals[1:], strict=True):
            rows += _rows(dep, cal, r, "leave-one-run-out")
    else:
        rows += _rows(dep, cals[1], runs[0], "second-half", later)
    return rows, cals


def _calibrations(
    dep: Deployment, train: list[list[Run]], what: list[str], say: Progress, workers: int | None
) -> list[Calibration]:
    n = min(len(train), workers or len(os.sched_getaffinity(0)))
    # fork: spawn would re-import the caller's __main__ (a script without a main guard breaks).
    # The children only run numpy, scipy and the pure-Python simulator, never DuckDB, whose
    # threads the parent may hold.
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for i, (runs, w) in enumerate(zip(train, what, strict=True)):
            say(w)
            out.append(calibrate(runs, dep, intervals=i == 0))
        return out
    say(f"{dep.label()}: {len(train)} calibrations in {n} processes")
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
        jobs = zip(train, what, strict=True)
        # The full fit (first) with its intervals; the held-out fits need their values only.
        futures = {
            pool.submit(calibrate, runs, dep, intervals=i == 0): w
            for i, (runs, w) in enumerate(jobs)
        }
        for f in as_completed(futures):
            say(f"{futures[f]}: done")
        return [f.result() for f in futures]


def summary(rows: list[dict[str, Any]], split: str) -> dict[str, float]:
    """Median and worst |error| over runs x {p50, p90}, for TTFT and TPOT, of one split."""
    out: dict[str, float] = {}
    for what in ("ttft", "tpot"):
        errs = [
            abs(r["error"])
            for r in rows
            if r["split"] == split and r["metric"] in (f"{what}_p50", f"{what}_p90")
            and r["error"] is not None and np.isfinite(r["error"])
        ]  # fmt: skip
        out[f"{what}_median_abs_error"] = float(np.median(errs)) if errs else float("nan")
        out[f"{what}_worst_abs_error"] = float(max(errs)) if errs else float("nan")
    return out


def whatif_rows(
    source: Calibration, target: Deployment, runs: list[Run], split: str = "what-if"
) -> list[dict[str, Any]]:
    """Predict ``target``'s runs from a calibration of another configuration (e.g. a colocated
    vLLM fit replayed as a disaggregated deployment): the source's efficiencies and overheads,
    the target's scheduler (recorded for it) and tensor parallelism; KV capacity scaled from the
    source by the decode instance's GPU count. Nothing of the target's runs enters the model."""
    from pipeline.fit.calibrate import recorded_scheduler

    scheduler = recorded_scheduler(target) or source.scheduler
    d = target.disagg()
    gpus = int(d.get("decode_tp", target.gpu_count)) if d else target.gpu_count
    kv = int(source.kv_tokens * gpus / max(source.deployment.gpu_count, 1))
    cal = replace(
        source, deployment=target, scheduler=scheduler, scheduler_source="what-if", kv_tokens=kv
    )
    rows: list[dict[str, Any]] = []
    for r in runs:
        rows += _rows(target, cal, replace(r, kv_tokens=None), split)
    return rows


def profile_rows(
    dep: Deployment, runs: list[Run], profile: Any, scheduler: str, kv_tokens: int
) -> list[dict[str, Any]]:
    """Each run replayed with a layer-wise profile's step times (pipeline/fit/profile.py) under
    the given scheduler and KV capacity: nothing fitted to the log but those two (split
    'profile'), to set beside the log-fitted errors."""
    from pipeline.fit.calibrate import _longest, _simulate, engine_config

    rows: list[dict[str, Any]] = []
    for r in runs:
        kv = r.kv_tokens or kv_tokens
        cfg = engine_config(scheduler, dep, max(kv, _longest([r]) + 16), _longest([r]))
        ttft, e2e = _simulate(profile, cfg, r)
        rows += _metric_rows(dep, scheduler, r, "profile", ttft, e2e)
    return rows
