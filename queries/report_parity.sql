-- description: parity: each run's figures recomputed from its requests next to the tool's own summary (vLLM, SGLang, AIPerf, llmperf, GuideLLM, DistServe), with the relative difference
-- Ours: linear-interpolation percentiles of successful requests (metrics.md); GuideLLM's are
-- nearest-rank, so its percentiles may differ by one request's gap. GuideLLM's TPOT includes the
-- TTFT and is not compared. A summary-only run (no per-request rows) shows its figure alone.
WITH names AS (
    SELECT 'mean_ttft_ms' AS metric, 'ttft_mean' AS ours, 0.001 AS scale
    UNION ALL SELECT 'median_ttft_ms', 'ttft_p50', 0.001
    UNION ALL SELECT 'p90_ttft_ms', 'ttft_p90', 0.001
    UNION ALL SELECT 'p99_ttft_ms', 'ttft_p99', 0.001
    UNION ALL SELECT 'mean_tpot_ms', 'tpot_mean', 0.001
    UNION ALL SELECT 'median_tpot_ms', 'tpot_p50', 0.001
    UNION ALL SELECT 'p99_tpot_ms', 'tpot_p99', 0.001
    UNION ALL SELECT 'mean_e2el_ms', 'e2e_mean', 0.001
    UNION ALL SELECT 'median_e2el_ms', 'e2e_p50', 0.001
    UNION ALL SELECT 'mean_e2e_latency_ms', 'e2e_mean', 0.001
    UNION ALL SELECT 'median_e2e_latency_ms', 'e2e_p50', 0.001
    UNION ALL SELECT 'time_to_first_token.avg [ms]', 'ttft_mean', 0.001
    UNION ALL SELECT 'time_to_first_token.p50 [ms]', 'ttft_p50', 0.001
    UNION ALL SELECT 'time_to_first_token.p90 [ms]', 'ttft_p90', 0.001
    UNION ALL SELECT 'time_to_first_token.p99 [ms]', 'ttft_p99', 0.001
    UNION ALL SELECT 'ttft.avg [ms]', 'ttft_mean', 0.001
    UNION ALL SELECT 'ttft.p50 [ms]', 'ttft_p50', 0.001
    UNION ALL SELECT 'ttft.p90 [ms]', 'ttft_p90', 0.001
    UNION ALL SELECT 'ttft.p99 [ms]', 'ttft_p99', 0.001
    UNION ALL SELECT 'request_latency.avg [ms]', 'e2e_mean', 0.001
    UNION ALL SELECT 'request_latency.p50 [ms]', 'e2e_p50', 0.001
    UNION ALL SELECT 'request_latency.p90 [ms]', 'e2e_p90', 0.001
    UNION ALL SELECT 'results_ttft_s_mean', 'ttft_mean', 1.0
    UNION ALL SELECT 'results_ttft_s_quantiles_p50', 'ttft_p50', 1.0
    UNION ALL SELECT 'results_ttft_s_quantiles_p90', 'ttft_p90', 1.0
    UNION ALL SELECT 'results_ttft_s_quantiles_p99', 'ttft_p99', 1.0
    UNION ALL SELECT 'results_end_to_end_latency_s_mean', 'e2e_mean', 1.0
    UNION ALL SELECT 'results_end_to_end_latency_s_quantiles_p50', 'e2e_p50', 1.0
    UNION ALL SELECT 'results_end_to_end_latency_s_quantiles_p90', 'e2e_p90', 1.0
    UNION ALL SELECT 'time_to_first_token_ms.successful.mean', 'ttft_mean', 0.001
    UNION ALL SELECT 'time_to_first_token_ms.successful.median', 'ttft_p50', 0.001
    UNION ALL SELECT 'time_to_first_token_ms.successful.percentiles.p90', 'ttft_p90', 0.001
    UNION ALL SELECT 'time_to_first_token_ms.successful.percentiles.p99', 'ttft_p99', 0.001
    UNION ALL SELECT 'request_latency.successful.mean', 'e2e_mean', 1.0
    UNION ALL SELECT 'request_latency.successful.median', 'e2e_p50', 1.0
    UNION ALL SELECT 'avg_ttft_ms', 'ttft_mean', 0.001
    UNION ALL SELECT 'avg_tpot_ms', 'tpot_mean', 0.001
),
o AS (
    SELECT
        run_id,
        count(*) AS requests,
        avg(ttft_s) AS ttft_mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p99,
        avg(tpot_s) AS tpot_mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p50,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_s) AS tpot_p99,
        avg(e2e_s) AS e2e_mean,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p50,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_s) AS e2e_p90
    FROM requests
    WHERE status = 'ok'
    GROUP BY run_id
),
t AS (
    SELECT s.run_id, s.source_format AS tool, names.ours AS metric, s.metric AS tool_metric,
        s.value * names.scale AS theirs_s
    FROM run_summaries AS s
    JOIN names ON names.metric = s.metric
),
paired AS (
    SELECT
        t.run_id,
        t.tool,
        t.metric,
        t.tool_metric,
        o.requests,
        CASE t.metric
            WHEN 'ttft_mean' THEN o.ttft_mean
            WHEN 'ttft_p50' THEN o.ttft_p50
            WHEN 'ttft_p90' THEN o.ttft_p90
            WHEN 'ttft_p99' THEN o.ttft_p99
            WHEN 'tpot_mean' THEN o.tpot_mean
            WHEN 'tpot_p50' THEN o.tpot_p50
            WHEN 'tpot_p99' THEN o.tpot_p99
            WHEN 'e2e_mean' THEN o.e2e_mean
            WHEN 'e2e_p50' THEN o.e2e_p50
            WHEN 'e2e_p90' THEN o.e2e_p90
        END AS ours_s,
        t.theirs_s
    FROM t
    LEFT JOIN o ON o.run_id = t.run_id
)
SELECT
    run_id, tool, metric, tool_metric, requests, ours_s, theirs_s,
    ours_s / nullif(theirs_s, 0) - 1 AS difference
FROM paired
ORDER BY run_id, metric, tool_metric
