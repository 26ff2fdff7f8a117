"""Layer-wise profile as a step-cost model (pipeline.fit.profile).

On the calibration set's LLMServingSim profile (vLLM 0.19, RTX 4090, Llama-3.1-8B, profiled on
one decoder layer): step times at grid points equal the CSV rows summed by hand, interpolation
between grid points is linear, ``decode_lines`` agrees with ``time_of``, and the numbers are
physical. On small synthetic profiles (no ../shared needed): the readers, the error messages and
the reconstruction of a step's shape from the simulator's aggregates.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from pipeline import catalog
from pipeline.fit.profile import (
    LayerProfile,
    grid_axis,
    load_profile,
    parse_meta,
    step_shape,
)
from pipeline.physics import StepWork
from pipeline.sim import EngineConfig, simulate
from pipeline.sim.decode_run import run_duration
from tests.conftest import SHARED

RUN = SHARED / "real_traces" / "serving_runs" / "llmservingsim_vllm019"
PROFILE = RUN / "profile-RTX4090-Llama-3.1-8B"
BENCH = RUN / "bench-RTX4090-Llama-3.1-8B"
MODEL = "meta-llama/Llama-3.1-8B"
LAYERS = 32
PER_LAYER = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "rotary_emb")

needs_shared = pytest.mark.skipif(
    not PROFILE.is_dir(), reason=f"calibration-set profile absent at {PROFILE}"
)


# -- the CSVs read by hand, independently of the module --------------------------------------


def _rows(name: str) -> list[dict[str, str]]:
    with open(PROFILE / "tp1" / name, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def raw() -> dict:
    dense: dict[str, dict[int, float]] = defaultdict(dict)
    for r in _rows("dense.csv"):
        dense[r["layer"]][int(r["tokens"])] = float(r["time_us"])
    seq: dict[str, dict[int, float]] = defaultdict(dict)
    for r in _rows("per_sequence.csv"):
        seq[r["layer"]][int(r["sequences"])] = float(r["time_us"])
    attn = {}
    for r in _rows("attention.csv"):
        key = tuple(int(r[c]) for c in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
        attn[key] = float(r["time_us"])
    return {"dense": dense, "seq": seq, "attn": attn}


@pytest.fixture(scope="module")
def prof() -> LayerProfile:
    if not PROFILE.is_dir():
        pytest.skip(f"calibration-set profile absent at {PROFILE}")
    return load_profile(PROFILE, MODEL)


def by_hand(raw: dict, tokens: int, seqs: int, attention_us: float) -> float:
    """A step's microseconds from CSV rows at grid points: 32 layers of the per-layer ops (two
    RMSNorms each) and attention, the model's ends once, lm_head and sampler per sequence."""
    d = raw["dense"]
    layer = sum(d[op][tokens] for op in PER_LAYER) + 2 * d["layernorm"][tokens]
    ends = d["embedding"][tokens] + d["final_layernorm"][tokens]
    head = raw["seq"]["lm_head"][seqs] + raw["seq"]["sampler"][seqs]
    return LAYERS * (layer + attention_us) + ends + head


# -- the calibration-set profile ----------------------------------------------------------------


@needs_shared
def test_loads_the_calibration_profile(prof: LayerProfile) -> None:
    assert prof.layers == LAYERS and prof.profiled_layers == 1  # one layer profiled, 32 run
    assert prof.tp == 1 and prof.prefill_axis == "kv_prefill"
    assert prof.gpu == "NVIDIA GeForce RTX 4090" and prof.hardware == "RTX4090"
    assert set(prof.dense) == {*PER_LAYER, "layernorm", "embedding", "final_layernorm"}
    assert set(prof.per_sequence) == {"lm_head", "sampler"}
    # The attention grid is the one meta.yaml describes.
    grid = prof.meta["attention_grid"]
    att = prof.attention
    assert [0, *att.pc] == grid_axis(grid["chunks"]) == [0, *[16 * 2**i for i in range(8)]]
    assert [0, *att.nd] == grid_axis(grid["n_decode"]) == [0, *[2**i for i in range(9)]]
    kv = grid_axis(grid["kv"])
    assert att.slices[16.0, 0.0].kp == kv  # kv_prefill axis, 0 included
    assert att.slices[0.0, 1.0].rows[0].xs == kv[1:]  # kv_decode axis of decodes


