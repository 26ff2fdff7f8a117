-- description: per deployment, successful requests of runs with arrival times by new prompt tokens (prompt - cached), for the prefill work a fitted cost model puts on the run time
SELECT
    deployment,
    prompt_tokens - coalesce(cached_tokens, 0) AS new_tokens,
    avg(coalesce(cached_tokens, 0)) AS cached_mean,
    count(*) AS requests
FROM requests
WHERE status = 'ok' AND ttft_s IS NOT NULL AND t_arrival IS NOT NULL AND prompt_tokens > 0
GROUP BY deployment, prompt_tokens - coalesce(cached_tokens, 0)
ORDER BY deployment, new_tokens
