"""The seed's claims as checks: verdicts on generator traces designed to show each claim, and
'not enough data' on a tiny warehouse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from pipeline.fit import claims as C
from pipeline.ingest.run import ingest_paths
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

PINNED = {"mfu": 0.5, "mbu": 0.7, "step_overhead": 0.002, "seq_overhead": 1e-5}
N = 1200


def _warehouse(root: Path, specs: list[dict]) -> Layout:
    paths = []
    for i, kw in enumerate(specs):
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i)  # separate servers' days
        kw = {"requests": N} | kw
        spec = GenerateSpec(seed=100 + i, efficiencies=PINNED, start=start, **kw)
        path = root / f"t{i}__{kw['model']}__{kw['gpu']}__{kw.get('weight_dtype', 'bf16')}.jsonl"
        generate(spec, path)
        paths.append(path)
    layout = Layout(root / "wh")
    ingest_paths(paths, layout)
    return layout


def _by_claim(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["claim"]: r for r in frame.iter_rows(named=True)}


@pytest.fixture(scope="module")
def designed(tmp_path_factory) -> dict[str, dict]:
    """Four model sizes on H100, Llama-3.1-8B also on A100 in bf16 and int8 (weight-only)."""
    layout = _warehouse(
        tmp_path_factory.mktemp("claims"),
        [
            {"gpu": "H100-SXM", "model": "llama-3.1-8b"},
            {"gpu": "H100-SXM", "model": "llama-2-13b"},
            {"gpu": "H100-SXM", "model": "qwen3-32b", "gpu_count": 2},
            {"gpu": "H100-SXM", "model": "llama-3.1-70b", "gpu_count": 4},
            {"gpu": "A100-80GB", "model": "llama-3.1-8b"},
            {"gpu": "A100-80GB", "model": "llama-3.1-8b", "weight_dtype": "int8"},
        ],
    )
    frame = C.check_claims(connect(layout))
    assert frame.columns == list(C.COLUMNS)
    assert frame.height == len(C.CHECKS)
    return _by_claim(frame)


def test_model_size_is_linear(designed):
    r = designed[C.CLAIM_MODEL_SIZE]
    assert r["verdict"] == C.SUPPORTED, r
    assert r["ci_low"] <= r["estimate"] <= r["ci_high"]
    assert 0.8 <= r["estimate"] <= 1.2 and r["n"] == 6


def test_input_length(designed):
    r = designed[C.CLAIM_INPUT]
    assert r["verdict"] == C.SUPPORTED, r
    # Compute-bound prefill: 4x the tokens costs between 2x (overheads) and 4.5x (attention).
    assert 2.0 < r["ci_low"] <= r["estimate"] <= r["ci_high"] < 4.5


def test_load(tmp_path):
    # Bursty arrivals (gamma inter-arrivals, CV 3): the number in flight swings, and so does TTFT.
    layout = _warehouse(
        tmp_path, [{"gpu": "H100-SXM", "model": "llama-3.1-8b", "arrivals": "bursty"}]
    )
    r = _by_claim(C.check_claims(connect(layout)))[C.CLAIM_LOAD]
    assert r["verdict"] == C.SUPPORTED, r
    assert r["ci_low"] > 1.0 and r["n"] == N


def test_gpu(designed):
    r = designed[C.CLAIM_GPU]
    assert r["verdict"] == C.SUPPORTED, r
    # Same pinned MFU: per-token prefill time scales with the peak ratio 989 / 312 = 3.17,
    # diluted by fixed overheads.
    assert 1.5 < r["estimate"] < 3.3 and "A100-80GB vs H100-SXM" in r["detail"]


def test_decode_tracks_bytes(designed):
    r = designed[C.CLAIM_BYTES]
    assert r["verdict"] == C.SUPPORTED, r
    assert r["ci_high"] < 0.5


def test_weight_only_int8_speeds_decode_not_the_ceiling(designed):
    d = designed[C.CLAIM_QUANT_DECODE]
    assert d["verdict"] == C.SUPPORTED, d
    assert d["ci_low"] > 1.0 and d["estimate"] < 2.0  # half the weight bytes: at most 2x
    c = designed[C.CLAIM_QUANT_CEILING]
    assert c["verdict"] == C.SUPPORTED, c
    assert "weight-only" in c["detail"]
    assert 0.85 <= c["ci_low"] <= c["estimate"] <= c["ci_high"] <= 1.15


def test_fp8_w8a8_raises_the_ceiling_so_the_claim_is_contradicted(tmp_path):
    layout = _warehouse(
        tmp_path,
        [
            {"gpu": "H100-SXM", "model": "llama-3.1-8b"},
            {"gpu": "H100-SXM", "model": "llama-3.1-8b", "weight_dtype": "fp8"},
        ],
    )
    r = _by_claim(C.check_claims(connect(layout)))[C.CLAIM_QUANT_CEILING]
    assert r["verdict"] == C.CONTRADICTED, r
    assert r["ci_low"] > 1.15 and "W8A8" in r["detail"]


def test_tiny_warehouse_has_not_enough_data(tmp_path):
    layout = Layout(tmp_path / "wh")
    spec = GenerateSpec(requests=20, seed=1)
    generate(spec, tmp_path / "tiny.jsonl")
    ingest_paths([tmp_path / "tiny.jsonl"], layout)
    frame = C.check_claims(connect(layout))
    assert frame["verdict"].to_list() == [C.UNKNOWN] * len(C.CHECKS)
    assert frame["estimate"].null_count() == frame.height
