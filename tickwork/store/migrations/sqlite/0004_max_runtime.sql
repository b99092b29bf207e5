-- The longest a run may take, heartbeats or not: past it the reconciler of any node
-- ends the run TIMED_OUT and the retry rules apply (NULL: no limit).
ALTER TABLE tickwork_tasks ADD COLUMN max_runtime REAL;
