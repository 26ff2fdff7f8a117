-- description: requests and output tokens per second in fixed windows of each run (by finish time)
-- param window_s: 60 (window length in seconds)
-- A request counts in the window where it finished: throughput = its output tokens / window_s.
-- Runs without arrival times (clock 'request': arrival_s is null) have no windows.
SELECT
    run_id,
    window_index,
    window_index * CAST($window_s AS DOUBLE) AS window_start_s,
    count(*) AS requests_finished,
    sum(output_tokens) AS output_tokens,
    count(*) / CAST($window_s AS DOUBLE) AS requests_per_s,
    sum(output_tokens) / CAST($window_s AS DOUBLE) AS output_tokens_per_s
FROM (
    SELECT
        run_id,
        output_tokens,
        CAST(floor((arrival_s + e2e_s) / $window_s) AS BIGINT) AS window_index
    FROM requests
    WHERE status = 'ok' AND e2e_s IS NOT NULL AND arrival_s IS NOT NULL
) AS w
GROUP BY run_id, window_index
ORDER BY run_id, window_index
