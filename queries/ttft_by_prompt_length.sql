-- description: TTFT (s) by prompt-length bucket (powers of two) and model x GPU, successful requests
SELECT
    coalesce(model, '?') AS model,
    coalesce(gpu, '?') AS gpu,
    bucket_lo,
    bucket_hi,
    count(*) AS requests,
    avg(prompt_tokens) AS mean_prompt_tokens,
    avg(ttft_s) AS ttft_mean,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90
FROM (
    SELECT
        *,
        CASE
            WHEN prompt_tokens < 128 THEN 0
            WHEN prompt_tokens < 256 THEN 128
            WHEN prompt_tokens < 512 THEN 256
            WHEN prompt_tokens < 1024 THEN 512
            WHEN prompt_tokens < 2048 THEN 1024
            WHEN prompt_tokens < 4096 THEN 2048
            WHEN prompt_tokens < 8192 THEN 4096
            WHEN prompt_tokens < 16384 THEN 8192
            ELSE 16384
        END AS bucket_lo,
        CASE
            WHEN prompt_tokens < 128 THEN 128
            WHEN prompt_tokens < 256 THEN 256
            WHEN prompt_tokens < 512 THEN 512
            WHEN prompt_tokens < 1024 THEN 1024
            WHEN prompt_tokens < 2048 THEN 2048
            WHEN prompt_tokens < 4096 THEN 4096
            WHEN prompt_tokens < 8192 THEN 8192
            WHEN prompt_tokens < 16384 THEN 16384
            ELSE NULL
        END AS bucket_hi
    FROM requests
    WHERE status = 'ok' AND ttft_s IS NOT NULL
) AS b
GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), bucket_lo, bucket_hi
ORDER BY model, gpu, bucket_lo
