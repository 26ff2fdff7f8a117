-- description: report headline by model x GPU: requests, errors, tokens, throughput, goodput under a TTFT/TPOT SLO
-- param slo_ttft: 2.0 (TTFT objective, seconds)
-- param slo_tpot: 0.1 (TPOT objective, seconds per output token)
-- Run time: each run's last finish minus its first arrival, on the run's own clock, summed over
-- the runs of a group; throughput and goodput are per second of run time. A request meets the
-- SLO when it finished ok with TTFT <= slo_ttft and TPOT <= slo_tpot (no TPOT: TTFT alone);
-- errors and cancellations count against attainment.
WITH per_run AS (
    SELECT
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        run_id,
        count(*) AS requests,
        sum(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) AS ok,
        sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS errors,
        sum(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
        sum(prompt_tokens) AS prompt_tokens,
        sum(cached_tokens) AS cached_tokens,
        sum(CASE WHEN status = 'ok' THEN output_tokens ELSE 0 END) AS output_tokens,
        sum(
            CASE
                WHEN status = 'ok' AND ttft_s <= $slo_ttft
                    AND (tpot_s IS NULL OR tpot_s <= $slo_tpot) THEN 1
                ELSE 0
            END
        ) AS good,
        max(t_arrival + e2e_s) - min(t_arrival) AS duration_s
    FROM requests
    GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), run_id
)
SELECT
    model,
    gpu,
    count(*) AS runs,
    sum(requests) AS requests,
    sum(ok) AS ok,
    sum(errors) AS errors,
    sum(cancelled) AS cancelled,
    sum(prompt_tokens) AS prompt_tokens,
    sum(cached_tokens) AS cached_tokens,
    sum(output_tokens) AS output_tokens,
    sum(good) AS good,
    sum(duration_s) AS duration_s,
    sum(requests) / nullif(sum(duration_s), 0) AS requests_per_s,
    sum(output_tokens) / nullif(sum(duration_s), 0) AS output_tokens_per_s,
    sum(good) / nullif(sum(duration_s), 0) AS goodput_per_s,
    CAST(sum(good) AS DOUBLE) / sum(requests) AS slo_attainment,
    CAST(sum(errors) + sum(cancelled) AS DOUBLE) / sum(requests) AS failure_rate
FROM per_run
GROUP BY model, gpu
ORDER BY requests DESC, model, gpu
