-- Lost runs run again (on_lost='retry'): up to max_lost in a row, counted in lost_runs
-- apart from the retries of max_retries, so that a task that kills its node cannot
-- loop for ever. lost_runs is set by every outcome write: one more for a lost run run
-- again, 0 for any run that ended on its node and for a new slot.
ALTER TABLE tickwork_tasks ADD COLUMN max_lost INTEGER NOT NULL DEFAULT 3;
ALTER TABLE tickwork_tasks ADD COLUMN lost_runs INTEGER NOT NULL DEFAULT 0;

-- The runs whose thread a node could not stop (a cancel or timeout it ignored), as a
-- JSON list written with the node's heartbeat: each keeps one of its slots busy until
-- it returns, which the dashboard shows beside the node's running tasks.
ALTER TABLE tickwork_nodes ADD COLUMN stuck TEXT;

-- The queue's depth and oldest due age once a minute (the dashboard's chart of the last
-- hour): every node samples, the minute's key keeps one row; a day is kept.
CREATE TABLE tickwork_queue_samples (
    minute     INTEGER PRIMARY KEY,
    depth      INTEGER NOT NULL,
    oldest_age REAL
);
