-- description: prefill work and time by model x GPU x GPU count x dtypes and new-token octave (for MFU and the roofline)
-- New tokens T = prompt - cached, on top of S = cached tokens. attn_work = sum of T * (S + T / 2),
-- the causal-attention term of the prefill FLOPs (docs/metrics.md). Uses requests with prefill_s.
SELECT
    coalesce(model, '?') AS model,
    coalesce(gpu, '?') AS gpu,
    coalesce(gpu_count, 1) AS gpu_count,
    coalesce(weight_dtype, 'bf16') AS weight_dtype,
    coalesce(kv_dtype, 'bf16') AS kv_dtype,
    power(2, floor(ln(greatest(prompt_tokens - coalesce(cached_tokens, 0), 1)) / ln(2))) AS new_tokens_lo,
    count(*) AS requests,
    sum(prompt_tokens - coalesce(cached_tokens, 0)) AS new_tokens,
    sum(coalesce(cached_tokens, 0)) AS cached_tokens,
    sum(
        CAST(prompt_tokens - coalesce(cached_tokens, 0) AS DOUBLE)
        * (coalesce(cached_tokens, 0) + (prompt_tokens - coalesce(cached_tokens, 0)) / 2.0)
    ) AS attn_work,
    sum(prefill_s) AS prefill_s,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY prefill_s) AS prefill_p50
FROM requests
WHERE status = 'ok' AND prefill_s IS NOT NULL AND prefill_s > 0
GROUP BY 1, 2, 3, 4, 5, 6
ORDER BY 1, 2, 3, 4, 5, 6
