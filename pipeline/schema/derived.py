"""Derived tables: what fit, attribute, validate and replay write next to the observed data.

One Parquet file (or part) per table, replaced atomically by ``warehouse/derived.py``, which
checks every frame against these declarations before writing: a producer cannot add, drop or
retype a column without editing the contract here. Their Arrow and Polars schemas
(``warehouse/arrow.py``) and the exported JSON Schema all come from these tuples.
"""

from __future__ import annotations

from pipeline.schema import deployment
from pipeline.schema.column import I32, I64, B, Column, F, S

_KEY = deployment.columns()
_CI = "95 % interval from the fit's residual Jacobian; null where not identified."


def _param(name: str, unit: str, doc: str) -> tuple[Column, ...]:
    return (
        Column(name, F, unit, doc, nullable=False),
        Column(f"{name}_ci_low", F, unit, _CI),
        Column(f"{name}_ci_high", F, unit, _CI),
    )


COST_MODELS: tuple[Column, ...] = (
    *_KEY,
    Column("tp", I32, "GPUs", "Tensor-parallel degree the step costs assume.", nullable=False),
    Column("phase", S, "", "'prefill' or 'decode'.", nullable=False),
    Column("method", S, "", "Steps rebuilt from 'tokens' or 'requests', or a 'frame' of times."),
    *_param("mfu", "", "Model FLOPs utilisation of the phase's compute term (fraction of peak)."),
    Column("mfu_source", S, "", "'fit', the phase it was borrowed from, or 'default'."),
    *_param("mbu", "", "Memory-bandwidth utilisation of the byte term (fraction of peak)."),
    Column("mbu_source", S, "", "'fit', the phase it was borrowed from, or 'default'."),
    *_param("step_overhead", "s", "Fixed time per engine step (scheduling, launch)."),
    *_param("seq_overhead", "s", "Time per sequence in the step."),
    Column("flash_attention", B, "", "Attention without a materialised score matrix."),
    Column("n", I64, "steps", "Step observations the phase had."),
    Column("n_train", I64, "steps", "Observations fitted."),
    Column("n_test", I64, "steps", "Observations held out (every 5th by hash)."),
    Column("r2_test", F, "", "R^2 on the held-out steps."),
    Column("mape_test", F, "", "Mean |relative error| on the held-out steps (fraction)."),
    Column("mape_all", F, "", "Mean |relative error| on all steps (fraction)."),
    Column("residual_scale", F, "", "Robust scale of the log residuals."),
    Column("frac_compute_bound", F, "", "Share of observed steps whose roofline is compute."),
    Column("attn_s_per_pair", F, "s", "Attention time per query-key pair at the fitted MFU."),
    Column("kv_s_per_token", F, "s", "KV-cache read time per context token at the fitted MBU."),
    Column("compute_s_per_seq", F, "s", "Matmul time per sequence per step at the fitted MFU."),
    Column("weights_s", F, "s", "Weight read time per step at the fitted MBU."),
    Column("roof_s_per_token", F, "s", "Matmul time per token at 100 % MFU (roofline)."),
    Column("roof_s_per_pair", F, "s", "Attention time per query-key pair at 100 % MFU."),
    Column("roof_weights_s", F, "s", "Weight read time per step at 100 % MBU."),
    Column("roof_kv_s_per_token", F, "s", "KV read time per context token at 100 % MBU."),
    Column("critical_batch_roofline", F, "sequences", "Peak FLOP/s / bandwidth batch."),
    Column("critical_batch_fitted", F, "sequences", "Batch where the fitted terms cross."),
    Column("max_batch_seen", F, "sequences", "Largest decode batch the log showed."),
    Column("requests_used", I64, "requests", "Requests the fit read."),
)

