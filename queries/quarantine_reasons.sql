-- description: quarantined records by file and reason, with the first line of each
SELECT
    source_file,
    source_format,
    reason,
    count(*) AS records,
    min(line) AS first_line
FROM quarantine
GROUP BY source_file, source_format, reason
ORDER BY records DESC, source_file, reason
