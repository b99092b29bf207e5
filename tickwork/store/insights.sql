-- What the dashboard's insights read: per task name statistics, throughput by minute,
-- the runs page's filters and which tasks each node runs. Every statement walks at most
-- :scan of the newest executions (the primary key, newest first) before it filters, so
-- its cost is bounded whatever the size of the log. This file is SQLite's (times are
-- INTEGER microseconds); postgres_insights.sql overrides what differs.

-- name: name_stats
-- Per task name, runs that ended at or after :since (SKIPPED records are no runs):
-- counts, the newest success and percentile_cont(0.5 / 0.95) of duration and lateness
-- (rank (n - 1) * p, interpolated between its two neighbours), in seconds.
WITH recent AS (
    SELECT task_id, status, scheduled_for, started_at, finished_at
    FROM tickwork_executions ORDER BY id DESC LIMIT :scan
), ended AS MATERIALIZED (
    SELECT t.name, r.status, r.scheduled_for, r.started_at, r.finished_at
    FROM recent r JOIN tickwork_tasks t ON t.id = r.task_id
    WHERE r.finished_at >= :since AND r.status <> 'SKIPPED' AND (:name IS NULL OR t.name = :name)
), counts AS (
    SELECT name, COUNT(*) AS runs,
           SUM(CASE WHEN status = 'COMPLETED' THEN 1 ELSE 0 END) AS succeeded,
           SUM(CASE WHEN status IN ('FAILED', 'TIMED_OUT') THEN 1 ELSE 0 END) AS failed,
           MAX(CASE WHEN status = 'COMPLETED' THEN finished_at END) AS last_success
    FROM ended GROUP BY name
), spans AS (
    SELECT name, 'duration' AS metric, finished_at - started_at AS v FROM ended WHERE started_at IS NOT NULL
    UNION ALL
    SELECT name, 'lateness' AS metric, started_at - scheduled_for AS v FROM ended WHERE started_at IS NOT NULL
), ranked AS (
    SELECT name, metric, v,
           ROW_NUMBER() OVER (PARTITION BY name, metric ORDER BY v) - 1 AS rn,
           (COUNT(*) OVER (PARTITION BY name, metric) - 1) * 0.5 AS p50,
           (COUNT(*) OVER (PARTITION BY name, metric) - 1) * 0.95 AS p95
    FROM spans
), percentiles AS (
    SELECT name, metric,
           SUM(CASE WHEN rn = CAST(p50 AS INTEGER) THEN v * (1 - (p50 - CAST(p50 AS INTEGER)))
                    WHEN rn = CAST(p50 AS INTEGER) + 1 THEN v * (p50 - CAST(p50 AS INTEGER))
                    ELSE 0 END) / 1000000.0 AS p50,
           SUM(CASE WHEN rn = CAST(p95 AS INTEGER) THEN v * (1 - (p95 - CAST(p95 AS INTEGER)))
                    WHEN rn = CAST(p95 AS INTEGER) + 1 THEN v * (p95 - CAST(p95 AS INTEGER))
                    ELSE 0 END) / 1000000.0 AS p95
    FROM ranked
    WHERE rn IN (CAST(p50 AS INTEGER), CAST(p50 AS INTEGER) + 1, CAST(p95 AS INTEGER), CAST(p95 AS INTEGER) + 1)
    GROUP BY name, metric
)
SELECT c.name, c.runs, c.succeeded, c.failed, c.last_success,
       d.p50 AS p50_duration, d.p95 AS p95_duration, l.p50 AS p50_lateness, l.p95 AS p95_lateness,
       (SELECT COUNT(*) FROM recent) AS scanned
FROM counts c
LEFT JOIN percentiles d ON d.name = c.name AND d.metric = 'duration'
LEFT JOIN percentiles l ON l.name = c.name AND l.metric = 'lateness'
ORDER BY c.runs DESC, c.name
LIMIT :names;

-- name: throughput
-- Runs that ended at or after :since, by status and :bucket_us-long bucket (0 = oldest).
SELECT status, (finished_at - :since) / :bucket_us AS bucket, COUNT(*) AS n,
       (SELECT COUNT(*) FROM (SELECT 1 FROM tickwork_executions ORDER BY id DESC LIMIT :scan) AS w) AS scanned
FROM (SELECT status, finished_at FROM tickwork_executions ORDER BY id DESC LIMIT :scan) AS recent
WHERE finished_at >= :since AND status <> 'SKIPPED'
GROUP BY status, bucket
ORDER BY bucket, status;

-- name: find_runs
-- The runs page: the newest :limit runs among the newest :scan, filtered by task name,
-- status and slot (scheduled_for in [:since, :until)), with their task's name.
SELECT e.*, t.name AS task_name
FROM (SELECT * FROM tickwork_executions ORDER BY id DESC LIMIT :scan) AS e
JOIN tickwork_tasks t ON t.id = e.task_id
WHERE (:name IS NULL OR t.name = :name) AND (:status IS NULL OR e.status = :status)
  AND (:since IS NULL OR e.scheduled_for >= :since) AND (:until IS NULL OR e.scheduled_for < :until)
ORDER BY e.id DESC
LIMIT :limit;

-- name: running_by_node
-- RUNNING tasks, by the node holding their lease (the claim index's RUNNING entries).
SELECT t.id, t.name, t.lease_owner, t.attempt, e.started_at
FROM tickwork_tasks t
LEFT JOIN tickwork_executions e ON e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING'
WHERE t.status = 'RUNNING'
ORDER BY t.lease_owner, t.id
LIMIT :limit;

-- name: insert_queue_sample
-- One row per minute for the whole cluster: the first node to sample it wins.
INSERT INTO tickwork_queue_samples (minute, depth, oldest_age) VALUES (:minute, :depth, :oldest_age)
ON CONFLICT (minute) DO NOTHING;

-- name: prune_queue_samples
DELETE FROM tickwork_queue_samples WHERE minute < :cutoff;

-- name: queue_samples
SELECT minute, depth, oldest_age FROM tickwork_queue_samples WHERE minute >= :since ORDER BY minute LIMIT 1500;
