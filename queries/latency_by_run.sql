-- description: per run: mean, p50 and p90 of TTFT, TPOT and E2E (seconds) of successful requests, as the tools' own summaries report them
-- TPOT is defined only for requests with more than one output token (metrics.md); its mean is over those.
SELECT
    run_id,
    min(model) AS model,
    min(gpu) AS gpu,
    count(*) AS requests,
    sum(output_tokens) AS output_tokens,
    avg(ttft_s) AS ttft_mean,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90,
    avg(tpot_s) AS tpot_mean,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p90,
    avg(e2e_s) AS e2e_mean,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p50,
    percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p90
FROM requests
WHERE status = 'ok'
GROUP BY run_id
ORDER BY run_id
