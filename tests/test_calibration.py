"""Calibration by replay: its parts on hand-worked inputs, and its accuracy on real runs.

Accuracy is measured on the calibration set in ../shared (real servers on known GPUs); the
tolerances are the figures docs/accuracy.md quotes, rounded up to the next percent, so a change
that makes the model worse on real data fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.fit.calibrate import (
    Deployment,
    Run,
    calibrate,
    engine_config,
    observed_peak_kv,
    recorded_scheduler,
    run_metrics,
)
from pipeline.fit.calibration_store import load_deployments
from pipeline.fit.validate import summary, validate_deployment
from pipeline.ingest.run import IngestOptions, ingest_paths
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect
from tests.conftest import SHARED

RUNS = SHARED / "real_traces" / "serving_runs"
RTX = RUNS / "llmservingsim_vllm019" / "bench-RTX4090-Llama-3.1-8B"
DS = RUNS / "distserve_opt13b_a100"
needs_shared = pytest.mark.skipif(not RUNS.is_dir(), reason=f"calibration set absent at {RUNS}")


def test_recorded_scheduler_from_engine_and_version() -> None:
    d = Deployment(model="m", gpu="g", engine="vllm")
    assert recorded_scheduler(d) is None  # no version: inferred by the fit
    assert recorded_scheduler(Deployment("m", "g", engine="vllm", engine_version="0.19.0")) == (
        "vllm-v1"
    )
    assert recorded_scheduler(Deployment("m", "g", engine="vllm", engine_version="0.4.2")) == (
        "vllm-v0"
    )
    assert recorded_scheduler(Deployment("m", "g", engine="sglang")) == "sglang"
    # Our own generator's traces: mixed chunked prefill, i.e. V1's scheduler.
    assert recorded_scheduler(Deployment("m", "g", engine="sim", chunked_prefill=True)) == (
        "vllm-v1"
    )
    assert recorded_scheduler(Deployment("m", "g", engine="tgi", engine_version="2.0")) is None


def test_engine_config_defaults_and_recorded_limits() -> None:
    d = Deployment("m", "g", engine="vllm", max_num_seqs=128, max_batched_tokens=2048)
    v0 = engine_config("vllm-v0", d, 50_000, longest=4096)
    # V0 cannot run without a budget covering the longest sequence (it re-prefills on recompute).
    assert (v0.max_batched_tokens, v0.chunked_prefill, v0.mixed_prefill) == (4096, False, False)
    v1 = engine_config("vllm-v1", Deployment("m", "g"), 50_000, longest=4096)
    assert (v1.max_batched_tokens, v1.max_num_seqs, v1.chunked_prefill) == (8192, 256, True)
    # V0's block manager keeps 1 % of the blocks free at admission; V1 has no watermark.
    assert (v0.watermark_blocks, v1.watermark_blocks) == (31, 0)  # 3,125 blocks of 16
    with pytest.raises(ValueError, match="unknown scheduler"):
        engine_config("tgi", d, 50_000, 10)


def test_observed_peak_kv_by_hand() -> None:
    # A: prompt 100, 11 tokens from t=1 to t=2 (10 per second); B: prompt 50, 3 tokens, 1.5-2.5.
    # Just before A leaves (t=2): A holds 100+1+10 = 111, B 50+1+0.5*2 = 52 -> 163.
    run = Run(
        "r",
        arrival=np.array([0.0, 1.0]),
        prompt=np.array([100, 50]),
        output=np.array([11, 3]),
        ttft=np.array([1.0, 0.5]),
        e2e=np.array([2.0, 1.5]),
    )
    assert observed_peak_kv(run) == pytest.approx(163.0, rel=1e-6)


def test_run_metrics_by_hand() -> None:
    a = np.array([0.0, 1.0, 2.0])
    m = run_metrics(a, np.array([0.1, 0.2, 0.3]), np.array([1.1, 0.2, 2.3]), np.array([11, 1, 21]))
    assert m["ttft_p50"] == pytest.approx(0.2)
    assert m["tpot_p50"] == pytest.approx(0.1)  # (1.0/10, 2.0/20); the one-token request has none
    assert m["throughput_tok_s"] == pytest.approx(33 / 4.3)


def _ingest(tmp_path, paths, sets=None):
    layout = Layout(tmp_path / "wh")
    ingest_paths(paths, layout, IngestOptions(sets=sets or {}))
    return load_deployments(connect(layout))


@needs_shared
def test_rtx4090_vllm019_whole_log_replayed(tmp_path) -> None:
    """The issue's target for this run: fitted from its whole log and replayed, median |error|
    <= 10 % TTFT and <= 5 % TPOT over {p50, p90}; measured 1.4 % / 1.1 % (worst 1.8 / 2.2 %)."""
    deps = _ingest(tmp_path, [RTX])
    ((dep, runs),) = deps.runs.items()
    assert (dep.engine_version, dep.max_batched_tokens, runs[0].kv_tokens) == (
        "0.19.0",
        2048,
        41408,
    )
    cal = calibrate(runs, dep)
    assert (cal.scheduler, cal.scheduler_source, cal.kv_status) == (
        "vllm-v1",
        "recorded",
        "recorded",
    )
    ttft, e2e = cal.replay(runs[0])
    r = runs[0]
    obs = run_metrics(r.arrival, r.ttft, r.e2e, r.output)
    sim = run_metrics(r.arrival, ttft, e2e, r.output)
    for m in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"):
        assert abs(sim[m] / obs[m] - 1) < 0.04, (m, sim[m], obs[m])
    # Physics bounds hold for every estimate.
    assert 0 < cal.values["mfu"] <= 1 and 0 < cal.values["mbu"] <= 1
    assert cal.values["step_overhead_s"] >= 0 and cal.values["seq_overhead_s"] >= 0


@needs_shared
def test_distserve_vllm_leave_one_run_out(tmp_path) -> None:
    """DistServe's vLLM OPT-13B runs (1-4 req/s, A100-80GB), each replayed with a model fitted on
    the other three. Measured (docs/accuracy.md): median |error| TTFT 9.1 %, TPOT 4.7 %; worst
    42.7 % (p90 TTFT at 3 req/s, at the KV cliff) and 16.7 % (the 2 req/s run, recorded ~1.5 h
    after the others and ~15 % slower throughout). The medians meet the issue's 10 % / 5 %; the
    worst-run bounds do not. Pinned at today's figures."""
    files = sorted(DS.glob("vllm-*.exp.txt"))
    sets = {"model": "facebook/opt-13b", "gpu": "A100-80GB", "gpu_count": 1,
            "weight_dtype": "fp16", "kv_dtype": "fp16"}  # fmt: skip
    deps = _ingest(tmp_path, files, sets)
    ((dep, runs),) = deps.runs.items()
    assert len(runs) == 4 and dep.engine == "vllm" and dep.engine_version is None
    rows, cals = validate_deployment(dep, runs)
    # No version recorded: the fit infers the scheduler, and V0 (what ran) explains it best.
    assert cals[0].scheduler_source == "inferred" and cals[0].scheduler == "vllm-v0"
    s = summary(rows, "leave-one-run-out")
    assert s["ttft_median_abs_error"] < 0.10 and s["tpot_median_abs_error"] < 0.05
    assert s["ttft_worst_abs_error"] < 0.44 and s["tpot_worst_abs_error"] < 0.175


