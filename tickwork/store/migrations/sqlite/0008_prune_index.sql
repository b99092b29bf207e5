-- Retention walks old executions oldest slot first (prune_executions in retention.sql):
-- a prune batch reads the first rows of this index and stops, and a pass with nothing
-- old is one lookup instead of a scan of the table. scheduled_for is written once, when
-- the run is claimed, so finishing a run changes no indexed column (a HOT update).
CREATE INDEX tickwork_executions_slot ON tickwork_executions (scheduled_for);
