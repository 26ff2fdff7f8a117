-- description: failed and cancelled requests by model x GPU, status and error message
-- Messages that differ only in their numbers ("Output too few tokens 17", "... 23") are one
-- reason: digits become N in `error`, and `example` keeps one message as written.
WITH e AS (
    SELECT
        coalesce(model, '?') AS model,
        coalesce(gpu, '?') AS gpu,
        status,
        coalesce(error, '(no message)') AS message,
        regexp_replace(coalesce(error, '(no message)'), '[0-9]+(\.[0-9]+)?', 'N', 'g') AS error
    FROM requests
    WHERE status <> 'ok'
)
SELECT
    model,
    gpu,
    status,
    error,
    min(message) AS example,
    count(*) AS requests
FROM e
GROUP BY model, gpu, status, error
ORDER BY requests DESC, model, gpu, status, error
