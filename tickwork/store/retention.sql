-- Retention (store/retention.py): bounded batches of old history. Every statement is
-- limited to :limit rows and repeats its guard on the row it deletes, so a task that
-- changed since it was picked (retried, claimed) is left alone.
-- name: prune_lock
-- One pruner at a time. SQLite's single writer already serialises them.
SELECT 1 AS got;

-- name: prune_pick_tasks
-- Ended one-time tasks last changed before :cutoff, oldest first (tickwork_tasks_ended).
SELECT id FROM tickwork_tasks
WHERE kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff
ORDER BY updated_at
LIMIT :limit;

-- name: prune_task_executions
-- The executions of the picked tasks (before the tasks: SQLite would cascade uncounted)
-- that are still ended and old: one retried or changed since the pick keeps its own.
DELETE FROM tickwork_executions
WHERE task_id IN (
    SELECT id FROM tickwork_tasks
    WHERE id IN (SELECT value FROM json_each(:ids))
      AND kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff);

-- name: prune_tasks
DELETE FROM tickwork_tasks
WHERE id IN (SELECT value FROM json_each(:ids))
  AND kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff;

-- name: prune_executions
-- Ended executions that finished before :cutoff, except a recurring task's newest
-- :keep_last (those with an id above its (:keep_last + 1)-th newest's) and any of a task
-- that is running. An execution whose task is gone goes by age. A run ends after its
-- slot, so the walk is bounded by scheduled_for < :cutoff, oldest slot first, on
-- tickwork_executions_slot: with nothing old, one index lookup (a row whose slot were
-- after its end would wait for the cutoff to pass its slot). An index on finished_at
-- would do too, but finishing a run would then change an indexed column: no HOT update.
DELETE FROM tickwork_executions
WHERE id IN (
    SELECT e.id FROM tickwork_executions e LEFT JOIN tickwork_tasks t ON t.id = e.task_id
    WHERE e.scheduled_for < :cutoff AND e.status <> 'RUNNING' AND e.finished_at < :cutoff
      AND (t.id IS NULL OR (t.status <> 'RUNNING' AND (t.kind = 'ONE_TIME' OR e.id <= (
          SELECT k.id FROM tickwork_executions k WHERE k.task_id = e.task_id
          ORDER BY k.id DESC LIMIT 1 OFFSET :keep_last))))
    ORDER BY e.scheduled_for
    LIMIT :limit)
  AND status <> 'RUNNING';

-- name: prune_count
-- prune_tasks, then prune_executions, counted without deleting (a dry run).
WITH doomed AS (
    SELECT id FROM tickwork_tasks
    WHERE kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND updated_at < :cutoff
    ORDER BY updated_at
    LIMIT :limit
), aged AS (
    SELECT e.id FROM tickwork_executions e LEFT JOIN tickwork_tasks t ON t.id = e.task_id
    WHERE e.scheduled_for < :cutoff AND e.status <> 'RUNNING' AND e.finished_at < :cutoff
      AND e.task_id NOT IN (SELECT id FROM doomed)
      AND (t.id IS NULL OR (t.status <> 'RUNNING' AND (t.kind = 'ONE_TIME' OR e.id <= (
          SELECT k.id FROM tickwork_executions k WHERE k.task_id = e.task_id
          ORDER BY k.id DESC LIMIT 1 OFFSET :keep_last))))
    ORDER BY e.scheduled_for
    LIMIT :limit
)
SELECT (SELECT COUNT(*) FROM doomed) AS tasks,
       (SELECT COUNT(*) FROM aged)
       + (SELECT COUNT(*) FROM tickwork_executions WHERE task_id IN (SELECT id FROM doomed)) AS executions;
