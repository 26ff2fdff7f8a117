-- description: mean TTFT split into queue, prefill and unattributed time (s) by model x GPU, for all requests and the slowest 10 %
-- queue_s and prefill_s come from the scheduled timestamp; where a log lacks one, its share of
-- TTFT is "unattributed" (TTFT minus the parts that are known). Means add up; medians do not.
WITH ok AS (
    SELECT
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        ttft_s,
        queue_s,
        prefill_s
    FROM requests
    WHERE status = 'ok' AND ttft_s IS NOT NULL
),
p90 AS (
    SELECT model, gpu, percentile_cont(0.9) WITHIN GROUP (ORDER BY ttft_s) AS ttft_p90
    FROM ok
    GROUP BY model, gpu
),
tagged AS (
    SELECT ok.*, 'all requests' AS cohort FROM ok
    UNION ALL
    SELECT ok.*, 'slowest 10 %' AS cohort
    FROM ok
    JOIN p90 ON p90.model = ok.model AND p90.gpu = ok.gpu
    WHERE ok.ttft_s >= p90.ttft_p90
)
SELECT
    model,
    gpu,
    cohort,
    count(*) AS requests,
    count(queue_s) AS with_queue,
    count(prefill_s) AS with_prefill,
    avg(ttft_s) AS ttft_mean,
    avg(coalesce(queue_s, 0)) AS queue_mean,
    avg(coalesce(prefill_s, 0)) AS prefill_mean,
    avg(ttft_s - coalesce(queue_s, 0) - coalesce(prefill_s, 0)) AS unattributed_mean
FROM tagged
GROUP BY model, gpu, cohort
ORDER BY model, gpu, cohort
