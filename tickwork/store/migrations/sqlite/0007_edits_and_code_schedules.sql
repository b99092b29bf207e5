-- Schedules kept in code, edits at runtime, and the ends of a recurring schedule.
-- origin: 'code' for a schedule declared with @app.periodic (sync_schedules owns it),
-- NULL for one scheduled at runtime, which a sync never touches. declared_at: when the
-- declaration set that last wrote this schedule was first seen, so that an older set
-- (a node of the previous release, during a rolling deploy) cannot undo a newer one.
ALTER TABLE tickwork_tasks ADD COLUMN origin TEXT;
ALTER TABLE tickwork_tasks ADD COLUMN declared_at INTEGER;
-- When a sync cancelled this code schedule because code no longer declared it: declared
-- again later, it is created anew (an ended schedule otherwise stays ended).
ALTER TABLE tickwork_tasks ADD COLUMN removed_at INTEGER;
-- No slot after until_at, no run after the max_runs-th: the task then ends COMPLETED.
ALTER TABLE tickwork_tasks ADD COLUMN until_at INTEGER;
ALTER TABLE tickwork_tasks ADD COLUMN max_runs INTEGER;
-- Bumped by every edit (update, retry, sync): the optimistic lock of edits, beside
-- version, which only claims bump, since it is the running run's fence.
ALTER TABLE tickwork_tasks ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
-- The slot (and its dispatch time) an edit of a running task's schedule moved it to:
-- taken when that run ends and the task moves on, so the run finishes as it began.
ALTER TABLE tickwork_tasks ADD COLUMN replan_at INTEGER;
ALTER TABLE tickwork_tasks ADD COLUMN replan_run_at INTEGER;

-- A sync reads the code schedules of its keys, ended ones included (their declared_at
-- says which declaration removed them).
CREATE INDEX tickwork_tasks_code ON tickwork_tasks (key) WHERE origin = 'code';

-- Every declaration set a node ever synced, and when it was first seen.
CREATE TABLE tickwork_schedule_sets (
    digest     TEXT    PRIMARY KEY,
    first_seen INTEGER NOT NULL
);
