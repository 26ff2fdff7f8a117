-- description: Fitted MFU and MBU (with 95% intervals) and overheads by GPU x model x GPU count x phase, from cost_models (run `pipeline fit` first)
SELECT
    gpu,
    model,
    gpu_count,
    weight_dtype,
    phase,
    count(*) AS configurations,
    sum(n) AS observations,
    avg(mfu) AS mfu,
    min(mfu_ci_low) AS mfu_ci_low,
    max(mfu_ci_high) AS mfu_ci_high,
    avg(mbu) AS mbu,
    min(mbu_ci_low) AS mbu_ci_low,
    max(mbu_ci_high) AS mbu_ci_high,
    avg(step_overhead) AS step_overhead_s,
    avg(seq_overhead) AS seq_overhead_s,
    max(mape_test) AS worst_mape_test
FROM cost_models
GROUP BY gpu, model, gpu_count, weight_dtype, phase
ORDER BY gpu, model, gpu_count, weight_dtype, phase