CALIBRATION: tuple[Column, ...] = (
    *_KEY,
    Column("scheduler", S, "", "Scheduler replayed: vllm-v0, vllm-v1, ...", nullable=False),
    Column("scheduler_source", S, "", "'recorded' (engine and version) or 'inferred' (best fit)."),
    Column(
        "parameter",
        S,
        "",
        "mfu, mbu, overlap, step_overhead_s, seq_overhead_s, kv_tokens; kv_link_share where "
        "disaggregated (achieved share of the manifest's kv_bandwidth_gbps).",
        False,
    ),
    Column("value", F, "", "Estimate (unit in the parameter's name; efficiencies are fractions)."),
    Column("ci_low", F, "", "95 % interval, from the replay residuals' Jacobian; null if none."),
    Column("ci_high", F, "", "95 % interval upper end; null if none."),
    Column("status", S, "", "fitted | at bound | not identifiable | recorded | lower bound", False),
    Column("runs", I32, "runs", "Runs the calibration replayed."),
    Column("requests", I64, "requests", "Requests it replayed."),
    Column("loss", F, "", "Final objective (robust mean |log error| per request and percentile)."),
    Column("fit_seconds", F, "s", "Wall time of the calibration."),
)

VALIDATION: tuple[Column, ...] = (
    Column("run_id", S, "", "Run replayed.", nullable=False),
    *_KEY,
    Column("scheduler", S, "", "Scheduler replayed.", nullable=False),
    Column("split", S, "", "leave-one-run-out | second-half | in-sample | profile", False),
    Column(
        "metric",
        S,
        "",
        "ttft_p50, ttft_p90, tpot_p50, tpot_p90, e2e_p50, e2e_p90, throughput_tok_s",
        nullable=False,
    ),
    Column("observed", F, "", "From the log (s, or tokens/s for throughput)."),
    Column("replayed", F, "", "From the replay with the model fitted without this data."),
    Column("error", F, "", "replayed / observed - 1."),
    Column("requests", I64, "requests", "Requests replayed."),
)

CLAIMS: tuple[Column, ...] = (
    Column("claim", S, "", "The physics claim tested (docs/claims.md).", nullable=False),
    Column("verdict", S, "", "supported | contradicted | not enough data", nullable=False),
    Column("estimate", F, "", "Point estimate (unit in `unit`)."),
    Column("ci_low", F, "", "95 % interval lower end."),
    Column("ci_high", F, "", "95 % interval upper end."),
    Column("unit", S, "", "Unit of the estimate."),
    Column("n", I64, "requests", "Observations behind the estimate."),
    Column("detail", S, "", "What was measured, in words."),
)

ATTRIBUTION: tuple[Column, ...] = (
    Column("metric", S, "", "Metric compared (mean TTFT, mean TPOT, throughput, ...)."),
    Column("unit", S, "", "Unit of the metric and of the contributions."),
    Column("factor", S, "", "Factor (model, prompt, output, load, hardware, ...) or total."),
    Column("block", S, "", "Block of factors the factor belongs to."),
    Column("changed", B, "", "The factor differs between baseline and candidate."),
    Column("contribution", F, "", "Shapley contribution to the change (metric's unit)."),
    Column("share", F, "", "contribution / total change."),
    Column("before", F, "", "Metric at the baseline."),
    Column("after", F, "", "Metric at the candidate."),
    Column("block_contribution", F, "", "Contribution of the whole block."),
    Column("block_share", F, "", "block_contribution / total change."),
    Column(
        "workload_at_baseline", F, "", "Workload block's effect with the baseline's deployment."
    ),
    Column(
        "workload_at_candidate", F, "", "Workload block's effect with the candidate's deployment."
    ),
    Column(
        "interaction",
        F,
        "",
        "workload_at_candidate - workload_at_baseline: how much the blocks' effects depend on "
        "each other (the symmetric split averages it away; shown so it is not hidden).",
    ),
    Column("baseline", S, "", "The baseline slice as given."),
    Column("candidate", S, "", "The candidate slice as given."),
    Column("method", S, "", "How the counterfactuals were computed."),
)

