-- SQLite overrides of queries.sql, by name.

-- name: claim_candidates
-- Walk the claim index in ORDER BY order and stop at LIMIT, however many are due.
SELECT id, version, name, next_run_at, priority, lock, max_running, rate_limit, 0 AS lane
FROM tickwork_tasks INDEXED BY tickwork_tasks_claim
WHERE status = 'PENDING' AND next_run_at <= :now
  AND name IN (SELECT value FROM json_each(:names))
  AND (:all_queues OR queue IN (SELECT value FROM json_each(:queues)))
  AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
  AND id NOT IN (SELECT value FROM json_each(:exclude))
  -- (+priority: a filter, not an ORDER BY constant, or SQLite would sort each due instant's tasks)
  AND +priority = 0 AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
ORDER BY next_run_at, priority DESC, id
LIMIT :limit;

-- name: overrun_runs
-- Runs claimed longer ago than their max_runtime plus :grace, live lease or not (µs).
SELECT t.*, e.id AS execution_id, e.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t
JOIN tickwork_executions e ON e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING'
WHERE t.status = 'RUNNING' AND t.max_runtime IS NOT NULL
  AND e.started_at + CAST((t.max_runtime + :grace) * 1000000 AS INTEGER) < :now
ORDER BY e.started_at
LIMIT :limit;

-- name: lane_candidates
-- The lane's own index, in its order (tickwork/store/limits.sql).
SELECT id, version, name, next_run_at, priority, lock, max_running, rate_limit, 1 AS lane
FROM tickwork_tasks INDEXED BY tickwork_tasks_lane
WHERE status = 'PENDING' AND next_run_at <= :now
  AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
  AND name IN (SELECT value FROM json_each(:names))
  AND (:all_queues OR queue IN (SELECT value FROM json_each(:queues)))
  AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
  AND id NOT IN (SELECT value FROM json_each(:exclude))
ORDER BY priority DESC, next_run_at, id
LIMIT :scan;

-- name: next_due_at
-- queries.sql's, with the lane's own index named (SQLite would walk every PENDING task).
SELECT
    (SELECT next_run_at FROM tickwork_tasks
     WHERE status = 'PENDING' AND name IN (SELECT value FROM json_each(:names))
       AND (:all_queues OR queue IN (SELECT value FROM json_each(:queues)))
       AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
       AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
     ORDER BY next_run_at LIMIT 1) AS plain,
    (SELECT MIN(CASE WHEN l.tat IS NOT NULL AND l.tat > t.next_run_at THEN l.tat ELSE t.next_run_at END)
     FROM (
         SELECT name, MIN(next_run_at) AS next_run_at FROM tickwork_tasks INDEXED BY tickwork_tasks_lane
         WHERE status = 'PENDING'
           AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
           AND name IN (SELECT value FROM json_each(:names))
           AND (:all_queues OR queue IN (SELECT value FROM json_each(:queues)))
           AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
         GROUP BY name
     ) t LEFT JOIN tickwork_limits l ON l.key = 'rate:' || t.name) AS lane;
