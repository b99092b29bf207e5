-- Retention deletes ended one-time tasks oldest first: this index holds only those
-- (a live task is never in it), so a prune batch reads its first rows and stops.
CREATE INDEX tickwork_tasks_ended ON tickwork_tasks (updated_at)
    WHERE kind = 'ONE_TIME' AND status IN ('COMPLETED', 'FAILED', 'CANCELLED');
