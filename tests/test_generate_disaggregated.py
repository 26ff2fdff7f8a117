"""`pipeline generate --disaggregation FILE`: a DistServe-style trace that `pipeline ingest`
records as disaggregated and `pipeline fit` models with the set-up that wrote it."""

from __future__ import annotations

import json

import numpy as np

from pipeline import catalog
from pipeline.fit.calibrate import recorded_scheduler, simulate_run
from pipeline.fit.calibration_store import load_deployments
from pipeline.ingest.run import ingest_paths
from pipeline.sim.config import kv_capacity_tokens
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.warehouse.layout import Layout
from pipeline.warehouse.views import connect

KEYS = {"prefill_tp": 2, "decode_tp": 1, "kv_bandwidth_gbps": 300.0, "kv_latency_s": 0.0005,
        "decode_max_num_seqs": 64}  # fmt: skip


def _trace(tmp_path, n=400, **kw):
    path = tmp_path / "ds.jsonl"
    spec = GenerateSpec(model="facebook/opt-13b", gpu="A100-80GB", requests=n, seed=2,
                        disaggregation=KEYS, **kw)  # fmt: skip
    truth = generate(spec, path)
    return path, truth


def test_disaggregated_trace_keeps_the_deployment_rules(tmp_path) -> None:
    """From the definition, on the written file: the first token comes from the prefill
    instance, the second only after the prompt's KV crossed the link (>= its pull time), a
    one-token request ends at its first token, and the manifest beside the trace names the
    deployment."""
    path, truth = _trace(tmp_path)
    df = json.loads("[" + ",".join(path.read_text().splitlines()) + "]")
    assert len(df) == 400 and truth["disaggregation"] == KEYS
    assert {r["gpu_count"] for r in df} == {3}  # 2 prefill GPUs + 1 decode GPU
    from pipeline.physics import kv_bytes_per_token

    kvb = kv_bytes_per_token(catalog.model("facebook/opt-13b"), "bf16")
    gaps = []
    for r in df:
        t = r["token_times"]
        assert len(t) == r["output_tokens"]
        ttft = r["first_token_ts"] - r["arrival_ts"]
        assert abs(t[0] - ttft) < 2e-6
        if r["output_tokens"] == 1:
            assert abs(r["finish_ts"] - r["first_token_ts"]) < 2e-6
        else:
            pull = 0.0005 + kvb * r["prompt_tokens"] / 300e9
            gaps.append((t[1] - t[0]) - pull)
    assert min(gaps) >= -2e-6
    assert "[disaggregation]" in path.with_name("ds.jsonl.run.toml").read_text()


def test_consistency_fit_replays_a_generated_disaggregated_trace_under_its_truth(tmp_path):
    """Consistency (our simulator against itself): ingest finds the manifest, the fit reads the
    deployment as DistServe, and its replay with the generator's true parameters (the link at
    its full bandwidth, the decode instance's catalog KV) gives back every request's times to
    the trace's microsecond rounding: generate and fit share one set-up."""
    path, truth = _trace(tmp_path, token_times=False)
    layout = Layout(tmp_path / "wh")
    ingest_paths([path], layout)
    ((dep, runs),) = load_deployments(connect(layout)).runs.items()
    assert recorded_scheduler(dep) == "distserve" and dep.disagg()["prefill_tp"] == 2
    c = truth["cost"]
    v = {"mfu": c["mfu"], "mbu": c["mbu"], "overlap": c["overlap"],
         "step_overhead_s": c["step_overhead"], "seq_overhead_s": c["seq_overhead"],
         "kv_margin": 0.0, "kv_link_share": 1.0}  # fmt: skip
    model, gpu = catalog.model(dep.model), catalog.gpu(dep.gpu)
    kv = kv_capacity_tokens(model, gpu, tp=1, weight_dtype="bf16", kv_dtype="bf16")
    r = runs[0]
    ttft, e2e = simulate_run(v, dep, "distserve", r, kv, int((r.prompt + r.output).max()))
    np.testing.assert_allclose(ttft, r.ttft, atol=3e-6)
    np.testing.assert_allclose(e2e, r.e2e, atol=3e-6)


def test_truth_describes_the_instances_and_bad_flags_are_usage_errors(tmp_path) -> None:
    """The truth file holds what was simulated (both instances' TP, replicas, config and cost;
    the GPUs they add up to), a model too big for one GPU needs no --gpu-count when the
    instances hold it, and flags that do not go together end in a usage error (exit 2), not a
    traceback."""
    from click.testing import CliRunner

    from pipeline.cli import main

    _, truth = _trace(tmp_path)
    inst = truth["instances"]
    assert truth["gpu_count"] == 3 and (inst["prefill"]["tp"], inst["decode"]["tp"]) == (2, 1)
    assert inst["decode"]["config"]["max_num_seqs"] == 64  # KEYS' decode_max_num_seqs
    assert inst["prefill"]["config"]["chunked_prefill"] is False
    assert inst["prefill"]["cost"]["tp"] == 2 and inst["decode"]["cost"]["tp"] == 1
    tp4 = {"prefill_tp": 4, "decode_tp": 4}
    big = GenerateSpec(
        model="facebook/opt-66b", gpu="A100-80GB", requests=50, seed=1, disaggregation=tp4,
        token_times=False,
    )  # fmt: skip
    assert generate(big, tmp_path / "big.jsonl")["gpu_count"] == 8
    keys = tmp_path / "d.toml"
    keys.write_text("[disaggregation]\nprefill_tp = 2\ndecode_tp = 1\n")
    for extra in (["--replicas", "2"], ["--batching", "static"], ["--max-seq-len", "4096"]):
        args = ["generate", "--out", str(tmp_path / "x.jsonl"), "-n", "20", "--model",
                "facebook/opt-13b", "--gpu", "A100-80GB", "--disaggregation", str(keys),
                *extra]  # fmt: skip
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, (extra, res.output)
