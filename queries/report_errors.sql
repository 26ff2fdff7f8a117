-- description: failed and cancelled requests by model x GPU, status and error message
SELECT
    coalesce(model, '?') AS model,
    coalesce(gpu, '?') AS gpu,
    status,
    coalesce(error, '(no message)') AS error,
    count(*) AS requests
FROM requests
WHERE status <> 'ok'
GROUP BY coalesce(model, '?'), coalesce(gpu, '?'), status, coalesce(error, '(no message)')
ORDER BY requests DESC, model, gpu, status, error
