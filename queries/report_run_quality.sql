-- description: per-run data checks: clock kind, missing metadata, impossible or missing times
SELECT
    run_id,
    min(source_format) AS source_format,
    min(clock) AS clock,
    count(*) AS requests,
    sum(CASE WHEN arrival_at IS NULL THEN 1 ELSE 0 END) AS no_wall_clock,
    sum(CASE WHEN model IS NULL THEN 1 ELSE 0 END) AS missing_model,
    sum(CASE WHEN gpu IS NULL THEN 1 ELSE 0 END) AS missing_gpu,
    sum(CASE WHEN gpu_count IS NULL THEN 1 ELSE 0 END) AS missing_gpu_count,
    sum(
        CASE
            WHEN queue_s < 0 OR prefill_s < 0 OR ttft_s < 0 OR decode_s < 0 OR e2e_s < 0 THEN 1
            ELSE 0
        END
    ) AS negative_times,
    sum(CASE WHEN status = 'ok' AND ttft_s IS NULL THEN 1 ELSE 0 END) AS ok_without_ttft,
    sum(CASE WHEN queue_s IS NULL THEN 1 ELSE 0 END) AS no_queue_time
FROM requests
GROUP BY run_id
ORDER BY run_id
