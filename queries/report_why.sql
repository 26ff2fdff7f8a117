-- description: per deployment, the observed figures the report's "why" paragraph is made of: TTFT/TPOT percentiles, queueing's share of the slowest tenth's TTFT, run time, mean requests in flight, output throughput
-- Run time is summed over the deployment's runs with arrival times (last finish minus first
-- arrival, each on its own clock); runs without arrival times count in unclocked_runs and add
-- nothing to run time, in-flight or throughput (those are NULL when no run has a clock). Mean in
-- flight is Little's law: the successful requests' summed E2E over the run time. The queue share
-- is sum(queue) / sum(TTFT) over the slowest 10 % (TTFT >= p90) that log a scheduled time.
WITH ok AS (
    SELECT *
    FROM requests
    WHERE status = 'ok' AND ttft_s IS NOT NULL
),
lat AS (
    SELECT
        deployment,
        any_value(coalesce(model, '?')) AS model,
        any_value(coalesce(gpu, '?')) AS gpu,
        any_value(coalesce(gpu_count, 1)) AS gpu_count,
        any_value(coalesce(weight_dtype, 'bf16')) AS weight_dtype,
        any_value(coalesce(kv_dtype, 'bf16')) AS kv_dtype,
        any_value(engine) AS engine,
        count(*) AS requests,
        count(DISTINCT run_id) AS runs,
        count(queue_s) AS with_queue,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
        avg(prompt_tokens) AS prompt_mean,
        avg(output_tokens) AS output_mean
    FROM ok
    GROUP BY deployment
),
slow AS (
    SELECT
        ok.deployment,
        sum(ok.queue_s) / nullif(sum(ok.ttft_s), 0) AS slow_queue_share,
        count(*) AS slow_with_queue
    FROM ok
    JOIN lat ON lat.deployment = ok.deployment
    WHERE ok.ttft_s >= lat.ttft_p90 AND ok.queue_s IS NOT NULL
    GROUP BY ok.deployment
),
per_run AS (
    SELECT
        deployment,
        run_id,
        max(t_arrival + e2e_s) - min(t_arrival) AS duration_s,
        sum(e2e_s) AS busy_s,
        sum(output_tokens) AS output_tokens
    FROM ok
    GROUP BY deployment, run_id
),
clocked AS (
    SELECT
        deployment,
        sum(CASE WHEN duration_s > 0 THEN duration_s END) AS duration_s,
        sum(CASE WHEN duration_s > 0 THEN busy_s END) AS busy_s,
        sum(CASE WHEN duration_s > 0 THEN output_tokens END) AS output_tokens,
        sum(CASE WHEN duration_s IS NULL THEN 1 ELSE 0 END) AS unclocked_runs
    FROM per_run
    GROUP BY deployment
)
SELECT
    lat.*,
    slow.slow_queue_share,
    coalesce(slow.slow_with_queue, 0) AS slow_with_queue,
    clocked.duration_s,
    clocked.busy_s / clocked.duration_s AS mean_in_flight,
    clocked.output_tokens / clocked.duration_s AS output_tokens_per_s,
    clocked.unclocked_runs
FROM lat
LEFT JOIN slow ON slow.deployment = lat.deployment
LEFT JOIN clocked ON clocked.deployment = lat.deployment
ORDER BY lat.requests DESC, lat.deployment
