-- description: over time, per run: arrival rate, requests in flight and waiting, output throughput and p90 TTFT per window on the run's clock
-- param windows: 40 (about this many windows per run; each window is a round length, 1, 2 or 5 x 10^k s)
-- Time is seconds since the run's first arrival. In flight and waiting are counted at each
-- window's end from the logged stamps: arrived minus finished, and arrived minus scheduled
-- (waiting is NULL for a run whose log has no scheduled time, i.e. no queue_s). Output throughput
-- counts a request's output tokens in the window where it finished; p90 TTFT is over the ok
-- requests that arrived in the window. Windows where nothing happened have no row (the counts
-- carry over). Runs without arrival times (clock 'request': t_arrival is null) have no time axis
-- and no rows.
WITH clocked AS (
    SELECT
        deployment, run_id, model, gpu, gpu_count, weight_dtype, status, t_arrival, queue_s,
        ttft_s, e2e_s, output_tokens
    FROM requests
    WHERE t_arrival IS NOT NULL
),
span AS (
    SELECT
        run_id,
        min(t_arrival) AS t0,
        greatest(max(t_arrival + coalesce(e2e_s, 0)) - min(t_arrival), 0.001)
            / CAST($windows AS DOUBLE) AS raw_s,
        count(queue_s) AS with_queue
    FROM clocked
    GROUP BY run_id
),
win AS (
    SELECT
        run_id,
        t0,
        with_queue,
        pow(10, floor(log10(raw_s))) * CASE
            WHEN raw_s / pow(10, floor(log10(raw_s))) <= 1.000001 THEN 1
            WHEN raw_s / pow(10, floor(log10(raw_s))) <= 2.000001 THEN 2
            WHEN raw_s / pow(10, floor(log10(raw_s))) <= 5.000001 THEN 5
            ELSE 10
        END AS window_s
    FROM span
),
stamped AS (
    SELECT c.*, w.t0, w.window_s, w.with_queue
    FROM clocked AS c
    JOIN win AS w ON w.run_id = c.run_id
),
events AS (
    -- arrivals: every request arrives; only those with a finish enter "in flight"
    SELECT
        run_id,
        CAST(floor((t_arrival - t0) / window_s) AS BIGINT) AS k,
        1 AS arrived,
        CASE WHEN e2e_s IS NOT NULL THEN 1 ELSE 0 END AS d_flight,
        CASE WHEN queue_s IS NOT NULL THEN 1 ELSE 0 END AS d_wait,
        0 AS tokens
    FROM stamped
    UNION ALL
    SELECT
        run_id,
        CAST(floor((t_arrival + e2e_s - t0) / window_s) AS BIGINT) AS k,
        0 AS arrived,
        -1 AS d_flight,
        0 AS d_wait,
        CASE WHEN status = 'ok' THEN coalesce(output_tokens, 0) ELSE 0 END AS tokens
    FROM stamped
    WHERE e2e_s IS NOT NULL
    UNION ALL
    SELECT
        run_id,
        CAST(floor((t_arrival + queue_s - t0) / window_s) AS BIGINT) AS k,
        0 AS arrived,
        0 AS d_flight,
        -1 AS d_wait,
        0 AS tokens
    FROM stamped
    WHERE queue_s IS NOT NULL
),
per_window AS (
    SELECT
        run_id,
        k,
        sum(arrived) AS arrived,
        sum(d_flight) AS d_flight,
        sum(d_wait) AS d_wait,
        sum(tokens) AS tokens
    FROM events
    GROUP BY run_id, k
),
running AS (
    SELECT
        run_id,
        k,
        arrived,
        tokens,
        sum(d_flight) OVER (
            PARTITION BY run_id ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS in_flight,
        sum(d_wait) OVER (
            PARTITION BY run_id ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS waiting
    FROM per_window
),
ttft AS (
    SELECT
        run_id,
        CAST(floor((t_arrival - t0) / window_s) AS BIGINT) AS k,
        count(*) AS ttft_n,
        percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90
    FROM stamped
    WHERE status = 'ok' AND ttft_s IS NOT NULL
    GROUP BY run_id, CAST(floor((t_arrival - t0) / window_s) AS BIGINT)
),
-- A run whose rows name more than one deployment (say some lines lack the model) is drawn once,
-- under the smallest key: min, not any_value, so DuckDB and Spark pick the same one.
runs_of AS (
    SELECT
        run_id,
        min(deployment) AS deployment,
        min(coalesce(model, '?')) AS model,
        min(coalesce(gpu, '?')) AS gpu,
        min(coalesce(gpu_count, 1)) AS gpu_count,
        min(coalesce(weight_dtype, 'bf16')) AS weight_dtype,
        count(*) AS requests
    FROM clocked
    GROUP BY run_id
)
SELECT
    d.deployment, r.run_id, d.model, d.gpu, d.gpu_count, d.weight_dtype, d.requests,
    w.window_s,
    r.k,
    r.k * w.window_s AS t_s,
    r.arrived / w.window_s AS arrivals_per_s,
    r.in_flight,
    CASE WHEN w.with_queue > 0 THEN r.waiting END AS waiting,
    r.tokens / w.window_s AS output_tokens_per_s,
    t.ttft_n,
    t.ttft_p90
FROM running AS r
JOIN win AS w ON w.run_id = r.run_id
JOIN runs_of AS d ON d.run_id = r.run_id
LEFT JOIN ttft AS t ON t.run_id = r.run_id AND t.k = r.k
ORDER BY d.deployment, r.run_id, r.k
