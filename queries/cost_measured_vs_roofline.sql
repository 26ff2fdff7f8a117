-- description: Measured vs roofline-predicted (100% MFU/MBU, no overheads) and fitted prefill time by prompt-length bucket and decode step time (TPOT) by batch bucket
-- param max_context: 1000000 (ignore requests with longer prompts)
-- Prefill rows: requests with a measured prefill_s (queue known), bucketed by prompt length (powers
-- of two). Decode rows: TPOT bucketed by the decode batch, estimated as the requests decoding on
-- the same server in the same run and deployment when the request's decode started (never across
-- runs that share a server name; none for a run without arrival times).
WITH cm AS (
    SELECT * FROM cost_models
),
req AS (
    SELECT
        r.*,
        concat_ws('|', r.run_id, r.deployment) AS clock_domain,
        coalesce(r.server, '?') AS srv,
        coalesce(r.gpu_count, 1) AS gc
    FROM requests AS r
    WHERE r.status = 'ok' AND r.prompt_tokens <= $max_context
),
pre AS (
    SELECT
        req.model, req.gpu, req.gc AS gpu_count,
        CASE
            WHEN prompt_tokens < 128 THEN 0
            WHEN prompt_tokens < 256 THEN 128
            WHEN prompt_tokens < 512 THEN 256
            WHEN prompt_tokens < 1024 THEN 512
            WHEN prompt_tokens < 2048 THEN 1024
            WHEN prompt_tokens < 4096 THEN 2048
            WHEN prompt_tokens < 8192 THEN 4096
            ELSE 8192
        END AS bucket_lo,
        req.prefill_s AS measured_s,
        greatest(
            (prompt_tokens - coalesce(cached_tokens, 0)) * cm.roof_s_per_token
                + (prompt_tokens - coalesce(cached_tokens, 0))
                * (coalesce(cached_tokens, 0) + (prompt_tokens - coalesce(cached_tokens, 0)) / 2.0)
                * cm.roof_s_per_pair,
            cm.roof_weights_s + prompt_tokens * cm.roof_kv_s_per_token
        ) AS roofline_s,
        greatest(
            ((prompt_tokens - coalesce(cached_tokens, 0)) * cm.roof_s_per_token
                + (prompt_tokens - coalesce(cached_tokens, 0))
                * (coalesce(cached_tokens, 0) + (prompt_tokens - coalesce(cached_tokens, 0)) / 2.0)
                * cm.roof_s_per_pair) / nullif(cm.mfu, 0),
            (cm.roof_weights_s + prompt_tokens * cm.roof_kv_s_per_token) / nullif(cm.mbu, 0)
        ) + cm.step_overhead + cm.seq_overhead AS fitted_s
    FROM req
    JOIN cm
      ON cm.phase = 'prefill' AND cm.deployment = req.deployment
    WHERE req.prefill_s IS NOT NULL AND req.prefill_s > 0
),
ev AS (
    SELECT clock_domain, srv, run_id, request_id, t_arrival + ttft_s AS t, 1 AS delta
    FROM req WHERE tpot_s IS NOT NULL AND e2e_s IS NOT NULL AND t_arrival IS NOT NULL
    UNION ALL
    SELECT clock_domain, srv, run_id, request_id, t_arrival + e2e_s AS t, -1 AS delta
    FROM req WHERE tpot_s IS NOT NULL AND e2e_s IS NOT NULL AND t_arrival IS NOT NULL
),
run AS (
    SELECT
        run_id, request_id, delta,
        sum(delta) OVER (
            PARTITION BY clock_domain, srv ORDER BY t, delta
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS decoding
    FROM ev
),
dec AS (
    SELECT
        req.model, req.gpu, req.gc AS gpu_count,
        CASE
            WHEN run.decoding < 2 THEN 1
            WHEN run.decoding < 4 THEN 2
            WHEN run.decoding < 8 THEN 4
            WHEN run.decoding < 16 THEN 8
            WHEN run.decoding < 32 THEN 16
            WHEN run.decoding < 64 THEN 32
            WHEN run.decoding < 128 THEN 64
            WHEN run.decoding < 256 THEN 128
            ELSE 256
        END AS bucket_lo,
        req.tpot_s AS measured_s,
        greatest(
            run.decoding * cm.roof_s_per_token
                + run.decoding * (req.prompt_tokens + req.output_tokens / 2.0) * cm.roof_s_per_pair,
            cm.roof_weights_s
                + run.decoding * (req.prompt_tokens + req.output_tokens / 2.0) * cm.roof_kv_s_per_token
        ) AS roofline_s,
        greatest(
            (run.decoding * cm.roof_s_per_token
                + run.decoding * (req.prompt_tokens + req.output_tokens / 2.0) * cm.roof_s_per_pair)
                / nullif(cm.mfu, 0),
            (cm.roof_weights_s
                + run.decoding * (req.prompt_tokens + req.output_tokens / 2.0)
                * cm.roof_kv_s_per_token) / nullif(cm.mbu, 0)
        ) + cm.step_overhead + cm.seq_overhead * run.decoding AS fitted_s
    FROM req
    JOIN run ON run.run_id = req.run_id AND run.request_id = req.request_id AND run.delta = 1
    JOIN cm
      ON cm.phase = 'decode' AND cm.deployment = req.deployment
),
both_phases AS (
    SELECT 'prefill' AS phase, 'prompt_tokens' AS bucket_by, * FROM pre
    UNION ALL
    SELECT 'decode' AS phase, 'batch' AS bucket_by, * FROM dec
)
SELECT
    phase,
    model,
    gpu,
    gpu_count,
    bucket_by,
    bucket_lo,
    count(*) AS requests,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY measured_s) AS measured_p50_s,
    avg(measured_s) AS measured_mean_s,
    avg(roofline_s) AS roofline_mean_s,
    avg(fitted_s) AS fitted_mean_s,
    -- nullif: DuckDB gives inf for x / 0 and Spark NULL; NULL on both keeps them equal.
    avg(measured_s) / nullif(avg(roofline_s), 0) AS measured_over_roofline
FROM both_phases
GROUP BY phase, model, gpu, gpu_count, bucket_by, bucket_lo
ORDER BY phase DESC, model, gpu, gpu_count, bucket_lo
