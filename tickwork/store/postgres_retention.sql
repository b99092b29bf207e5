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
-- The picked tasks' executions, each task checked again as in retention.sql.
DELETE FROM tickwork_executions e
USING tickwork_tasks t
WHERE t.id = ANY(:ids::bigint[]) AND e.task_id = t.id
  AND t.kind = 'ONE_TIME' AND t.status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND t.updated_at < :cutoff;

-- name: prune_tasks
DELETE FROM tickwork_tasks
WHERE id = ANY(:ids::bigint[])
  AND kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff;
