-- description: latency against load: per run of a deployment with runs at several loads, achieved request rate, output throughput and p50/p90/p99 TTFT and TPOT
-- Achieved rate = successful requests / run time (last finish minus first arrival, on the run's
-- own clock), as the benchmarks' "request throughput"; output throughput = output tokens / run
-- time. Only deployments (the deployment key, requests.deployment) with two runs or more: one
-- run is not a curve. Runs without arrival times have no run time and are left out.
WITH ok AS (
    SELECT *
    FROM requests
    WHERE status = 'ok' AND ttft_s IS NOT NULL AND t_arrival IS NOT NULL
),
per_run AS (
    SELECT
        deployment,
        run_id,
        any_value(coalesce(model, '?')) AS model,
        any_value(coalesce(gpu, '?')) AS gpu,
        any_value(coalesce(gpu_count, 1)) AS gpu_count,
        any_value(coalesce(weight_dtype, 'bf16')) AS weight_dtype,
        count(*) AS requests,
        max(t_arrival + e2e_s) - min(t_arrival) AS duration_s,
        sum(output_tokens) AS output_tokens,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p99,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p99
    FROM ok
    GROUP BY deployment, run_id
),
curves AS (
    SELECT deployment FROM per_run WHERE duration_s > 0 GROUP BY deployment HAVING count(*) >= 2
)
SELECT
    p.deployment, p.run_id, p.model, p.gpu, p.gpu_count, p.weight_dtype, p.requests,
    p.duration_s,
    p.requests / p.duration_s AS request_rate,
    p.output_tokens / p.duration_s AS output_throughput,
    p.ttft_p50, p.ttft_p90, p.ttft_p99, p.tpot_p50, p.tpot_p90, p.tpot_p99
FROM per_run AS p
JOIN curves AS c ON c.deployment = p.deployment
WHERE p.duration_s > 0
ORDER BY p.deployment, request_rate
