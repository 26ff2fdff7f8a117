-- description: prefill work and time by model x GPU x GPU count x dtypes and new-token octave (for MFU and the roofline)
-- New tokens T = prompt - cached, on top of S = cached tokens. attn_work = sum of T * (S + T / 2),
-- the causal-attention term of the prefill FLOPs (docs/metrics.md). Uses requests with prefill_s.
-- alone_*: the same sums over the requests whose prefill window (first token - prefill_s to first
-- token) overlaps no other request's window in the same run, deployment and server. Their time
-- is their own work, not shared with other prompts' chunks (0 where the log has no clock).
WITH ok AS (
    SELECT
        concat_ws('|', run_id, deployment) AS clock_domain,
        coalesce(server, '?') AS server,
        request_id,
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype,
        coalesce(kv_dtype, 'bf16') AS kv_dtype,
        prompt_tokens - coalesce(cached_tokens, 0) AS new_tokens,
        coalesce(cached_tokens, 0) AS cached_tokens,
        prefill_s,
        t_arrival + ttft_s - prefill_s AS t_start,
        t_arrival + ttft_s AS t_end
    FROM requests
    WHERE status = 'ok' AND prefill_s IS NOT NULL AND prefill_s > 0
),
ordered AS (
    SELECT
        *,
        max(t_end) OVER (
            PARTITION BY clock_domain, server ORDER BY t_start, request_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end,
        lead(t_start) OVER (
            PARTITION BY clock_domain, server ORDER BY t_start, request_id
        ) AS next_start
    FROM ok
),
flagged AS (
    SELECT
        *,
        CASE
            WHEN t_start IS NOT NULL
                AND (prev_end IS NULL OR prev_end <= t_start)
                AND (next_start IS NULL OR next_start >= t_end)
            THEN 1 ELSE 0
        END AS alone,
        CAST(new_tokens AS DOUBLE) * (cached_tokens + new_tokens / 2.0) AS attn
    FROM ordered
)
SELECT
    model,
    gpu,
    gpu_count,
    weight_dtype,
    kv_dtype,
    power(2, floor(ln(greatest(new_tokens, 1)) / ln(2))) AS new_tokens_lo,
    count(*) AS requests,
    sum(new_tokens) AS new_tokens,
    sum(cached_tokens) AS cached_tokens,
    sum(attn) AS attn_work,
    sum(prefill_s) AS prefill_s,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY prefill_s) AS prefill_p50,
    sum(alone) AS alone_requests,
    sum(alone * new_tokens) AS alone_new_tokens,
    sum(alone * cached_tokens) AS alone_cached_tokens,
    sum(alone * attn) AS alone_attn_work,
    sum(alone * prefill_s) AS alone_prefill_s
FROM flagged
GROUP BY 1, 2, 3, 4, 5, 6
ORDER BY 1, 2, 3, 4, 5, 6
