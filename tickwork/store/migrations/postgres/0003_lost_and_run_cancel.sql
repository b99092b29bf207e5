-- What the reconciler does with a run whose node vanished: 'retry' (a failed attempt,
-- then the retry and recurrence rules) or 'fail' (the task ends FAILED).
ALTER TABLE tickwork_tasks ADD COLUMN on_lost TEXT NOT NULL DEFAULT 'retry';
-- cancel(run_only=True): stop the current run of a recurring task, keep its schedule.
ALTER TABLE tickwork_tasks ADD COLUMN cancel_run_only BOOLEAN NOT NULL DEFAULT FALSE;