@needs_shared
def test_decode_step_at_grid_point_equals_csv_rows(prof: LayerProfile, raw: dict) -> None:
    for b, kv in [(1, 16), (1, 4096), (8, 512), (256, 16384)]:
        expected = by_hand(raw, b, b, raw["attn"][0, 0, b, kv])
        assert prof.step_time_us(0, 0, b, kv) == pytest.approx(expected, rel=1e-12)
        assert prof.time_of(b, b, b * kv, b * kv, 0) == pytest.approx(expected * 1e-6, rel=1e-12)


@needs_shared
def test_prefill_and_mixed_steps_at_grid_points(prof: LayerProfile, raw: dict) -> None:
    for t, s in [(2048, 0), (512, 1024), (16, 16384)]:
        expected = by_hand(raw, t, 1, raw["attn"][t, s, 0, 0])
        assert prof.step_time_us(t, s, 0, 0) == pytest.approx(expected, rel=1e-12)
        work = StepWork.prefill(t, s)
        got = prof.time_of(*(float(getattr(work, f)) for f in StepWork.__dataclass_fields__))
        assert got == pytest.approx(expected * 1e-6, rel=1e-12)
    # One chunk of 256 tokens on 1024 cached, with 16 decodes of 1024: 272 tokens (a dense grid
    # point), 17 sequences (between the per-sequence points 16 and 20).
    d = raw["dense"]
    layer = sum(d[op][272] for op in PER_LAYER) + 2 * d["layernorm"][272]
    ends = d["embedding"][272] + d["final_layernorm"][272]
    seq = raw["seq"]
    head = sum(seq[op][16] + (seq[op][20] - seq[op][16]) / 4 for op in ("lm_head", "sampler"))
    expected = LAYERS * (layer + raw["attn"][256, 1024, 16, 1024]) + ends + head
    assert prof.step_time_us(256, 1024, 16, 1024) == pytest.approx(expected, rel=1e-12)
    # The mixed shot is far from prefill + decode: the profile's mixed region is what counts.
    assert raw["attn"][2048, 0, 128, 16384] > 3 * raw["attn"][0, 0, 128, 16384]


@needs_shared
def test_interpolation_between_grid_points(prof: LayerProfile, raw: dict) -> None:
    a = raw["attn"]
    # kv_decode halfway between 16 and 32; n_decode 3 between 2 and 4; both at once (bilinear).
    assert prof.attention_us(0, 0, 1, 24) == pytest.approx((a[0, 0, 1, 16] + a[0, 0, 1, 32]) / 2)
    assert prof.attention_us(0, 0, 3, 1024) == pytest.approx(
        (a[0, 0, 2, 1024] + a[0, 0, 4, 1024]) / 2
    )
    corners = [a[0, 0, n, kv] for n in (2, 4) for kv in (1024, 2048)]
    assert prof.attention_us(0, 0, 3, 1536) == pytest.approx(sum(corners) / 4)
    # Prefill chunk 768 between 512 and 1024 on 3072 cached (between 2048 and 4096).
    corners = [a[t, s, 0, 0] for t in (512, 1024) for s in (2048, 4096)]
    assert prof.attention_us(768, 3072, 0, 0) == pytest.approx(sum(corners) / 4)
    # Dense ops over tokens: 2040 lies between the grid points 2032 and 2048.
    d = raw["dense"]["gate_up_proj"]
    got = prof.breakdown_us(2040, 0, 0, 0)["gate_up_proj"] / LAYERS
    assert got == pytest.approx(d[2032] + (d[2048] - d[2032]) / 2)
    # Above the last point: extrapolated from the last two (kv_decode 8192, 16384).
    step = a[0, 0, 1, 16384] - a[0, 0, 1, 8192]
    assert prof.attention_us(0, 0, 1, 24576) == pytest.approx(a[0, 0, 1, 16384] + step)


