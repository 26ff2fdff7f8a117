-- description: distributions per deployment: quantiles (p1 ... p99.9) of TTFT, TPOT, ITL, E2E (s) and of prompt and output lengths (tokens), for CDFs
-- Columns q00..q13 are the quantiles at p = 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999 (linear interpolation).
-- ITL: gaps between single-token emissions (streamed chunks of several tokens are not one token's gap).
    SELECT
        'ttft' AS metric,
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY ttft_s) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY ttft_s) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY ttft_s) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY ttft_s) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY ttft_s) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY ttft_s) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY ttft_s) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY ttft_s) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY ttft_s) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_s) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_s) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY ttft_s) AS q13
    FROM requests
    WHERE status = 'ok' AND ttft_s IS NOT NULL
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), coalesce(gpu_count, 1),
        coalesce(weight_dtype, 'bf16'), coalesce(kv_dtype, 'bf16')
UNION ALL
    SELECT
        'tpot' AS metric,
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY tpot_s) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY tpot_s) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY tpot_s) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY tpot_s) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY tpot_s) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY tpot_s) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY tpot_s) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY tpot_s) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY tpot_s) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY tpot_s) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_s) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY tpot_s) AS q13
    FROM requests
    WHERE status = 'ok' AND tpot_s IS NOT NULL
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), coalesce(gpu_count, 1),
        coalesce(weight_dtype, 'bf16'), coalesce(kv_dtype, 'bf16')
UNION ALL
    SELECT
        'e2e' AS metric,
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY e2e_s) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY e2e_s) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY e2e_s) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY e2e_s) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY e2e_s) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY e2e_s) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_s) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY e2e_s) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY e2e_s) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY e2e_s) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_s) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY e2e_s) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_s) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY e2e_s) AS q13
    FROM requests
    WHERE status = 'ok' AND e2e_s IS NOT NULL
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), coalesce(gpu_count, 1),
        coalesce(weight_dtype, 'bf16'), coalesce(kv_dtype, 'bf16')
UNION ALL
    SELECT
        'itl' AS metric,
        coalesce(r.model, '?') AS model, coalesce(r.gpu, '?') AS gpu, coalesce(r.gpu_count, 1) AS gpu_count,
        coalesce(r.weight_dtype, 'bf16') AS weight_dtype, coalesce(r.kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY t.gap_s) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY t.gap_s) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY t.gap_s) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY t.gap_s) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY t.gap_s) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY t.gap_s) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY t.gap_s) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY t.gap_s) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY t.gap_s) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY t.gap_s) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY t.gap_s) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY t.gap_s) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY t.gap_s) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY t.gap_s) AS q13
    FROM tokens AS t JOIN requests AS r ON r.run_id = t.run_id AND r.request_id = t.request_id
    WHERE r.status = 'ok' AND t.gap_s IS NOT NULL AND t.n_tokens = 1
    GROUP BY coalesce(r.model, '?'), coalesce(r.gpu, '?'), coalesce(r.gpu_count, 1),
        coalesce(r.weight_dtype, 'bf16'), coalesce(r.kv_dtype, 'bf16')
UNION ALL
    SELECT
        'prompt_tokens' AS metric,
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY prompt_tokens) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY prompt_tokens) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY prompt_tokens) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY prompt_tokens) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY prompt_tokens) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY prompt_tokens) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY prompt_tokens) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY prompt_tokens) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY prompt_tokens) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY prompt_tokens) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY prompt_tokens) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY prompt_tokens) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY prompt_tokens) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY prompt_tokens) AS q13
    FROM requests
    WHERE status = 'ok' AND prompt_tokens IS NOT NULL
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), coalesce(gpu_count, 1),
        coalesce(weight_dtype, 'bf16'), coalesce(kv_dtype, 'bf16')
UNION ALL
    SELECT
        'output_tokens' AS metric,
        coalesce(model, '?') AS model, coalesce(gpu, '?') AS gpu, coalesce(gpu_count, 1) AS gpu_count,
        coalesce(weight_dtype, 'bf16') AS weight_dtype, coalesce(kv_dtype, 'bf16') AS kv_dtype,
        count(*) AS n,
        percentile_cont(0.01) WITHIN GROUP (ORDER BY output_tokens) AS q00,
        percentile_cont(0.05) WITHIN GROUP (ORDER BY output_tokens) AS q01,
        percentile_cont(0.1) WITHIN GROUP (ORDER BY output_tokens) AS q02,
        percentile_cont(0.2) WITHIN GROUP (ORDER BY output_tokens) AS q03,
        percentile_cont(0.3) WITHIN GROUP (ORDER BY output_tokens) AS q04,
        percentile_cont(0.4) WITHIN GROUP (ORDER BY output_tokens) AS q05,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY output_tokens) AS q06,
        percentile_cont(0.6) WITHIN GROUP (ORDER BY output_tokens) AS q07,
        percentile_cont(0.7) WITHIN GROUP (ORDER BY output_tokens) AS q08,
        percentile_cont(0.8) WITHIN GROUP (ORDER BY output_tokens) AS q09,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY output_tokens) AS q10,
        percentile_cont(0.95) WITHIN GROUP (ORDER BY output_tokens) AS q11,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY output_tokens) AS q12,
        percentile_cont(0.999) WITHIN GROUP (ORDER BY output_tokens) AS q13
    FROM requests
    WHERE status = 'ok' AND output_tokens IS NOT NULL
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), coalesce(gpu_count, 1),
        coalesce(weight_dtype, 'bf16'), coalesce(kv_dtype, 'bf16')
ORDER BY metric, model, gpu, gpu_count, weight_dtype, kv_dtype
