-- description: TPOT (s/token) by decode batch size, estimated from the logs, by model x GPU x GPU count x dtypes
-- The batch a request saw is estimated as the number of requests decoding on the same server
-- (same run when clocks are relative) when it started and when it finished decoding, averaged.
-- Buckets are half-octaves of that batch (1, 1.4, 2, 2.8, 4, ...). Context = prompt + output / 2.
WITH ok AS (
    SELECT
        run_id,
        request_id,
        CASE WHEN clock = 'unix' THEN '' ELSE run_id END AS clock_domain,
        coalesce(server, '?') AS server,
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype,
        coalesce(kv_dtype, 'bf16') AS kv_dtype,
        t_arrival + ttft_s AS t_first,
        t_arrival + e2e_s AS t_finish,
        tpot_s,
        prompt_tokens + output_tokens / 2.0 AS context_tokens
    FROM requests
    WHERE status = 'ok' AND tpot_s IS NOT NULL AND ttft_s IS NOT NULL AND e2e_s IS NOT NULL
),
events AS (
    SELECT run_id, request_id, clock_domain, server, t_first AS t, 1 AS delta FROM ok
    UNION ALL
    SELECT run_id, request_id, clock_domain, server, t_finish AS t, -1 AS delta FROM ok
),
running AS (
    SELECT
        run_id,
        request_id,
        delta,
        sum(delta) OVER (
            PARTITION BY clock_domain, server
            ORDER BY t, delta
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS decoding
    FROM events
),
per_request AS (
    SELECT
        run_id,
        request_id,
        (sum(CASE WHEN delta = 1 THEN decoding ELSE 0 END)
            + sum(CASE WHEN delta = -1 THEN decoding + 1 ELSE 0 END)) / 2.0 AS batch
    FROM running
    GROUP BY run_id, request_id
),
bucketed AS (
    SELECT
        ok.*,
        pr.batch,
        floor(2 * ln(greatest(pr.batch, 1)) / ln(2)) AS bucket
    FROM ok
    JOIN per_request AS pr ON pr.run_id = ok.run_id AND pr.request_id = ok.request_id
)
SELECT
    model,
    gpu,
    gpu_count,
    weight_dtype,
    kv_dtype,
    power(2, bucket / 2.0) AS batch_lo,
    count(*) AS requests,
    avg(batch) AS batch_mean,
    avg(context_tokens) AS context_mean,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p90
FROM bucketed
GROUP BY model, gpu, gpu_count, weight_dtype, kv_dtype, bucket
ORDER BY model, gpu, gpu_count, weight_dtype, kv_dtype, bucket
