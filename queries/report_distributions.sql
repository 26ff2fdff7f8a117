-- description: distributions per deployment, and per run where a deployment has 2-6 runs: quantiles (p1 ... p99.9) of TTFT, TPOT, ITL, E2E (s) and of prompt and output lengths (tokens), for CDFs
-- Columns q00..q13 are the quantiles at p = 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999 (linear interpolation).
-- run is '' for the deployment's curve (all its runs) and the run id for a per-run curve, given
-- only where the deployment has a handful of runs (2 to 6: a rate sweep, a before/after).
-- ITL: gaps between single-token emissions (streamed chunks of several tokens are not one token's gap).
WITH ok AS (
    SELECT
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        run_id, request_id, ttft_s, tpot_s, e2e_s, prompt_tokens, output_tokens
    FROM requests
    WHERE status = 'ok'
),
vals AS (
    SELECT model, gpu, gpu_count, weight_dtype, kv_dtype, run_id, 'ttft' AS metric, ttft_s AS x
    FROM ok WHERE ttft_s IS NOT NULL
    UNION ALL
    SELECT model, gpu, gpu_count, weight_dtype, kv_dtype, run_id, 'tpot' AS metric, tpot_s AS x
    FROM ok WHERE tpot_s IS NOT NULL
    UNION ALL
    SELECT model, gpu, gpu_count, weight_dtype, kv_dtype, run_id, 'e2e' AS metric, e2e_s AS x
    FROM ok WHERE e2e_s IS NOT NULL
    UNION ALL
    SELECT
        model, gpu, gpu_count, weight_dtype, kv_dtype, run_id, 'prompt_tokens' AS metric,
        CAST(prompt_tokens AS DOUBLE) AS x
    FROM ok WHERE prompt_tokens IS NOT NULL
    UNION ALL
    SELECT
        model, gpu, gpu_count, weight_dtype, kv_dtype, run_id, 'output_tokens' AS metric,
        CAST(output_tokens AS DOUBLE) AS x
    FROM ok WHERE output_tokens IS NOT NULL
    UNION ALL
    SELECT
        ok.model, ok.gpu, ok.gpu_count, ok.weight_dtype, ok.kv_dtype, ok.run_id,
        'itl' AS metric, t.gap_s AS x
    FROM tokens AS t JOIN ok ON ok.run_id = t.run_id AND ok.request_id = t.request_id
    WHERE t.gap_s IS NOT NULL AND t.n_tokens = 1
),
runs AS (
    SELECT model, gpu, gpu_count, weight_dtype, kv_dtype, count(DISTINCT run_id) AS n_runs
    FROM ok
    GROUP BY model, gpu, gpu_count, weight_dtype, kv_dtype
),
tagged AS (
    SELECT model, gpu, gpu_count, weight_dtype, kv_dtype, '' AS run, metric, x FROM vals
    UNION ALL
    SELECT v.model, v.gpu, v.gpu_count, v.weight_dtype, v.kv_dtype, v.run_id AS run, v.metric, v.x
    FROM vals AS v
    JOIN runs AS r
        ON r.model = v.model AND r.gpu = v.gpu AND r.gpu_count = v.gpu_count
        AND r.weight_dtype = v.weight_dtype AND r.kv_dtype = v.kv_dtype
    WHERE r.n_runs BETWEEN 2 AND 6
)
SELECT
    metric, model, gpu, gpu_count, weight_dtype, kv_dtype, run,
    count(*) AS n,
    percentile_cont(0.01) WITHIN GROUP (ORDER BY x) AS q00,
    percentile_cont(0.05) WITHIN GROUP (ORDER BY x) AS q01,
    percentile_cont(0.1) WITHIN GROUP (ORDER BY x) AS q02,
    percentile_cont(0.2) WITHIN GROUP (ORDER BY x) AS q03,
    percentile_cont(0.3) WITHIN GROUP (ORDER BY x) AS q04,
    percentile_cont(0.4) WITHIN GROUP (ORDER BY x) AS q05,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS q06,
    percentile_cont(0.6) WITHIN GROUP (ORDER BY x) AS q07,
    percentile_cont(0.7) WITHIN GROUP (ORDER BY x) AS q08,
    percentile_cont(0.8) WITHIN GROUP (ORDER BY x) AS q09,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY x) AS q10,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY x) AS q11,
    percentile_cont(0.99) WITHIN GROUP (ORDER BY x) AS q12,
    percentile_cont(0.999) WITHIN GROUP (ORDER BY x) AS q13
FROM tagged
GROUP BY metric, model, gpu, gpu_count, weight_dtype, kv_dtype, run
ORDER BY metric, model, gpu, gpu_count, weight_dtype, kv_dtype, run