ATTRIBUTION_REQUESTS: tuple[Column, ...] = (
    Column("run_id", S, "", "Run id."),
    Column("request_id", S, "", "Request id."),
    Column("model", S, "", "Model as logged."),
    Column("gpu", S, "", "Accelerator as logged."),
    Column("gpu_count", I32, "GPUs", "GPUs serving one replica."),
    Column("prompt_tokens", I64, "tokens", "Input tokens."),
    Column("output_tokens", I64, "tokens", "Output tokens."),
    Column("load", F, "requests", "Requests in flight on the server at arrival."),
    Column("ttft_s", F, "s", "Observed TTFT."),
    Column("ttft_queue_s", F, "s", "Part of TTFT spent waiting to be scheduled."),
    Column("ttft_prefill_compute_s", F, "s", "Part of TTFT the fitted prefill step explains."),
    Column("ttft_rest_s", F, "s", "TTFT the two parts above leave unexplained."),
    Column("ttft_rest_covers", S, "", "What ttft_rest_s stands for in this log."),
    Column("decode_s", F, "s", "Observed decode time (finish - first token)."),
    Column("tpot_s", F, "s/token", "Observed TPOT."),
    Column("decode_steps", I64, "steps", "Decode steps (output tokens - 1)."),
    Column("decode_batch", F, "sequences", "Mean decode batch the request shared."),
    Column("decode_context", F, "tokens", "Mean context per sequence in those steps."),
    Column("decode_weights_s", F, "s", "Share of decode time reading weights."),
    Column("decode_kv_s", F, "s", "Share reading the KV cache."),
    Column("decode_compute_s", F, "s", "Share in matmul compute."),
    Column("decode_overhead_s", F, "s", "Share in per-step and per-sequence overheads."),
    Column("decode_interference_s", F, "s", "Decode time the model does not explain."),
    Column("decode_rest_covers", S, "", "What decode_interference_s stands for."),
    Column("fitted", B, "", "A fitted cost model was used (else roofline)."),
    Column("model_params", I64, "parameters", "Model parameters (catalog)."),
)

ATTRIBUTION_ELASTICITIES: tuple[Column, ...] = (
    Column("gpu", S, "", "Accelerator."),
    Column("model", S, "", "Model."),
    Column("metric", S, "", "Latency metric regressed."),
    Column("regressor", S, "", "Variable whose elasticity is estimated."),
    Column("controls", S, "", "Other variables held in the regression."),
    Column("elasticity", F, "", "d log metric / d log regressor."),
    Column("ci_low", F, "", "95 % interval lower end."),
    Column("ci_high", F, "", "95 % interval upper end."),
    Column("std_error", F, "", "Standard error."),
    Column("n", I64, "requests", "Requests in the regression."),
    Column("r2", F, "", "R^2 of the regression."),
)

REPLAY_STEPS: tuple[Column, ...] = (
    Column("run_id", S, "", "Replay run id.", nullable=False),
    Column("pool", S, "", "Instance pool (e.g. prefill / decode when disaggregated)."),
    Column("server", S, "", "Simulated instance."),
    Column("step", I64, "", "0-based step index on the instance."),
    Column("t_start_s", F, "s", "Step start on the replay's clock."),
    Column("t_end_s", F, "s", "Step end."),
    Column("duration_s", F, "s", "t_end_s - t_start_s."),
    Column("batch_size", I64, "sequences", "Sequences in the step."),
    Column("prefill_tokens", I64, "tokens", "Prompt tokens computed in the step."),
    Column("decode_tokens", I64, "tokens", "Tokens decoded in the step."),
    Column("kv_blocks", I64, "blocks", "KV blocks in use after the step."),
    Column("kv_blocks_total", I64, "blocks", "KV blocks of the instance."),
)

DERIVED: dict[str, tuple[Column, ...]] = {
    "cost_models": COST_MODELS,
    "calibration": CALIBRATION,
    "validation": VALIDATION,
    "claims": CLAIMS,
    "attribution": ATTRIBUTION,
    "attribution_requests": ATTRIBUTION_REQUESTS,
    "attribution_elasticities": ATTRIBUTION_ELASTICITIES,
    "replay_steps": REPLAY_STEPS,
}