@needs_shared
def test_distserve_disaggregated_leave_one_run_out(tmp_path) -> None:
    """DistServe's own runs (prefill TP2 + decode TP1, 3-9 req/s), described by the shipped run
    manifest's [disaggregation] keys (each instance's limits as DistServe's launcher sets
    them) and calibrated as such, the decode instance pulling each prompt's KV inside the step
    that admits it at a fitted share of the link. Measured (docs/accuracy.md): in sample median
    |error| TTFT 3.6 %, TPOT 2.7 % (worst 6.3 / 9.2 %); held out TTFT 3.1 %, TPOT 0.7 % (worst
    6.3 / 8.6 %): every target (10 % / 25 % TTFT, 5 % / 10 % TPOT) is met. Pinned at today's
    figures. (From the first start alone: held out TTFT 4.2 / 7.6 %, TPOT 5.0 / 11.8 %.)"""
    from tests.conftest import REPO

    layout = Layout(tmp_path / "wh")
    manifest = REPO / "examples" / "manifests" / "distserve-c21d11.run.toml"
    ingest_paths(sorted(DS.glob("distserve-*.exp.txt")), layout, IngestOptions(manifest=manifest))
    deps = load_deployments(connect(layout))
    ((dep, runs),) = deps.runs.items()
    assert dep.disagg()["prefill_tp"] == 2 and dep.disagg()["decode_tp"] == 1
    assert recorded_scheduler(dep) == "distserve"
    rows, cals = validate_deployment(dep, runs)
    assert cals[0].scheduler == "distserve"
    # The decode instance's KV lands inside one A100-80GB's sizing range (50-100 % of it).
    assert 30_000 < cals[0].kv_tokens < 66_000
    s = summary(rows, "in-sample")
    assert s["ttft_median_abs_error"] < 0.04 and s["tpot_median_abs_error"] < 0.03
    assert s["ttft_worst_abs_error"] < 0.065 and s["tpot_worst_abs_error"] < 0.095
    s = summary(rows, "leave-one-run-out")
    assert s["ttft_median_abs_error"] < 0.035 and s["tpot_median_abs_error"] < 0.01
    assert s["ttft_worst_abs_error"] < 0.065 and s["tpot_worst_abs_error"] < 0.09
    # The pull runs at a share of the manifest's 300 GB/s: 0.18 on all three runs, 0.13-0.21
    # held out. The jackknife's refits move it 0.12-0.28 (it trades against MBU), so its
    # interval is wider than its value: not identifiable, never printed as fitted.
    assert 0.02 < cals[0].values["kv_link_share"] < 0.5
    assert cals[0].status["kv_link_share"] == "not identifiable"
    # The full fit's intervals hold what each held-out calibration found (with the Jacobian's
    # alone, +-0.2 % wide, none of these did).
    for name in ("mfu", "mbu", "kv_link_share"):
        lo, hi = cals[0].ci[name]
        assert all(lo <= c.values[name] <= hi for c in cals[1:]), name


