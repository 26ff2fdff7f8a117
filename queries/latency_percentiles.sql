-- description: p50/p90/p99 of TTFT, TPOT, ITL and E2E (seconds) by model x GPU, successful requests
-- ITL pools every gap between successive emissions of all requests (per chunk, as tools report).
WITH ok AS (
    SELECT * FROM requests WHERE status = 'ok'
),
req AS (
    SELECT
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        count(*) AS requests,
        sum(output_tokens) AS output_tokens,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p99,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p99,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p99
    FROM ok
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?')
),
itl AS (
    SELECT
        coalesce(r.model, '?') AS model,
        coalesce(r.gpu, '?') AS gpu,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY t.gap_s) AS itl_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY t.gap_s) AS itl_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY t.gap_s) AS itl_p99
    FROM tokens AS t
    JOIN ok AS r ON r.run_id = t.run_id AND r.request_id = t.request_id
    WHERE t.gap_s IS NOT NULL
    GROUP BY coalesce(r.model, '?'), coalesce(r.gpu, '?')
)
SELECT
    req.model, req.gpu, req.requests, req.output_tokens,
    ttft_p50, ttft_p90, ttft_p99,
    tpot_p50, tpot_p90, tpot_p99,
    itl_p50, itl_p90, itl_p99,
    e2e_p50, e2e_p90, e2e_p99
FROM req
LEFT JOIN itl ON itl.model = req.model AND itl.gpu = req.gpu
ORDER BY req.model, req.gpu
