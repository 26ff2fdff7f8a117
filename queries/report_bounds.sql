-- description: first and last wall-clock arrival in the warehouse, and requests without one
SELECT
    min(arrival_at) AS first_arrival,
    max(arrival_at) AS last_arrival,
    count(*) AS requests,
    count(arrival_at) AS with_wall_clock
FROM requests