def test_manifest_disaggregation_is_checked(tmp_path) -> None:
    from pipeline.ingest.metadata import MetadataError, manifest_tables, run_manifest

    bad = tmp_path / "run.toml"
    bad.write_text('gpu = "A100-80GB"\n[disaggregation]\nprefill_tp = 1.5\n')
    assert run_manifest(bad, bad) == {"gpu": "A100-80GB"}
    with pytest.raises(MetadataError, match=r"prefill_tp = 1\.5"):
        manifest_tables(bad, bad)
    bad.write_text("[deployment]\ntp = 2\n")
    with pytest.raises(MetadataError, match=r"unknown table \[deployment\]"):
        run_manifest(bad, bad)
    good = tmp_path / "good.toml"
    good.write_text(
        "[disaggregation]\nprefill_tp = 2\ndecode_tp = 1\nkv_bandwidth_gbps = 300\n"
        "prefill_max_batched_tokens = 8192\ndecode_max_num_seqs = 1024\n"
    )
    assert manifest_tables(good, good) == {
        "disaggregation": {"prefill_tp": 2, "decode_tp": 1, "kv_bandwidth_gbps": 300.0,
                           "prefill_max_batched_tokens": 8192, "decode_max_num_seqs": 1024}
    }  # fmt: skip
    bad.write_text("[disaggregation]\ndecode_max_batched_tokens = 0\n")
    with pytest.raises(MetadataError, match=r"decode_max_batched_tokens = 0"):
        manifest_tables(bad, bad)


class _OneSecond:
    """Every step takes exactly 1 s: schedules can be worked out by hand."""

    def time_of(self, tokens, seqs, attn_pairs, kv_tokens, score_elems) -> float:
        return 1.0

    def decode_lines(self, batch, sum_context):
        from pipeline.physics import DecodeLines

        return DecodeLines(0.0, 0.0, 1.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("scheduler", "c_prompt", "first", "finish"),
    [
        # A, B arrive at 0 (prompts 4, outputs 3 and 2), C at 1.5 (output 2). Budget 8 tokens.
        # v0: [0,1] prefill A+B; [1,2] decode (B done); [2,3] prefill C alone, A waits;
        #     [3,4] decode A, C (both done).
        ("vllm-v0", 4, [1, 1, 3], [4, 2, 4]),
        # v1: [2,3] is mixed: A's last decode and C's whole prompt share the step.
        ("vllm-v1", 4, [1, 1, 3], [3, 2, 4]),
        # sglang: as v0 while prompts fit one chunk.
        ("sglang", 4, [1, 1, 3], [4, 2, 4]),
        # A 12-token C is chunked 8 + 4. sglang runs both chunks alone ([2,3], [3,4]), then
        # decodes A and C together ([4,5]). v1 gives A one token of the budget at [2,3] (A done),
        # C 7 then 5 tokens.
        ("sglang", 12, [1, 1, 4], [5, 2, 5]),
        ("vllm-v1", 12, [1, 1, 4], [3, 2, 5]),
    ],
)
def test_schedules_worked_by_hand(scheduler, c_prompt, first, finish) -> None:
    from pipeline.sim.engine import simulate

    dep = Deployment("m", "g", max_num_seqs=4, max_batched_tokens=8)
    cfg = engine_config(scheduler, dep, kv_tokens=1600, longest=c_prompt + 1)
    res = simulate([0.0, 0.0, 1.5], [4, 4, c_prompt], [3, 2, 2], cfg, _OneSecond())
    assert res.first_token.tolist() == first
    assert res.finish.tolist() == finish


