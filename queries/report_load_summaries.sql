-- description: rate sweeps known only from the tools' own summaries (no per-request rows): per run, achieved request rate, output throughput and the TTFT / TPOT / ITL percentiles the summary records
-- A sweep is the runs of one summary file (source_file) with two runs or more. Achieved rate =
-- completed / duration as the tool wrote them (vLLM and SGLang bench_serving); TTFT, TPOT and ITL
-- in seconds, NULL where the summary does not record that percentile. Runs that also have
-- per-request rows in `requests` are left out: their curve comes from the rows.
WITH s AS (
    SELECT
        run_id,
        min(source_file) AS source_file,
        min(source_format) AS source_format,
        max(CASE WHEN metric = 'completed' THEN value END) AS completed,
        max(CASE WHEN metric = 'duration' THEN value END) AS duration_s,
        max(CASE WHEN metric = 'output_throughput' THEN value END) AS output_throughput,
        max(CASE WHEN metric = 'median_ttft_ms' THEN value END) / 1000 AS ttft_p50,
        max(CASE WHEN metric = 'p90_ttft_ms' THEN value END) / 1000 AS ttft_p90,
        max(CASE WHEN metric = 'p99_ttft_ms' THEN value END) / 1000 AS ttft_p99,
        max(CASE WHEN metric = 'median_tpot_ms' THEN value END) / 1000 AS tpot_p50,
        max(CASE WHEN metric = 'p99_tpot_ms' THEN value END) / 1000 AS tpot_p99,
        max(CASE WHEN metric = 'median_itl_ms' THEN value END) / 1000 AS itl_p50
    FROM run_summaries
    WHERE run_id NOT IN (SELECT DISTINCT run_id FROM requests)
    GROUP BY run_id
),
sweeps AS (
    SELECT source_file
    FROM s
    WHERE completed > 0 AND duration_s > 0 AND ttft_p50 IS NOT NULL
    GROUP BY source_file
    HAVING count(*) >= 2
)
SELECT
    s.source_file, s.source_format, s.run_id,
    s.completed / s.duration_s AS request_rate,
    s.output_throughput,
    s.ttft_p50, s.ttft_p90, s.ttft_p99, s.tpot_p50, s.tpot_p99, s.itl_p50
FROM s
JOIN sweeps AS w ON w.source_file = s.source_file
WHERE s.completed > 0 AND s.duration_s > 0 AND s.ttft_p50 IS NOT NULL
ORDER BY s.source_file, request_rate
