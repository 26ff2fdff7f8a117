"""Ground truth: `pipeline fit` on generator traces recovers the true MFU, MBU and overheads.

Each case simulates a few thousand requests with known efficiencies (FILE.truth.json), ingests
them and fits. With per-token times every step is rebuilt exactly, so all four parameters of both
phases must come back within 5 %. From requests alone the prefill steps are still exact, and the
decode MBU comes from request windows (within 5 %); the decode overheads are not asserted there.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.fit import fit_warehouse, load_fits
from pipeline.ingest.run import ingest_paths
from pipeline.physics import StepCost
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout

TOL = 0.05
PARAMS = ("mfu", "mbu", "step_overhead", "seq_overhead")

CASES = {
    # name: (spec, which parameters to check per phase)
    "h100-8b-chunked": (GenerateSpec(gpu="H100-SXM", model="llama-3.1-8b", requests=2000, seed=11),
                        "all"),
    "a100-7b-mha-unchunked": (
        GenerateSpec(gpu="A100-80GB", model="llama-2-7b", chunked_prefill=False, requests=1500,
                     seed=12), "all"),
    # A higher offered load (6 req/s on 4 x H100): requests wait in the queue before prefill.
    "h100-70b-tp4-queueing": (
        GenerateSpec(gpu="H100-SXM", model="llama-3.1-70b", gpu_count=4, requests=1500, seed=13,
                     rate=6.0), "all"),
    "a100-mixtral-tp2": (GenerateSpec(gpu="A100-80GB", model="mixtral-8x7b", gpu_count=2,
                                      requests=1500, seed=14), "all"),
    "h100-8b-fp8-bursty": (GenerateSpec(gpu="H100-SXM", model="llama-3.1-8b", weight_dtype="fp8",
                                        arrivals="bursty", requests=1500, seed=15), "all"),
    "h100-8b-requests-only": (GenerateSpec(gpu="H100-SXM", model="llama-3.1-8b", requests=2000,
                                           seed=16, token_times=False), "requests"),
    "a100-13b-requests-only-unchunked": (
        GenerateSpec(gpu="A100-80GB", model="llama-2-13b", chunked_prefill=False, requests=2000,
                     seed=17, token_times=False), "requests"),
}  # fmt: skip


def _fit(tmp_path: Path, spec: GenerateSpec):
    trace = tmp_path / "trace.jsonl"
    truth = generate(spec, trace)
    layout = Layout(tmp_path / "wh")
    ingest_paths([trace], layout)
    fits = fit_warehouse(layout, claims=False)
    return truth, fits, layout


@pytest.mark.parametrize("name", list(CASES))
def test_fit_recovers_truth(tmp_path, name):
    spec, mode = CASES[name]
    truth, fits, layout = _fit(tmp_path, spec)
    assert len(fits) == 1
    fm = fits[0]
    true = truth["cost"]
    checks = {
        "prefill": PARAMS,
        "decode": PARAMS if mode == "all" else ("mbu",),
    }
    for phase, names in checks.items():
        p = fm.phase(phase)
        assert p.phase == phase
        for k in names:
            err = getattr(p, k) / true[k] - 1.0
            assert abs(err) <= TOL, (name, phase, k, getattr(p, k), true[k])
        assert 0 < p.mfu < 1 and 0 < p.mbu < 1
        assert p.n >= 100 and p.n_test >= 20
    # With exact steps the held-out error is rounding only (timestamps in microseconds).
    if mode == "all":
        assert fm.decode.mape_test < 0.002 and fm.prefill.mape_test < 0.002
        assert fm.decode.r2_test > 0.999
        assert fm.extra["method"] == "tokens"
    else:
        assert fm.extra["method"] == "requests"
    # The fitted StepCost reproduces the true one's step times within the same tolerance.
    loaded = load_fits(layout)
    assert set(loaded) == {fm.key}
    got = loaded[fm.key].step_cost("decode")
    assert isinstance(got, StepCost)
    assert got.tp == spec.gpu_count and got.weight_dtype == spec.weight_dtype
    ref = StepCost(got.model, got.gpu, tp=spec.gpu_count, weight_dtype=spec.weight_dtype,
                   **{k: true[k] for k in PARAMS})  # fmt: skip
    for batch, ctx in ((1, 1000), (32, 32 * 1500), (128, 128 * 800)):
        rel = float(got.decode_step_time(batch, ctx)) / float(ref.decode_step_time(batch, ctx))
        assert abs(rel - 1) < TOL
    pre = loaded[fm.key].step_cost("prefill")
    for tokens in (64, 1024, 4096):
        rel = float(pre.prefill_time(tokens)) / float(ref.prefill_time(tokens))
        assert abs(rel - 1) < TOL


def test_intervals_are_the_size_of_the_error(tmp_path):
    """With exact steps (microsecond-rounded stamps) the estimate misses the truth by ~1e-5
    relative: a 95 % interval must be neither degenerate nor loose, and the truth must lie
    within 3 of its half-widths (measured over seeds 21-23: at most 1.3)."""
    truth, fits, _ = _fit(tmp_path, GenerateSpec(requests=1200, seed=21))
    p = fits[0].prefill
    for k in PARAMS:
        lo, hi = p.ci[k]
        v, t = getattr(p, k), truth["cost"][k]
        half = (hi - lo) / 2
        assert math.isfinite(lo) and hi > lo, k
        assert half / v < 0.01, k
        assert abs(v - t) <= 3 * half, (k, v, t, lo, hi)
