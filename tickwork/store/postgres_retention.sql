-- PostgreSQL overrides of retention.sql, by name.

-- name: prune_lock
-- One pruner at a time across every node: a transaction-level advisory lock, let go at
-- commit; a node that does not get it skips this pass (key: "tick" in ASCII).
SELECT pg_try_advisory_xact_lock(1953063787) AS got;

-- name: prune_pick_tasks
-- Locked until the batch commits: a retry or another writer of these rows waits, then
-- finds them gone; rows another transaction holds are left for the next batch.
SELECT id FROM tickwork_tasks
WHERE kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff
ORDER BY updated_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: prune_task_executions
-- The picked tasks' executions, each task checked again as in retention.sql. The tasks
-- still ended and old are found first, as one array: the delete then walks the index of
-- their executions (tickwork_executions_task) and never the table.
DELETE FROM tickwork_executions
WHERE task_id = ANY(ARRAY(
    SELECT id FROM tickwork_tasks
    WHERE id = ANY(:ids::bigint[])
      AND kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff));

-- name: prune_tasks
DELETE FROM tickwork_tasks
WHERE id = ANY(:ids::bigint[])
  AND kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff;
