-- Missed executions, overlap and backfill: per-task policy columns, the last decision
-- taken about a task, the parent of a backfill run, and what a SKIPPED execution skipped.
ALTER TABLE tickwork_tasks ADD COLUMN max_catchup INTEGER NOT NULL DEFAULT 100;
ALTER TABLE tickwork_tasks ADD COLUMN overlap TEXT NOT NULL DEFAULT 'skip';
ALTER TABLE tickwork_tasks ADD COLUMN last_decision TEXT;
ALTER TABLE tickwork_tasks ADD COLUMN parent_id BIGINT;
ALTER TABLE tickwork_executions ADD COLUMN skipped_count INTEGER;
ALTER TABLE tickwork_executions ADD COLUMN skipped_last TIMESTAMPTZ;
CREATE INDEX tickwork_tasks_parent ON tickwork_tasks (parent_id) WHERE parent_id IS NOT NULL;
