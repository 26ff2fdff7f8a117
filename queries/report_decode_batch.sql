-- description: TPOT (s/token) by decode batch size, estimated from the logs, by model x GPU x GPU count x dtypes
-- param bin_s: 1.0 (time resolution of the batch estimate, seconds)
-- The batch a request saw is estimated as the number of requests of the same run and deployment
-- decoding on the same server at the end of the bin_s-second bin in which it started decoding,
-- itself included: requests started minus requests finished up to that bin. Never across runs or
-- deployments that share a server name (twelve sample runs all on `sim-0` are twelve batches).
-- Buckets are half-octaves of that batch (1, 1.4, 2, 2.8, 4, ...). Context = prompt + output / 2.
-- itl_p50: the median over the bucket's requests of each request's median gap between
-- single-token emissions (null without per-token times). A decode step that also carried a
-- prefill chunk is one gap among a request's dozens, so the median is the plain decode step;
-- TPOT (a mean) includes those steps.
WITH itl AS (
    SELECT run_id, request_id, percentile_cont(0.5) WITHIN GROUP (ORDER BY gap_s) AS itl_median
    FROM tokens
    WHERE gap_s IS NOT NULL AND n_tokens = 1
    GROUP BY run_id, request_id
    HAVING count(*) >= 2
),
ok AS (
    SELECT
        concat_ws('|', r.run_id, deployment) AS clock_domain,
        coalesce(server, '?') AS server,
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype,
        coalesce(kv_dtype, 'bf16') AS kv_dtype,
        CAST(floor((t_arrival + ttft_s) / $bin_s) AS BIGINT) AS bin_first,
        CAST(floor((t_arrival + e2e_s) / $bin_s) AS BIGINT) AS bin_finish,
        tpot_s,
        itl.itl_median,
        prompt_tokens + output_tokens / 2.0 AS context_tokens
    FROM requests AS r
    LEFT JOIN itl ON itl.run_id = r.run_id AND itl.request_id = r.request_id
    -- No batch without a common clock (clock 'request': t_arrival is null).
    WHERE status = 'ok' AND tpot_s IS NOT NULL AND ttft_s IS NOT NULL AND e2e_s IS NOT NULL
        AND t_arrival IS NOT NULL
),
changes AS (
    SELECT clock_domain, server, bin_first AS bin, count(*) AS delta
    FROM ok
    GROUP BY clock_domain, server, bin_first
    UNION ALL
    SELECT clock_domain, server, bin_finish AS bin, -count(*) AS delta
    FROM ok
    GROUP BY clock_domain, server, bin_finish
),
per_bin AS (
    SELECT clock_domain, server, bin, sum(delta) AS delta
    FROM changes
    GROUP BY clock_domain, server, bin
),
running AS (
    SELECT
        clock_domain,
        server,
        bin,
        sum(delta) OVER (
            PARTITION BY clock_domain, server
            ORDER BY bin
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS decoding
    FROM per_bin
),
bucketed AS (
    SELECT
        ok.*,
        greatest(running.decoding, 1) AS batch,
        floor(2 * ln(greatest(running.decoding, 1)) / ln(2)) AS bucket
    FROM ok
    JOIN running
        ON running.clock_domain = ok.clock_domain
        AND running.server = ok.server
        AND running.bin = ok.bin_first
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
    percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p90,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY itl_median) AS itl_p50
FROM bucketed
GROUP BY model, gpu, gpu_count, weight_dtype, kv_dtype, bucket
ORDER BY model, gpu, gpu_count, weight_dtype, kv_dtype, bucket