def test_admission_watermark_worked_by_hand() -> None:
    """100 one-token blocks; A (prompt 50) and B (prompt 45) arrive together, 1 s per step.
    Without a watermark both prefill at [0,1] (95 <= 100 blocks) and A's decode finishes both at
    [1,2]. With 10 % kept free, B needs 45 <= 100 - 50 - 10 and waits: A prefills at [0,1] and
    decodes at [1,2] (freeing its 51 blocks), B prefills at [2,3] and decodes at [3,4]."""
    from pipeline.sim.config import EngineConfig
    from pipeline.sim.engine import simulate

    for watermark, first, finish in ((0.0, [1, 1], [2, 2]), (0.1, [1, 3], [2, 4])):
        cfg = EngineConfig(
            kv_capacity_tokens=100,
            max_batched_tokens=128,
            chunked_prefill=False,
            mixed_prefill=False,
            block_size=1,
            admission_watermark=watermark,
        )
        for fast in (True, False):  # the closed-form decode runs honour it too
            res = simulate([0.0, 0.0], [50, 45], [2, 2], cfg, _OneSecond(), fast=fast)
            assert (res.first_token.tolist(), res.finish.tolist()) == (first, finish)


def test_validation_does_not_depend_on_the_worker_count() -> None:
    """The held-out calibrations run in worker processes; each is deterministic, so one worker
    and two give the same rows (two small synthetic runs of Llama-3.1-8B on an H100)."""
    from pipeline import catalog
    from pipeline.physics import StepCost
    from pipeline.sim.config import EngineConfig
    from pipeline.sim.engine import simulate

    rng = np.random.default_rng(7)
    cost = StepCost(catalog.model("meta-llama/Llama-3.1-8B"), catalog.gpu("H100-SXM"), mfu=0.5,
                    mbu=0.7, step_overhead=4e-3)  # fmt: skip
    runs = []
    for k, rate in enumerate((4.0, 8.0)):
        arr = np.cumsum(rng.exponential(1 / rate, 40))
        p, o = rng.integers(50, 400, 40), rng.integers(2, 60, 40)
        res = simulate(arr, p, o, EngineConfig(kv_capacity_tokens=200_000), cost)
        runs.append(Run(f"r{k}", arr, p, o, res.first_token - arr, res.finish - arr))
    dep = Deployment("meta-llama/Llama-3.1-8B", "H100-SXM", engine="vllm", engine_version="0.19")
    one, _ = validate_deployment(dep, runs, workers=1)
    two, _ = validate_deployment(dep, runs, workers=2)
    assert one == two and len(one) == 2 * 2 * 7  # in-sample + held out, 2 runs x 7 metrics


def test_intervals_hold_a_known_truth() -> None:
    """Oracle: a log our simulator wrote from known parameters (3,000 requests of Llama-3.1-8B
    on an H100 at 8 req/s, vLLM V1), so the truth replays it exactly. The search stops short of
    it (MBU 0.83 for 0.75, per-step overhead 5.7 ms for 4 ms); the Jacobian's intervals were
    +-0.02 % and held none of the five true values. The jackknife's hold four on this seed
    (13 of 15 over three logs, docs/calibration.md): the step overhead's bias is the search's,
    which no resampling sees, so it is asserted outside, not hidden."""
    from tests.fixtures.calibration_data import TRUTH as truth
    from tests.fixtures.calibration_data import synthetic_log

    dep, runs = synthetic_log(3000, seed=1)
    inside = {
        k: cal.ci[k][0] <= v <= cal.ci[k][1]
        for cal in [calibrate(runs, dep)]
        for k, v in truth.items()
    }
    assert inside == {k: k != "step_overhead_s" for k in truth}, inside
    narrow = calibrate(runs, dep, intervals=False)
    assert not any(narrow.ci[k][0] <= v <= narrow.ci[k][1] for k, v in truth.items())