@needs_shared
def test_decode_lines_agree_with_time_of(prof: LayerProfile) -> None:
    for batch, ctx in [(1, 16), (1, 3000), (7, 100), (16, 700), (64, 2500), (200, 9000)]:
        total = float(batch * ctx)
        lines = prof.decode_lines(batch, total)
        for k in (0, 1, 2, 5, 10):  # inside the first kv_decode cell: exact
            step = max(lines.c0 + lines.c1 * k, lines.m0 + lines.m1 * k) + lines.fixed
            want = prof.time_of(batch, batch, total + batch * k, total + batch * k, 0)
            assert step == pytest.approx(want, rel=1e-9)


@needs_shared
def test_decode_lines_over_long_runs(prof: LayerProfile) -> None:
    """Past the first cell the run follows the secant to the grid's end: a few percent."""
    worst = 0.0
    for batch in (1, 16, 64, 256):
        for ctx in (16, 300, 1000, 3000):
            total = float(batch * ctx)
            lines = prof.decode_lines(batch, total)
            steps = [
                prof.time_of(batch, batch, total + batch * k, total + batch * k, 0)
                for k in range(2000)
            ]
            worst = max(worst, abs(run_duration(lines, 2000) / sum(steps) - 1.0))
    assert worst < 0.06


@needs_shared
def test_physics_batch_one_decode_reads_the_weights(prof: LayerProfile) -> None:
    """A batch-1 decode streams every weight once: weights / bandwidth is a floor, and the
    profile's step sits just above it (measured 16.6 ms against 15.9 ms, x1.04)."""
    m, gpu = catalog.model(MODEL), catalog.gpu(prof.gpu)
    floor = m.params * 2 / gpu.bandwidth
    step = prof.time_of(1, 1, 16, 16, 0)
    assert floor == pytest.approx(15.93e-3, rel=0.01)
    assert 1.0 <= step / floor <= 3.0
    assert step == pytest.approx(16.64e-3, rel=0.01)


