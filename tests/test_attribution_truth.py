"""Ground truth for `pipeline attribute`: generator traces with a known change between two slices.

How the truth is built. The generator draws the workload (lengths, arrivals) and the engine's
efficiencies from independent random streams of one seed, so changing one factor of a
GenerateSpec (the GPU, the prompt median, the rate, the model) while keeping the seed changes
that factor and nothing else. For m changed factors we generate all 2^m traces (each factor at
its baseline or candidate value) and compute the metrics of each: those are the true values of
the attribution game, and their exact Shapley values are the true shares. Only the two end
traces (all baseline, all candidate) go into the warehouse; the attribution sees nothing else
and must find each factor's share within 5 percentage points, and give ~0 to the factors that
did not change (efficiency included: both slices ran with the same drawn efficiencies, so what
it gets is the fit's estimation error).

A model change (GQA -> MHA) splits into "model size" and "attention (KV heads)"; the truth for
that split generates the two hybrids (each model's size with the other's KV-head ratio), by
handing the generator a catalog lookup that knows them.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline import attribution, catalog
from pipeline.attribution.counterfactual import FACTORS, METRICS, hybrid_model, sim_metrics
from pipeline.attribution.shapley import shapley
from pipeline.ingest.run import ingest_paths
from pipeline.sim import generator
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout

TOL = 0.05  # 5 percentage points of the change
B_START = datetime(2026, 10, 1, tzinfo=UTC)
C_START = datetime(2026, 11, 2, tzinfo=UTC)
SPLIT = "arrival_at < '2026-11-01'", "arrival_at >= '2026-11-01'"
# Short prompts and outputs keep every request inside llama-2's 4k context, so that the
# workload is identical across models (no clipping) when the model changes.
SMALL = {"prompt_median": 400.0, "prompt_sigma": 0.6, "output_median": 120.0,
         "output_sigma": 0.6, "max_output": 600}  # fmt: skip


def trace_metrics(path: Path) -> np.ndarray:
    f = pl.read_ndjson(path)
    t0 = float(f["arrival_ts"].min())
    arr = f["arrival_ts"].to_numpy() - t0
    return sim_metrics(
        arr,
        f["output_tokens"].to_numpy(),
        f["first_token_ts"].to_numpy() - t0,
        f["finish_ts"].to_numpy() - t0,
    )


def run_case(tmp_path, monkeypatch, base: GenerateSpec, changes: dict[str, dict]):
    """Generate 2^m traces, ingest the ends, attribute; returns (true shares, attributed frame)."""
    names = list(changes)
    values = []
    for mask in range(1 << len(names)):  # bit i: factor names[i] at its candidate value
        spec = base
        for i, name in enumerate(names):
            if mask >> i & 1:
                spec = dataclasses.replace(spec, **changes[name])
        full = mask == (1 << len(names)) - 1
        spec = dataclasses.replace(spec, start=C_START if full else B_START)
        path = tmp_path / f"t{mask}.jsonl"
        generate(spec, path)
        values.append(trace_metrics(path))
    values = np.array(values)
    true_phi = shapley(values)
    total = values[-1] - values[0]
    layout = Layout(tmp_path / "wh")
    ingest_paths([tmp_path / "t0.jsonl", tmp_path / f"t{len(values) - 1}.jsonl"], layout)
    _, _, comp = attribution.attribute(layout, *SPLIT)
    assert comp is not None
    truth = {n: true_phi[i] / total for i, n in enumerate(names)}
    return truth, total, comp


def check(truth, total, comp, factor_map, metrics=METRICS):
    """Each attributed share within TOL of the truth; unchanged factors within TOL of 0."""
    got = comp.frame
    report = []
    for j, metric in enumerate(METRICS):
        if metric not in metrics:
            continue
        rows = got.filter(pl.col("metric") == metric)
        # Shares sum to 1 and contributions to the observed change, exactly.
        assert rows["contribution"].sum() == pytest.approx(total[j], rel=1e-9)
        for f in FACTORS:
            share = rows.filter(pl.col("factor") == f)["share"][0]
            true = sum(truth[k][j] for k, v in factor_map.items() if v == f)
            report.append((metric, f, round(share, 4), round(true, 4)))
            print(metric, f, f"attributed {share:+.4f} true {true:+.4f}")
            assert share == pytest.approx(true, abs=TOL), (metric, f, share, true)
    return report


def test_prompt_plus_30_and_h100_to_a100(tmp_path, monkeypatch):
    base = GenerateSpec(gpu="H100-SXM", requests=800, seed=21, rate=2.5, workload=SMALL)
    changes = {
        "prompt": {"workload": SMALL | {"prompt_median": 520.0}},
        "hardware": {"gpu": "A100-80GB"},
    }
    truth, total, comp = run_case(tmp_path, monkeypatch, base, changes)
    check(truth, total, comp, {"prompt": "prompt", "hardware": "hardware"})


def test_load_doubled(tmp_path, monkeypatch):
    base = GenerateSpec(gpu="H100-SXM", requests=800, seed=22, rate=3.0, workload=SMALL)
    truth, total, comp = run_case(tmp_path, monkeypatch, base, {"load": {"rate": 6.0}})
    check(truth, total, comp, {"load": "load"})


def test_gqa_to_mha_splits_size_and_kv_heads(tmp_path, monkeypatch):
    """llama-3.1-8b (GQA, 8 KV heads) -> llama-2-7b (MHA): smaller model, 4x the KV bytes."""
    gqa, mha = catalog.model("llama-3.1-8b"), catalog.model("llama-2-7b")
    hybrids = {"size-mha": hybrid_model(mha, gqa), "size-gqa": hybrid_model(gqa, mha)}
    real = catalog.model
    monkeypatch.setattr(generator.catalog, "model", lambda n: hybrids.get(n) or real(n))
    base = GenerateSpec(model="llama-3.1-8b", requests=800, seed=23, rate=6.0, workload=SMALL)
    # Bit 0 = model size (7B's architecture with the 8B's GQA ratio), bit 1 = attention (8B's
    # architecture with MHA); both = llama-2-7b itself, generated under its real name.
    specs = {0: base, 1: dataclasses.replace(base, model="size-mha"),
             2: dataclasses.replace(base, model="size-gqa"),
             3: dataclasses.replace(base, model="llama-2-7b")}  # fmt: skip
    values = []
    for mask, spec in specs.items():
        spec = dataclasses.replace(spec, start=C_START if mask == 3 else B_START)
        generate(spec, tmp_path / f"t{mask}.jsonl")
        values.append(trace_metrics(tmp_path / f"t{mask}.jsonl"))
    values = np.array(values)
    phi = shapley(values)
    total = values[-1] - values[0]
    truth = {"model": phi[0] / total, "attention": phi[1] / total}
    layout = Layout(tmp_path / "wh")
    ingest_paths([tmp_path / "t0.jsonl", tmp_path / "t3.jsonl"], layout)
    _, _, comp = attribution.attribute(layout, *SPLIT)
    check(truth, total, comp, {"model": "model", "attention": "attention"})
