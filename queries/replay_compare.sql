-- description: replayed runs vs the runs they replay: p50/p90/p99 of TTFT, TPOT, E2E and errors
-- A replayed request (in replay_requests, never in requests) keeps its request_id and names the
-- replayed run in source_file; requests are paired on both, so only requests present in both count.
WITH rep AS (
    SELECT run_id, source_file, request_id, ttft_s, tpot_s, e2e_s
    FROM replay_requests
    WHERE status = 'ok'
),
pairs AS (
    SELECT
        rep.run_id AS replay_run_id,
        rep.source_file AS source_run_id,
        o.ttft_s AS ttft_o, rep.ttft_s AS ttft_r,
        o.tpot_s AS tpot_o, rep.tpot_s AS tpot_r,
        o.e2e_s AS e2e_o, rep.e2e_s AS e2e_r
    FROM rep
    JOIN requests AS o ON o.run_id = rep.source_file AND o.request_id = rep.request_id
    WHERE o.status = 'ok'
),
agg AS (
    SELECT
        replay_run_id,
        source_run_id,
        count(*) AS requests,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_o) AS ttft_p50_observed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_r) AS ttft_p50_replayed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_o) AS ttft_p90_observed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_r) AS ttft_p90_replayed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_o) AS ttft_p99_observed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_r) AS ttft_p99_replayed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_o) AS tpot_p50_observed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_r) AS tpot_p50_replayed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_o) AS tpot_p90_observed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY tpot_r) AS tpot_p90_replayed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_o) AS tpot_p99_observed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_r) AS tpot_p99_replayed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_o) AS e2e_p50_observed,
        percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_r) AS e2e_p50_replayed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_o) AS e2e_p90_observed,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_r) AS e2e_p90_replayed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_o) AS e2e_p99_observed,
        percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_r) AS e2e_p99_replayed
    FROM pairs
    GROUP BY replay_run_id, source_run_id
)
SELECT
    agg.*,
    ttft_p50_replayed / nullif(ttft_p50_observed, 0) - 1 AS ttft_p50_error,
    ttft_p90_replayed / nullif(ttft_p90_observed, 0) - 1 AS ttft_p90_error,
    ttft_p99_replayed / nullif(ttft_p99_observed, 0) - 1 AS ttft_p99_error,
    tpot_p50_replayed / nullif(tpot_p50_observed, 0) - 1 AS tpot_p50_error,
    tpot_p90_replayed / nullif(tpot_p90_observed, 0) - 1 AS tpot_p90_error,
    tpot_p99_replayed / nullif(tpot_p99_observed, 0) - 1 AS tpot_p99_error,
    e2e_p50_replayed / nullif(e2e_p50_observed, 0) - 1 AS e2e_p50_error,
    e2e_p90_replayed / nullif(e2e_p90_observed, 0) - 1 AS e2e_p90_error,
    e2e_p99_replayed / nullif(e2e_p99_observed, 0) - 1 AS e2e_p99_error
FROM agg
ORDER BY replay_run_id