@needs_shared
def test_replay_as_recorded_uses_the_calibration(tmp_path) -> None:
    """Fit and replay make the same choice: `pipeline replay --compare` of the RTX 4090 run after
    `pipeline fit` replays it with the calibrated costs, scheduler (vllm-v1) and recorded KV;
    p50/p90 TTFT and TPOT within 4 % (measured: worst 3.5 %, the p90 TPOT; the issue's trial
    found 45-62 % / 20-29 % before)."""
    from pipeline.commands.fit import _calibrate
    from pipeline.fit.calibration_store import load_calibrations
    from pipeline.replay import load_workload, resolve_scenario, simulate_scenario

    layout = Layout(tmp_path / "wh")
    ingest_paths([RTX], layout)

    class _Quiet:
        def print(self, *a, **k) -> None:
            pass

    _calibrate(layout, _Quiet())
    cals = load_calibrations(connect(layout))
    assert [(c.scheduler, c.kv_tokens) for c in cals] == [("vllm-v1", 41408)]
    from pipeline.replay.config import WhatIf

    (run_id,) = connect(layout).execute("SELECT DISTINCT run_id FROM requests").fetchone()
    workload = load_workload(run_id, layout)
    scenario = resolve_scenario(WhatIf(), workload, {}, cals)
    assert scenario.pools[0].cost.source == "calibration"
    cfg = scenario.pools[0].pool.config
    assert (cfg.chunked_prefill, cfg.max_batched_tokens, cfg.kv_capacity_tokens) == (
        True,
        2048,
        41408,
    )
    res = simulate_scenario(scenario, workload)
    obs_t, obs_e = workload_obs(connect(layout), run_id)
    sim_t = res.first_token - workload.arrival
    for q in (50, 90):
        assert abs(np.percentile(sim_t, q) / np.percentile(obs_t, q) - 1) < 0.04
    sim_tp = (res.finish - res.first_token)[workload.output > 1] / (
        workload.output[workload.output > 1] - 1
    )
    for q in (50, 90):
        assert abs(np.percentile(sim_tp, q) / np.percentile(obs_e, q) - 1) < 0.04


def workload_obs(con, run_id):
    rows = con.execute(
        "SELECT ttft_s, tpot_s FROM requests WHERE run_id = ? ORDER BY t_arrival", [run_id]
    ).fetchall()
    ttft = np.array([r[0] for r in rows])
    tpot = np.array([r[1] for r in rows if r[1] is not None])
    return ttft, tpot


@needs_shared
def test_profile_replay_beside_the_fit(tmp_path) -> None:
    """LLMServingSim's layer profile of the RTX 4090, replayed as measured under the recorded
    scheduler and KV: measured median |error| TTFT 6.5 %, TPOT 8.1 % (docs/accuracy.md)."""
    from pipeline.fit.profile import load_profile
    from pipeline.fit.validate import profile_rows

    deps = _ingest(tmp_path, [RTX])
    ((dep, runs),) = deps.runs.items()
    prof = load_profile(RUNS / "llmservingsim_vllm019" / "profile-RTX4090-Llama-3.1-8B", dep.model)
    rows = profile_rows(dep, runs, prof, "vllm-v1", 41408)
    s = summary(rows, "profile")
    assert s["ttft_median_abs_error"] < 0.07 and s["tpot_median_abs_error"] < 0.09


def test_consistency_generator_trace_first_half_predicts_second(tmp_path) -> None:
    """CONSISTENCY, not accuracy: a trace our own generator wrote (sample_traces/, Llama-2-7B on
    an A100, far from its KV capacity), calibrated on its first half, replays the second half:
    measured median |error| TTFT 2.3 %, TPOT 7.0 %. It once was +600 % TTFT, when a KV capacity
    known only as a lower bound was replayed as if it were the capacity."""
    from tests.conftest import REPO

    deps = _ingest(tmp_path, [REPO / "sample_traces" / "a100-80gb__llama-2-7b.jsonl.gz"])
    ((dep, runs),) = deps.runs.items()
    rows, cals = validate_deployment(dep, runs)
    assert cals[0].kv_status == "lower bound"
    s = summary(rows, "second-half")
    assert s["ttft_median_abs_error"] < 0.05 and s["tpot_median_abs_error"] < 0.10