@needs_shared
def test_physics_long_prefill_is_compute_bound(prof: LayerProfile) -> None:
    """A 2048-token prefill (193 ms): the layers' four GEMMs run at the card's bf16 peak
    (165 TFLOP/s; x1.001 measured), all dense operators together at 158 TFLOP/s."""
    m, gpu = catalog.model(MODEL), catalog.gpu(prof.gpu)
    parts = prof.breakdown_us(2048, 0, 0, 0)
    gemm_us = sum(parts[op] for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
    layer_params = m.params - 2 * m.vocab * m.hidden  # embedding and lm_head excluded
    mfu = 2 * layer_params * 2048 / (gemm_us * 1e-6) / gpu.peak_flops("bf16")
    assert 0.85 < mfu <= 1.05
    assert prof.step_time_us(2048, 0, 0, 0) == pytest.approx(193.0e3, rel=0.01)


@needs_shared
def test_overheads_add_per_step_and_per_sequence(prof: LayerProfile) -> None:
    fitted = prof.with_overheads(2e-3, 1e-5)
    base = prof.time_of(300, 21, 300.0 * 500, 20.0 * 500 + 300, 280.0**2)
    assert fitted.time_of(300, 21, 300.0 * 500, 20.0 * 500 + 300, 280.0**2) == pytest.approx(
        base + 2e-3 + 21 * 1e-5, rel=1e-12
    )
    lines, plain = fitted.decode_lines(8, 8000.0), prof.decode_lines(8, 8000.0)
    assert lines.fixed == pytest.approx(plain.fixed + 2e-3 + 8e-5, rel=1e-12)
    assert fitted.params()["overhead_s"] == 2e-3


@needs_shared
def test_tp_folder_given_directly_and_missing_tp(prof: LayerProfile) -> None:
    direct = load_profile(PROFILE / "tp1", MODEL)
    assert direct.step_time_us(0, 0, 4, 128) == prof.step_time_us(0, 0, 4, 128)
    with pytest.raises(ValueError, match=r"no tp2/ folder.*profiled: tp1"):
        load_profile(PROFILE, MODEL, tp=2)


@needs_shared
def test_wrong_model_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not Llama-3\.1-70B"):
        load_profile(PROFILE, "meta-llama/Llama-3.1-70B")


@needs_shared
def test_simulating_the_bench_run(prof: LayerProfile) -> None:
    """The profile drives the simulator: fast (closed-form runs) and step-by-step agree (up to
    the secant past a kv_decode cell: 2e-6 here), and the bench run's mean TPOT lands near
    vLLM's 32.4 ms (33.9: no host overhead in the profile, which is eager-mode)."""
    with open(BENCH / "vllm_requests.jsonl") as fh:
        rows = [json.loads(line) for line in fh]
    arr = np.array([r["arrival_time"] for r in rows])
    arr -= arr.min()
    prompt = np.array([r["input_toks"] for r in rows])
    out = np.array([r["output_toks"] for r in rows])
    kv = json.loads((BENCH / "vllm_meta.json").read_text())["kv_cache"]["num_kv_tokens"]
    cfg = EngineConfig(kv_capacity_tokens=kv, max_num_seqs=256, max_batched_tokens=2048)
    fast, slow = (
        simulate(arr, prompt, out, cfg, prof),
        simulate(arr, prompt, out, cfg, prof, fast=False),
    )
    np.testing.assert_allclose(fast.finish, slow.finish, rtol=1e-4)
    tpot = (fast.finish - fast.first_token)[out > 1] / (out[out > 1] - 1)
    assert 0.9 * 32.4e-3 < tpot.mean() < 1.15 * 32.4e-3


# -- the shape of a step from its aggregates ----------------------------------------------------


def _agg(work: StepWork) -> tuple[float, ...]:
    return tuple(float(np.sum(getattr(work, f))) for f in StepWork.__dataclass_fields__)


def test_step_shape_is_exact_for_one_chunk_with_decodes() -> None:
    for t, s, b, c in [(2048, 0, 0, 0), (300, 700, 20, 500), (2, 5, 3, 40), (1000, 0, 128, 9)]:
        work = StepWork.prefill(t, s) + StepWork.decode(b, b * c)
        shape = step_shape(*_agg(work))
        assert shape.n_prefill == 1 and shape.prefill_chunk == t
        assert shape.kv_prefill == pytest.approx(s, abs=1e-9)
        assert shape.prefill_key == pytest.approx(s + t / 2.0)
        assert shape.n_decode == b and shape.kv_decode == pytest.approx(c, abs=1e-9)


def test_step_shape_decode_only_and_equal_chunks() -> None:
    shape = step_shape(*_agg(StepWork.decode(32, 32 * 1500)))
    assert (shape.n_prefill, shape.n_decode, shape.kv_decode) == (0, 32, 1500)
    # Three equal chunks of 100 on 50 cached each, plus 10 decodes of 200.
    work = StepWork.prefill(100, 50) + StepWork.prefill(100, 50) + StepWork.prefill(100, 50)
    shape = step_shape(*_agg(work + StepWork.decode(10, 2000)))
    assert shape.n_prefill == 3 and shape.prefill_chunk == 300
    assert shape.kv_prefill == pytest.approx(150) and shape.kv_decode == pytest.approx(200)
    # Unequal chunks: the count is a lower bound, the token total stays right.
    work = StepWork.prefill(1000, 0) + StepWork.prefill(10, 0) + StepWork.decode(5, 500)
    shape = step_shape(*_agg(work))
    assert 1 <= shape.n_prefill <= 2
    assert shape.prefill_chunk + shape.n_decode == 1015


# -- synthetic profiles -------------------------------------------------------------------------

META = """\
profiler_version: 1.0.0   # comment
gpu: NVIDIA GeForce RTX 4090
hardware: RTX4090
model: meta-llama/Llama-3.1-8B
tp_degrees: [1]
engine_effective:
  block_size: 16
  hf_overrides:
    num_hidden_layers: 1
    num_key_value_heads: 8
attention_grid:
  chunks: 0, 16-2048 x2
skew_fit:
  enabled: false
"""

PC, KP, ND, KD = (16, 2048), (0, 16384), (1, 256), (16, 16384)


def _p(pc: float, kp: float) -> float:
    return 5.0 + 0.02 * pc + 0.001 * kp + 1e-6 * pc * kp


def _d(nd: float, kd: float) -> float:
    return 4.0 + 0.5 * nd + 0.002 * kd + 0.001 * nd * kd


def _write(path: Path, header: str, rows: list[tuple]) -> None:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


def synthetic(root: Path, new_format: bool = False, mixed_nd: tuple = (1,)) -> Path:
    """A profile whose tables are multilinear (so interpolation is exact) and whose mixed shots
    are prefill + decode, with mixed rows only for ``mixed_nd``."""
    tp = root / "tp1"
    tp.mkdir(parents=True)
    (root / "meta.yaml").write_text(META)
    ops = [*PER_LAYER, "layernorm", "embedding", "final_layernorm"]
    _write(
        tp / "dense.csv",
        "layer,tokens,time_us",
        [(op, t, 1.0 + i + 0.01 * i * t) for i, op in enumerate(ops) for t in (1, 2048)],
    )
    _write(
        tp / "per_sequence.csv",
        "layer,sequences,time_us",
        [(op, s, 100.0 + s) for op in ("lm_head", "sampler") for s in (1, 256)],
    )
    rows = [(0, 0, n, k, _d(n, k)) for n in ND for k in KD]
    rows += [(t, s, 0, 0, _p(t, s)) for t in PC for s in KP]
    rows += [
        (t, s, n, k, _p(t, s) + _d(n, k)) for t in PC for s in KP for n in mixed_nd for k in KD
    ]
    if new_format:  # prefill_key = history + chunk / 2, a layer column, decode_q_len
        rows = [("attention", t, s + t / 2 if t else 0, n, k, 1, v) for t, s, n, k, v in rows]
        rows.append(("attention", 0, 0, 4, 16, 2, 999.0))  # a speculative shot: ignored
        header = "layer,prefill_chunk,prefill_key,n_decode,kv_decode,decode_q_len,time_us"
    else:
        header = "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us"
    _write(tp / "attention.csv", header, rows)
    return root


def test_synthetic_profile_interpolates_exactly(tmp_path: Path) -> None:
    prof = load_profile(synthetic(tmp_path / "p"), "llama-3.1-8b")
    assert prof.profiled_layers == 1 and prof.meta["skew_fit"] == {"enabled": False}
    assert prof.attention_us(0, 0, 100, 5000) == pytest.approx(_d(100, 5000))
    assert prof.attention_us(1000, 3000, 0, 0) == pytest.approx(_p(1000, 3000))
    assert prof.attention_us(700, 100, 1, 900) == pytest.approx(_p(700, 100) + _d(1, 900))
    # n_decode past the mixed rows: mixed at n=1 plus the decode-only difference.
    assert prof.attention_us(700, 100, 200, 900) == pytest.approx(_p(700, 100) + _d(200, 900))
    # Below the first positive point: clamped (a 5-token chunk costs what 16 tokens cost).
    assert prof.attention_us(5, 0, 0, 0) == pytest.approx(_p(16, 0))
    dense = sum((1.0 + i + 0.01 * i * 300) * (2 if i == 6 else 1) for i in range(7)) * LAYERS
    dense += sum(1.0 + i + 0.01 * i * 300 for i in (7, 8))
    expected = dense + 2 * (100.0 + 1) + LAYERS * _p(300, 50)
    assert prof.step_time_us(300, 50, 0, 0) == pytest.approx(expected)


def test_new_format_prefill_key(tmp_path: Path) -> None:
    old = load_profile(synthetic(tmp_path / "old"), "llama-3.1-8b")
    new = load_profile(synthetic(tmp_path / "new", new_format=True), "llama-3.1-8b")
    assert new.prefill_axis == "prefill_key"
    # A chunk of 2048 on 0 cached sits at prefill_key 1024, the profiled shot itself.
    assert new.attention_us(2048, 0, 0, 0) == pytest.approx(_p(2048, 0))
    assert new.step_time_us(0, 0, 4, 16) == pytest.approx(old.step_time_us(0, 0, 4, 16))


def test_decode_lines_exact_when_attention_is_linear(tmp_path: Path) -> None:
    prof = load_profile(synthetic(tmp_path / "p"), "llama-3.1-8b")
    lines = prof.decode_lines(4, 4 * 100.0)
    for k in (0, 3, 1000, 20000):
        step = max(lines.c0 + lines.c1 * k, lines.m0 + lines.m1 * k) + lines.fixed
        assert step == pytest.approx(prof.time_of(4, 4, 400.0 + 4 * k, 400.0 + 4 * k, 0))


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda r: (r / "meta.yaml").unlink(), "no meta.yaml"),
        (lambda r: (r / "tp1" / "attention.csv").unlink(), r"attention\.csv is missing"),
        (
            lambda r: (r / "tp1" / "dense.csv").write_text("layer,time_us\nqkv_proj,3\n"),
            r"dense\.csv: missing column\(s\) tokens",
        ),
        (
            lambda r: (r / "tp1" / "per_sequence.csv").write_text("layer,sequences,time_us\n"),
            r"per_sequence\.csv has no rows",
        ),
        (
            lambda r: (r / "tp1" / "dense.csv").write_text("layer,tokens,time_us\nqkv_proj,x,3\n"),
            r"dense\.csv line 2: tokens='x' is not a number",
        ),
        (lambda r: (r / "tp1" / "moe.csv").write_text("ep,tokens\n"), "mixture-of-experts"),
        (
            lambda r: (r / "mlp.csv").write_text("num_tokens,time_stats.mlp_up_proj.median\n"),
            "Vidur's profile layout is not supported",
        ),
        (
            lambda r: (r / "meta.yaml").write_text(
                META.replace("num_key_value_heads: 8", "num_key_value_heads: 4")
            ),
            "num_key_value_heads=4 but Llama-3.1-8B has 8",
        ),
    ],
)
def test_not_a_profile_says_what_is_missing(tmp_path: Path, breakage, message: str) -> None:
    root = synthetic(tmp_path / "p")
    breakage(root)
    with pytest.raises(ValueError, match=message):
        load_profile(root, "llama-3.1-8b")


def test_incomplete_attention_grid(tmp_path: Path) -> None:
    root = synthetic(tmp_path / "p")
    path = root / "tp1" / "attention.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(x for x in lines if not x.startswith("0,0,")) + "\n")
    with pytest.raises(ValueError, match="no decode-only rows"):
        load_profile(root, "llama-3.1-8b")
    with pytest.raises(ValueError, match="does not exist"):
        load_profile(tmp_path / "nowhere", "llama-3.1-8b")


def test_meta_subset_parser() -> None:
    meta = parse_meta(META + "tp_list:\n- 1\n- 2\nquoted: 'a: b'\n")
    assert meta["engine_effective"]["hf_overrides"] == {
        "num_hidden_layers": 1,
        "num_key_value_heads": 8,
    }
    assert meta["tp_degrees"] == [1] and meta["tp_list"] == [1, 2]
    assert meta["profiler_version"] == "1.0.0" and meta["quoted"] == "a: b"
    assert meta["skew_fit"] == {"enabled": False}
    assert grid_axis("0, 16-2048 x2") == [0, 16, 32, 64, 128, 256, 512, 1024, 2048]
    assert grid_axis("16-16384 x1.5")[:8] == [16, 24, 36, 54, 81, 122, 182, 273]
