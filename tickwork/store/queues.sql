-- Queues: which are paused, and what waits in each (store/queues.py).

-- name: set_queue_paused
INSERT INTO tickwork_queues (name, paused, changed_at) VALUES (:name, :paused, :now)
ON CONFLICT (name) DO UPDATE SET paused = :paused, changed_at = :now;

-- name: paused_queues
SELECT name FROM tickwork_queues WHERE paused ORDER BY name LIMIT 1000;

-- name: due_by_queue
-- The queue gauges: due PENDING tasks per queue and the oldest one's dispatch time (the
-- due part of the claim indexes, one queue at a time, whatever lies in the future).
-- A paused queue's tasks are not claimable: they are no backlog to scale out for.
WITH RECURSIVE {{due_per_queue}}
SELECT queue, SUM(due) AS due, MIN(oldest) AS oldest FROM due_per_queue
WHERE queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
GROUP BY queue
HAVING SUM(due) > 0
ORDER BY queue
LIMIT 1000;

-- name: queue_rows
-- Every queue a live task uses or that was paused or resumed (or only :name), with its
-- counts: PENDING tasks, those due now, the RUNNING ones, and the oldest due task's
-- dispatch time. It reads every live task: a page or a command, never a claim or a scrape.
SELECT name, MAX(paused) AS paused, MAX(changed_at) AS changed_at,
       SUM(pending) AS pending, SUM(due) AS due, SUM(running) AS running, MIN(oldest) AS oldest
FROM (
    SELECT queue AS name, 0 AS paused, NULL AS changed_at,
           SUM(CASE WHEN status = 'PENDING' THEN 1 ELSE 0 END) AS pending,
           SUM(CASE WHEN status = 'PENDING' AND next_run_at <= :now THEN 1 ELSE 0 END) AS due,
           SUM(CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END) AS running,
           MIN(CASE WHEN status = 'PENDING' AND next_run_at <= :now THEN next_run_at END) AS oldest
    FROM tickwork_tasks
    WHERE status IN ('PENDING', 'RUNNING', 'PAUSED') AND (CAST(:name AS TEXT) IS NULL OR queue = CAST(:name AS TEXT))
    GROUP BY queue
    UNION ALL
    SELECT name, CASE WHEN paused THEN 1 ELSE 0 END, changed_at, 0, 0, 0, NULL FROM tickwork_queues
    WHERE CAST(:name AS TEXT) IS NULL OR name = CAST(:name AS TEXT)
) AS q
GROUP BY name
ORDER BY name
LIMIT :limit;
