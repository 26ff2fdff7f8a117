-- description: first and last wall-clock arrival of the requests ingested from one input file
-- param source_file: logs/a.jsonl (the input file's path, as ingest recorded it)
SELECT
    min(arrival_at) AS first_arrival,
    max(arrival_at) AS last_arrival,
    count(*) AS requests
FROM requests
WHERE source_file = $source_file
