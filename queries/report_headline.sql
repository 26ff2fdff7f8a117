-- description: report headline by model x GPU: requests, errors, tokens, throughput, goodput under a TTFT/TPOT SLO
-- param slo_ttft: 2.0 (TTFT objective, seconds)
-- param slo_tpot: 0.1 (TPOT objective, seconds per output token)
-- Run time: each run's last finish minus its first arrival, on the run's own clock, summed over
-- the runs of a group; throughput and goodput are per second of run time. A request meets the
-- SLO when it finished ok with TTFT <= slo_ttft and TPOT <= slo_tpot (no TPOT: TTFT alone);
-- errors and cancellations count against attainment. A run without arrival times (clock
-- 'request') has no run time: its rates are NULL, never computed from zeros; where the tool wrote
-- its own figure (llmperf's completed requests per minute, AIPerf / GuideLLM rates) it is given
-- as tool_requests_per_s (when every run of the group has one), and runs_without_clock counts
-- the runs without a clock.
WITH tool AS (
    SELECT run_id, max(request_rate) AS tool_rate
    FROM runs
    WHERE request_rate IS NOT NULL AND abs(request_rate) < 1e300  -- finite (both engines)
    GROUP BY run_id
),
per_run AS (
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
),
with_tool AS (
    SELECT per_run.*, tool.tool_rate
    FROM per_run
    LEFT JOIN tool ON tool.run_id = per_run.run_id
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
    CAST(sum(errors) + sum(cancelled) AS DOUBLE) / sum(requests) AS failure_rate,
    sum(CASE WHEN duration_s IS NULL THEN 1 ELSE 0 END) AS runs_without_clock,
    -- the tools' rates combined like ours: requests over the run time each rate implies
    CASE
        WHEN count(tool_rate) = count(*) THEN sum(requests) / nullif(sum(requests / tool_rate), 0)
    END AS tool_requests_per_s
FROM with_tool
GROUP BY model, gpu
ORDER BY requests DESC, model, gpu
