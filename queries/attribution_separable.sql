-- description: Which TTFT / decode parts and slice-comparison factors each source format x model x GPU can be attributed (what its logs carry)
-- `pipeline attribute` splits TTFT into queue + prefill compute + rest and decode time into
-- weights + KV + compute + overheads + interference. The queue needs a scheduled time
-- (queue_s); prefill compute and the decode parts need prompt/output lengths and a model and
-- GPU the cost model can be fitted for. A slice comparison simulates the slice, so it needs
-- prompt and output lengths, the model and the GPU.
SELECT
    source_format,
    coalesce(model, '?') AS model,
    coalesce(gpu, '?') AS gpu,
    count(*) AS requests,
    count(queue_s) AS with_queue,
    count(ttft_s) AS with_ttft,
    count(decode_s) AS with_decode,
    count(prompt_tokens) AS with_prompt_tokens,
    count(output_tokens) AS with_output_tokens,
    CASE
        WHEN count(ttft_s) = 0 THEN 'none: no TTFT'
        WHEN count(queue_s) = count(*) AND count(prompt_tokens) = count(*)
            AND max(model) IS NOT NULL AND max(gpu) IS NOT NULL
            THEN 'queue | prefill compute | rest'
        WHEN count(prompt_tokens) = count(*) AND max(model) IS NOT NULL AND max(gpu) IS NOT NULL
            THEN 'prefill compute | queue+rest (no scheduled time)'
        WHEN count(queue_s) = count(*) THEN 'queue | prefill+rest (no cost model)'
        ELSE 'queue+prefill+rest (not separable)'
    END AS ttft_split,
    CASE
        WHEN count(decode_s) = 0 THEN 'none: no decode time'
        WHEN count(output_tokens) = count(*) AND max(model) IS NOT NULL AND max(gpu) IS NOT NULL
            THEN 'weights | KV | compute | overheads | interference'
        ELSE 'not separable (no output tokens or no cost model)'
    END AS decode_split,
    CASE
        WHEN count(prompt_tokens) = count(*) AND count(output_tokens) = count(*)
            AND max(model) IS NOT NULL AND max(gpu) IS NOT NULL
            THEN 'all factors'
        ELSE 'none (cannot simulate): missing '
            || CASE WHEN count(prompt_tokens) < count(*) THEN 'prompt_tokens ' ELSE '' END
            || CASE WHEN count(output_tokens) < count(*) THEN 'output_tokens ' ELSE '' END
            || CASE WHEN max(model) IS NULL THEN 'model ' ELSE '' END
            || CASE WHEN max(gpu) IS NULL THEN 'gpu' ELSE '' END
    END AS comparison_factors
FROM requests
WHERE status = 'ok'
GROUP BY source_format, coalesce(model, '?'), coalesce(gpu, '?')
ORDER BY source_format, model, gpu
