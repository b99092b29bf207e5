-- PostgreSQL's versions of insights.sql: TIMESTAMPTZ arithmetic, percentile_cont, and
-- typed NULL parameters. Same bounded walk of the newest :scan executions first.

-- name: name_stats
WITH recent AS (
    SELECT task_id, status, scheduled_for, started_at, finished_at
    FROM tickwork_runs ORDER BY id DESC LIMIT :scan  -- running runs too (migration 0014), as on SQLite
), ended AS (
    SELECT t.name, r.status, r.finished_at,
           EXTRACT(EPOCH FROM r.finished_at - r.started_at)::float8 AS duration,
           EXTRACT(EPOCH FROM r.started_at - r.scheduled_for)::float8 AS lateness
    FROM recent r JOIN tickwork_tasks t ON t.id = r.task_id
    WHERE r.finished_at >= :since AND r.status <> 'SKIPPED' AND (:name::text IS NULL OR t.name = :name::text)
)
SELECT name, COUNT(*) AS runs,
       COUNT(*) FILTER (WHERE status = 'COMPLETED') AS succeeded,
       COUNT(*) FILTER (WHERE status IN ('FAILED', 'TIMED_OUT')) AS failed,
       MAX(finished_at) FILTER (WHERE status = 'COMPLETED') AS last_success,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration) AS p50_duration,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration) AS p95_duration,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness) AS p50_lateness,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY lateness) AS p95_lateness,
       (SELECT COUNT(*) FROM recent) AS scanned
FROM ended
GROUP BY name
ORDER BY runs DESC, name
LIMIT :names;

-- name: throughput
SELECT status, floor(EXTRACT(EPOCH FROM finished_at - :since::timestamptz) / :bucket_s)::bigint AS bucket,
       COUNT(*) AS n,
       (SELECT COUNT(*) FROM (SELECT 1 FROM tickwork_runs ORDER BY id DESC LIMIT :scan) AS w) AS scanned
FROM (SELECT status, finished_at FROM tickwork_runs ORDER BY id DESC LIMIT :scan) AS recent
WHERE finished_at >= :since::timestamptz AND status <> 'SKIPPED'
GROUP BY status, bucket
ORDER BY bucket, status;

-- name: find_runs
SELECT e.*, t.name AS task_name
FROM (SELECT * FROM tickwork_runs ORDER BY id DESC LIMIT :scan) AS e  -- running runs too (migration 0014)
JOIN tickwork_tasks t ON t.id = e.task_id
WHERE (:name::text IS NULL OR t.name = :name::text) AND (:status::text IS NULL OR e.status = :status::text)
  AND (:since::timestamptz IS NULL OR e.scheduled_for >= :since::timestamptz)
  AND (:until::timestamptz IS NULL OR e.scheduled_for < :until::timestamptz)
ORDER BY e.id DESC
LIMIT :limit;

-- name: running_by_node
-- RUNNING tasks, by the node holding their lease; a run's start is on its task's row
-- (migration 0014).
SELECT t.id, t.name, t.lease_owner, t.attempt,
       CASE WHEN l.fence = t.version AND l.status = 'RUNNING' THEN l.started_at ELSE t.run_started_at END AS started_at
FROM tickwork_tasks t
-- a run claimed by a node of an earlier version (a rolling upgrade) has its row: the
-- task's newest
LEFT JOIN LATERAL ({{newest_row_probe}}) AS l ON l.task_id = t.id
WHERE t.status = 'RUNNING'
ORDER BY t.lease_owner, t.id
LIMIT :limit;
