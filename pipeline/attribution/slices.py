"""Between two slices: the change of each metric split among the factors (Shapley), with the
workload-vs-efficiency two-way split (Oaxaca-Blinder) on top."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import polars as pl

from pipeline import catalog
from pipeline.attribution import predicates
from pipeline.attribution.counterfactual import (
    FACTORS,
    MAX_REQUESTS,
    METRICS,
    UNITS,
    WORKLOAD,
    Game,
    Slice,
    changed,
    observed_metrics,
)
from pipeline.attribution.per_request import load_requests
from pipeline.attribution.shapley import shapley, two_way
from pipeline.fit.core import FittedModel, GroupKey
from pipeline.warehouse.arrow import polars_schema

SCHEMA: dict[str, Any] = polars_schema("attribution")  # pipeline/schema/derived.py
KEY_COLS = [f"k_{n}" for n in GroupKey._fields]
REQUIRED = {
    "prompt_tokens": ("prompt",),
    "output_tokens": ("output",),
    "k_model": ("model", "attention"),
    "k_gpu": ("hardware",),
}


class AttributionError(ValueError):
    pass


@dataclass
class Comparison:
    baseline: Slice | None
    candidate: Slice | None
    frame: pl.DataFrame  # SCHEMA rows, one per metric x factor
    two_way: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    not_attributable: list[str] = field(default_factory=list)
    evaluations: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.predicate if self.baseline else None,
            "candidate": self.candidate.predicate if self.candidate else None,
            "requests": {
                "baseline": self.baseline.n if self.baseline else 0,
                "candidate": self.candidate.n if self.candidate else 0,
            },
            "attribution": self.frame.to_dicts(),
            "two_way": self.two_way,
            "not_attributable": self.not_attributable,
            "notes": self.notes,
            "coalitions_simulated": self.evaluations,
        }


def _describe(key: GroupKey) -> str:
    return f"{key.model} on {key.gpu_count} x {key.gpu}"


def build_slice(
    name: str,
    predicate: str,
    df: pl.DataFrame,
    fits: dict[GroupKey, FittedModel],
    max_requests: int = MAX_REQUESTS,
) -> tuple[Slice | None, list[str], list[str]]:
    """The slice, or None with the fields that are missing; plus notes."""
    notes: list[str] = []
    if df.is_empty():
        raise AttributionError(f"the {name} predicate selects no successful requests: {predicate}")
    missing = [c for c in REQUIRED if df[c].null_count() == df.height]
    if df["ttft_s"].null_count() == df.height:
        notes.append(f"{name}: no TTFT logged; the TTFT metrics cannot be compared")
    modes = df.group_by(KEY_COLS).len().sort("len", descending=True)
    key = GroupKey(*modes.row(0)[:-1]) if modes.height else None
    if key is not None and modes.height > 1:
        notes.append(
            f"{name}: {modes.height} deployments; the counterfactuals use the most common "
            f"({_describe(key)}, {modes['len'][0] / df.height:.0%} of requests)"
        )
    if missing or key is None or key.model is None or key.gpu is None:
        return None, missing or ["k_model"], notes
    try:
        catalog.model(key.model), catalog.gpu(key.gpu)
    except catalog.UnknownName as exc:
        notes.append(f"{name}: {exc}")
        return None, ["k_model" if "model" in str(exc).lower() else "k_gpu"], notes
    for _col, what in (
        ("k_max_num_seqs", "max_num_seqs"),
        ("k_max_batched_tokens", "max_batched_tokens"),
        ("k_chunked_prefill", "chunked_prefill"),
        ("k_attention", "attention"),
    ):
        if getattr(key, what) is None:
            notes.append(
                f"{name}: {what} not logged; the engine default is assumed "
                "(batching/attention changes cannot be seen)"
            )
    if df.height and df["t_arrival"].null_count() == df.height:
        raise AttributionError(
            f"the {name} has no arrival times (its log does not record when requests arrived): "
            "its load, queueing and throughput are unknown, so a counterfactual replay cannot be "
            "built. Compare slices whose logs have arrival times, or read the TTFT / TPOT "
            "distributions with `pipeline query latency_percentiles`."
        )
    fit = fits.get(key)
    if fit is None:
        raise AttributionError(
            f"no fitted cost model for the {name}'s deployment ({_describe(key)}); "
            "run `pipeline fit` (or it had too little data)"
        )
    main = df.filter(
        pl.all_horizontal([pl.col(c).eq_missing(v) for c, v in zip(KEY_COLS, key, strict=True)])
    )
    ok = main.filter(pl.col("prompt_tokens").is_not_null() & pl.col("output_tokens").is_not_null())
    ok = ok.filter(pl.col("t_arrival").is_not_null())
    counts = ok.group_by("domain").agg(
        pl.len(), pl.col("t_arrival").min().alias("t0"), pl.col("t_arrival").max().alias("t1")
    )
    counts = counts.sort(["len", "domain"], descending=[True, False])
    span = (counts["t1"] - counts["t0"]).to_numpy()
    rate = (
        float(counts.filter(pl.Series(span > 0))["len"].sum() / span.sum())
        if span.sum() > 0
        else math.nan
    )
    base = ok.filter(pl.col("domain") == counts["domain"][0]).sort("t_arrival").head(max_requests)
    arr = base["t_arrival"].to_numpy()
    prompt = ok["prompt_tokens"].to_numpy().astype(np.float64)
    s = Slice(
        name=name,
        predicate=predicate,
        n=df.height,
        key=key,
        key_share=modes["len"][0] / df.height,
        fit=fit,
        prompt=prompt,
        output=ok["output_tokens"].to_numpy().astype(np.float64),
        cached_frac=ok["cached_tokens"].to_numpy() / np.maximum(prompt, 1),
        rate=rate,
        base_arrival=arr - arr.min(),
        base_prompt=base["prompt_tokens"].to_numpy().astype(np.float64),
        base_output=base["output_tokens"].to_numpy().astype(np.float64),
        base_cached=base["cached_tokens"].to_numpy().astype(np.float64),
        observed=observed_metrics(df),
        request_ids=frozenset(zip(df["run_id"], df["request_id"], strict=True)),
        server_requests=int(counts["len"][0]),
    )
    return s, [], notes


def attribute_frames(
    b: Slice, c: Slice, *, max_requests: int = MAX_REQUESTS
) -> tuple[pl.DataFrame, dict[str, dict[str, float]], list[str], int]:
    """Shapley rows and the two-way split for two built slices."""
    diff = changed(b, c)
    active = [f for f in FACTORS if diff[f]]
    game = Game(b, c, active)
    values = game.values()  # (2^k, metrics)
    total = values[-1] - values[0]
    phi = shapley(values) if active else np.zeros((0, len(METRICS)))
    block = np.array([f in WORKLOAD for f in active], dtype=bool)
    tw = (
        two_way(values, block)
        if active
        else {
            k: np.zeros(len(METRICS))
            for k in ("block", "rest", "block_at_baseline", "block_at_candidate", "interaction")
        }
    )
    rows = []
    two: dict[str, dict[str, float]] = {}
    for j, metric in enumerate(METRICS):
        tot = float(total[j])

        def share(x: float, tot: float = tot) -> float | None:
            if tot != 0 and math.isfinite(tot):
                return x / tot
            return 0.0 if x == 0 else None

        wl, ef = float(tw["block"][j]), float(tw["rest"][j])
        two[metric] = {
            "before": float(b.observed[j]),
            "after": float(c.observed[j]),
            "total": tot,
            "workload": wl,
            "efficiency": ef,
            "workload_at_baseline_deployment": float(tw["block_at_baseline"][j]),
            "workload_at_candidate_deployment": float(tw["block_at_candidate"][j]),
            "interaction": float(tw["interaction"][j]),
        }
        for f in FACTORS:
            x = float(phi[active.index(f), j]) if f in active else 0.0
            blk = "workload" if f in WORKLOAD else "efficiency"
            bc = wl if blk == "workload" else ef
            rows.append(
                {
                    "metric": metric,
                    "unit": UNITS[metric],
                    "factor": f,
                    "block": blk,
                    "changed": diff[f],
                    "contribution": x,
                    "share": share(x),
                    "before": float(b.observed[j]),
                    "after": float(c.observed[j]),
                    "block_contribution": bc,
                    "block_share": share(bc),
                    "workload_at_baseline": two[metric]["workload_at_baseline_deployment"],
                    "workload_at_candidate": two[metric]["workload_at_candidate_deployment"],
                    "interaction": two[metric]["interaction"],
                    "baseline": b.predicate,
                    "candidate": c.predicate,
                    "method": "shapley/simulation",
                }
            )
    frame = pl.DataFrame(rows, schema=SCHEMA)
    return frame, two, game.notes, 1 << len(active)


def compare_slices(
    con: duckdb.DuckDBPyConnection,
    baseline: str,
    candidate: str,
    fits: dict[GroupKey, FittedModel],
    params: dict[str, Any] | None = None,
    *,
    max_requests: int = MAX_REQUESTS,
) -> Comparison:
    """Attribute the change from the ``baseline`` slice to the ``candidate`` slice."""
    bp = predicates.check(con, baseline, params)
    cp = predicates.check(con, candidate, params)
    dfs = [load_requests(con, p, predicates.used_params(p, params)) for p in (bp, cp)]
    notes: list[str] = []
    slices, missing = [], set()
    for name, pred, df in zip(("baseline", "candidate"), (bp, cp), dfs, strict=True):
        s, miss, n = build_slice(name, pred, df, fits, max_requests)
        slices.append(s)
        notes += n
        missing |= set(miss)
    b, c = slices
    if b is None or c is None:
        factors = sorted({f for m in missing for f in REQUIRED.get(m, ())} | {"load", "efficiency"})
        why = ", ".join(sorted(m.removeprefix("k_") for m in missing))
        notes.append(
            f"cannot simulate without {why}: factors {', '.join(factors)} (and so the "
            "whole split) cannot be attributed; the change is reported as unattributed"
        )
        ob, oc = observed_metrics(dfs[0]), observed_metrics(dfs[1])
        rows = [
            {
                "metric": m,
                "unit": UNITS[m],
                "factor": "unattributed",
                "block": None,
                "changed": True,
                "contribution": float(oc[j] - ob[j]),
                "share": 1.0,
                "before": float(ob[j]),
                "after": float(oc[j]),
                "block_contribution": None,
                "block_share": None,
                "baseline": bp,
                "candidate": cp,
                "method": "none",
            }
            for j, m in enumerate(METRICS)
        ]
        return Comparison(b, c, pl.DataFrame(rows, schema=SCHEMA), {}, notes, factors, 0)
    frame, two, sim_notes, evals = attribute_frames(b, c, max_requests=max_requests)
    bad = [
        m
        for j, m in enumerate(METRICS)
        if not (math.isfinite(b.observed[j]) and math.isfinite(c.observed[j]))
    ]
    if bad:
        notes.append(f"not measured in both slices: {', '.join(bad)}")
    return Comparison(b, c, frame, two, notes + sim_notes, [], evals)
