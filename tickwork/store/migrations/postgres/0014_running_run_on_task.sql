-- A run's execution row is written once, when the run ends (write_outcomes_batch), not
-- inserted at the claim and updated at the end: half the writes to tickwork_executions
-- and their indexes on the hot path. While it runs, the run is read from its task's
-- row: the claim gives it its execution id (from the executions' sequence, so ids keep
-- their order) and records its attempt, when it started and which slot it runs (and
-- a note its node adds while it runs: note_execution). tickwork_runs is
-- the log as readers see it: every execution row, and every running run that has none
-- yet (a run whose row was written early, by end_execution, while its thread went on,
-- is that row). Nodes of an earlier version still running during a rolling upgrade
-- claim the old way, a RUNNING row per run: such a row is its run (the task's run_id,
-- if any, is then a stale one of an earlier run), which every reader takes as it is
-- (such a row is its task's newest: one probe of tickwork_executions_task).
ALTER TABLE tickwork_tasks ADD COLUMN run_id BIGINT;
ALTER TABLE tickwork_tasks ADD COLUMN run_attempt INTEGER;
ALTER TABLE tickwork_tasks ADD COLUMN run_started_at TIMESTAMPTZ;
ALTER TABLE tickwork_tasks ADD COLUMN run_scheduled_for TIMESTAMPTZ;
ALTER TABLE tickwork_tasks ADD COLUMN run_note TEXT;

-- Runs going on while the database is upgraded move to their task's row.
UPDATE tickwork_tasks t
SET run_id = e.id, run_attempt = e.attempt, run_started_at = e.started_at, run_scheduled_for = e.scheduled_for,
    run_note = e.note
FROM tickwork_executions e
WHERE t.status = 'RUNNING' AND e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING';
DELETE FROM tickwork_executions e USING tickwork_tasks t WHERE e.id = t.run_id AND e.status = 'RUNNING';

-- Rows written once are not updated (but by a rare note_execution, and an old-way row
-- of a rolling upgrade ended once): the room fillfactor 70 left in each page for their
-- updates is of no use from now on. The view's running branch is postgres.sql's
-- run_on_task_row (a view cannot take a fragment): the two change together.
ALTER TABLE tickwork_executions SET (fillfactor = 100);

CREATE VIEW tickwork_runs AS
SELECT id, task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence,
       error_type, error_message, error_traceback, result, note, skipped_count, skipped_last
FROM tickwork_executions
UNION ALL
SELECT t.run_id, t.id, t.run_attempt, t.run_scheduled_for, t.run_started_at, NULL, 'RUNNING', t.lease_owner, t.version,
       NULL, NULL, NULL, NULL, t.run_note, NULL, NULL
FROM tickwork_tasks t
WHERE t.status = 'RUNNING' AND t.run_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM tickwork_executions e WHERE e.id = t.run_id)
  AND NOT EXISTS (SELECT 1 FROM (SELECT e.fence, e.status FROM tickwork_executions e WHERE e.task_id = t.id
                              ORDER BY e.id DESC LIMIT 1) AS latest
                  WHERE latest.fence = t.version AND latest.status = 'RUNNING');
