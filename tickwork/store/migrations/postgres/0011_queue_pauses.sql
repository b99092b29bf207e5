-- Queues an operator paused (app.pause_queue): their tasks are not claimed until resumed.
-- A queue without a row here is not paused.
CREATE TABLE tickwork_queues (
    name       TEXT        PRIMARY KEY,
    paused     BOOLEAN     NOT NULL DEFAULT FALSE,
    changed_at TIMESTAMPTZ NOT NULL
);
