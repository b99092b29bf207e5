-- Edits of stored tasks (update, retry, replace) and syncs of code schedules
-- (store/edits.py). An edit is guarded by the version, revision and status it was
-- computed from: a claim, an ended run or another edit in between makes it a no-op,
-- and the caller reads the task again. It bumps revision, and version too unless the
-- task is running: a running task's version is its run's fence, which an edit must not
-- break (the run finishes under the definition it was claimed with).

-- name: edit_task
UPDATE tickwork_tasks
SET name = :name, args = :args, kwargs = :kwargs, cron = :cron, timezone = :timezone,
    interval_seconds = :interval, misfire = :misfire, misfire_grace = :misfire_grace,
    jitter = :jitter, timeout = :timeout, max_retries = :max_retries,
    retry_backoff = :retry_backoff, priority = :priority, max_catchup = :max_catchup,
    overlap = :overlap, on_lost = :on_lost, max_runtime = :max_runtime,
    until_at = :until, max_runs = :max_runs, declared_at = :declared_at, max_lost = :max_lost, queue = :queue,
    max_running = :max_running, rate_limit = :rate_limit,
    lost_runs = CASE WHEN :reset_cancel THEN 0 ELSE lost_runs END,
    status = :status, scheduled_at = :scheduled_at, next_run_at = :next_run_at,
    attempt = :attempt, triggered = :triggered,
    replan_at = :replan_at, replan_run_at = :replan_run_at,
    cancel_requested = CASE WHEN :reset_cancel THEN FALSE ELSE cancel_requested END,
    cancel_run_only = CASE WHEN :reset_cancel THEN FALSE ELSE cancel_run_only END,
    last_decision = COALESCE(:decision, last_decision),
    version = version + CASE WHEN status = 'RUNNING' THEN 0 ELSE 1 END,
    revision = revision + 1, updated_at = :now
WHERE id = :id AND version = :version AND revision = :revision AND status = :expect_status
RETURNING *;

-- name: other_key_holder
-- A live task other than :id holding :key (a retry must not make a second one).
SELECT id FROM tickwork_tasks
WHERE key = :key AND id <> :id AND status IN ('PENDING', 'RUNNING', 'PAUSED');

-- name: lock_key
-- Serialises the edits that give a task a key back (SQLite's file lock already does).
SELECT 1 AS got;

-- name: sync_lock
-- One sync at a time (SQLite's file lock, taken at BEGIN IMMEDIATE, already does).
SELECT 1 AS got;

-- name: remember_schedule_set
INSERT INTO tickwork_schedule_sets (digest, first_seen) VALUES (:digest, :now)
ON CONFLICT (digest) DO NOTHING;

-- name: schedule_set_seen
SELECT first_seen FROM tickwork_schedule_sets WHERE digest = :digest;

-- name: restamp_schedule_set
-- A forced sync (a deliberate rollback): this set counts as the newest from now on.
UPDATE tickwork_schedule_sets SET first_seen = :now WHERE digest = :digest;

-- name: code_schedules
-- The newest code schedule of each declared key, and the live ones of the registered
-- task names (tickwork_tasks_code).
SELECT * FROM tickwork_tasks t
WHERE t.origin = 'code'
  AND (t.key IN (SELECT value FROM json_each(:keys))
       OR (t.name IN (SELECT value FROM json_each(:names)) AND t.status IN ('PENDING', 'RUNNING', 'PAUSED')))
  AND t.id = (SELECT MAX(k.id) FROM tickwork_tasks k WHERE k.origin = 'code' AND k.key = t.key);

-- name: runtime_key_holders
SELECT * FROM tickwork_tasks
WHERE key IN (SELECT value FROM json_each(:keys)) AND origin IS NULL
  AND status IN ('PENDING', 'RUNNING', 'PAUSED');

-- name: remove_code_schedule
-- Code no longer declares it: a waiting schedule ends CANCELLED now; a running one is
-- asked to stop, and ends CANCELLED with its run (cancel wins).
UPDATE tickwork_tasks
SET status = CASE WHEN status = 'RUNNING' THEN 'RUNNING' ELSE 'CANCELLED' END,
    cancel_requested = (status = 'RUNNING'), cancel_run_only = FALSE,
    declared_at = :declared_at, removed_at = :now, last_decision = :note, replan_at = NULL, replan_run_at = NULL,
    version = version + CASE WHEN status = 'RUNNING' THEN 0 ELSE 1 END,
    revision = revision + 1, updated_at = :now
WHERE id = :id AND revision = :revision AND status IN ('PENDING', 'RUNNING', 'PAUSED')
RETURNING id, status;

-- name: note_removal
-- The record, in the task's history, of why it ended.
INSERT INTO tickwork_executions
    (task_id, attempt, scheduled_for, started_at, finished_at, status, note)
VALUES (:id, 0, :scheduled_for, :now, :now, 'CANCELLED', :note);
