-- description: mean TTFT and decode time per request and the mean of each of their parts (queue, prefill compute, rest; weights, KV, compute, overheads, interference) by model x GPU x GPU count, from `pipeline attribute`
-- Reads attribution_requests. Means are over the same requests as their total, with a part that
-- could not be separated counted as 0 (its time is in the residual instead: ttft_rest for TTFT,
-- decode_not_separated for decode), so the part means add up to the total mean. TTFT parts: the
-- requests with a TTFT; decode parts: those with a decode time and at least one decode step.
-- queue_share = total queueing / total TTFT of the group.
WITH parts AS (
    SELECT
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        coalesce(gpu_count, 1) AS gpu_count,
        CASE WHEN fitted THEN 1 ELSE 0 END AS fitted,
        ttft_s,
        CASE WHEN ttft_s IS NOT NULL THEN coalesce(ttft_queue_s, 0) END AS queue_s,
        CASE WHEN ttft_s IS NOT NULL THEN coalesce(ttft_prefill_compute_s, 0) END AS prefill_s,
        CASE WHEN ttft_s IS NOT NULL THEN ttft_rest_s END AS rest_s,
        CASE WHEN ttft_s IS NOT NULL THEN ttft_queue_s END AS queue_known,
        CASE WHEN ttft_s IS NOT NULL THEN ttft_prefill_compute_s END AS prefill_known,
        CASE WHEN decode_steps IS NOT NULL THEN decode_s END AS decode_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL
                THEN coalesce(decode_weights_s, 0)
        END AS weights_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL THEN coalesce(decode_kv_s, 0)
        END AS kv_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL
                THEN coalesce(decode_compute_s, 0)
        END AS compute_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL
                THEN coalesce(decode_overhead_s, 0)
        END AS overhead_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL
                THEN coalesce(decode_interference_s, 0)
        END AS interference_s,
        CASE
            WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL
                THEN CASE WHEN decode_weights_s IS NULL THEN decode_s ELSE 0 END
        END AS not_separated_s,
        CASE WHEN decode_steps IS NOT NULL AND decode_s IS NOT NULL THEN decode_weights_s END
            AS decode_known
    FROM attribution_requests
)
SELECT
    model,
    gpu,
    gpu_count,
    count(*) AS requests,
    sum(fitted) AS fitted,
    count(ttft_s) AS with_ttft,
    count(queue_known) AS with_queue,
    count(prefill_known) AS with_prefill_compute,
    avg(ttft_s) AS ttft_mean,
    avg(queue_s) AS ttft_queue_mean,
    avg(prefill_s) AS ttft_prefill_compute_mean,
    avg(rest_s) AS ttft_rest_mean,
    sum(queue_s) / nullif(sum(ttft_s), 0) AS queue_share,
    count(decode_s) AS with_decode,
    count(decode_known) AS with_decode_parts,
    avg(decode_s) AS decode_mean,
    avg(weights_s) AS decode_weights_mean,
    avg(kv_s) AS decode_kv_mean,
    avg(compute_s) AS decode_compute_mean,
    avg(overhead_s) AS decode_overhead_mean,
    avg(interference_s) AS decode_interference_mean,
    avg(not_separated_s) AS decode_not_separated_mean
FROM parts
GROUP BY model, gpu, gpu_count
ORDER BY model, gpu, gpu_count
