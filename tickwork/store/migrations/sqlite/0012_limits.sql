-- Cluster-wide limits (tickwork/limits.py): a schedule's lock, and its name's max_running
-- and rate_limit (copied from @app.task when scheduled; a sync or an edit brings them in
-- line). Tasks with a limit or a priority other than 0 are claimed through their own
-- index (the lane: priority, then the oldest due; those above 0 before every other due
-- task, those below after), tasks with a limit under per-key locks; the claim of the
-- other tasks (priority 0, no limit) never reads them.
ALTER TABLE tickwork_tasks ADD COLUMN lock TEXT;
ALTER TABLE tickwork_tasks ADD COLUMN max_running INTEGER;
ALTER TABLE tickwork_tasks ADD COLUMN rate_limit TEXT;
CREATE INDEX tickwork_tasks_lane ON tickwork_tasks (priority DESC, next_run_at, id)
    WHERE status = 'PENDING'
      AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL);
-- The lock's guarantee does not rest on the claim's reasoning alone: two RUNNING tasks
-- with one lock cannot be written.
CREATE UNIQUE INDEX tickwork_tasks_running_lock ON tickwork_tasks (lock)
    WHERE status = 'RUNNING' AND lock IS NOT NULL;
-- Per limit key: a rate's next allowed start (tat), and since when the limit has held a
-- due task back and the last claim that found it so (full_since, held_until: a wait
-- that does not count as late).
CREATE TABLE tickwork_limits (
    key        TEXT        PRIMARY KEY,
    tat        INTEGER,
    full_since INTEGER,
    held_until INTEGER
);
