-- Retention deletes ended executions oldest finished first: this index holds only those
-- (a RUNNING execution enters it when it ends), so a prune batch reads its first rows
-- and stops, and a pass with nothing old is one lookup instead of a scan of the table.
CREATE INDEX tickwork_executions_ended ON tickwork_executions (finished_at) WHERE status <> 'RUNNING';
