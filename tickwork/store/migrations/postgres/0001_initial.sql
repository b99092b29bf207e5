-- The PostgreSQL schema: the same tables, columns and version numbers as SQLite's,
-- in native types (timestamptz, jsonb, boolean). Every run writes each table twice, so
-- indexes are few and partial (each holds only the rows a hot query reads), and pages
-- keep free space so that updates which change no indexed column stay HOT. Listings by
-- status walk the primary key.
CREATE TABLE tickwork_tasks (
    id               BIGSERIAL PRIMARY KEY,
    name             TEXT             NOT NULL,
    args             JSONB            NOT NULL DEFAULT '[]',
    kwargs           JSONB            NOT NULL DEFAULT '{}',
    key              TEXT,
    kind             TEXT             NOT NULL CHECK (kind IN ('ONE_TIME', 'RECURRING')),
    cron             TEXT,
    timezone         TEXT             NOT NULL DEFAULT 'UTC',
    interval_seconds DOUBLE PRECISION,
    scheduled_at     TIMESTAMPTZ      NOT NULL,
    next_run_at      TIMESTAMPTZ      NOT NULL,
    status           TEXT             NOT NULL CHECK (status IN
                         ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'PAUSED')),
    misfire          TEXT             NOT NULL DEFAULT 'SINGLE_CATCHUP',
    misfire_grace    DOUBLE PRECISION NOT NULL DEFAULT 60,
    jitter           DOUBLE PRECISION NOT NULL DEFAULT 0,
    timeout          DOUBLE PRECISION,
    max_retries      INTEGER          NOT NULL DEFAULT 0,
    retry_backoff    DOUBLE PRECISION NOT NULL DEFAULT 1,
    priority         INTEGER          NOT NULL DEFAULT 0,
    version          BIGINT           NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    cancel_requested BOOLEAN          NOT NULL DEFAULT FALSE,
    triggered        BOOLEAN          NOT NULL DEFAULT FALSE,
    attempt          INTEGER          NOT NULL DEFAULT 0,
    run_count        BIGINT           NOT NULL DEFAULT 0,
    last_status      TEXT,
    created_at       TIMESTAMPTZ      NOT NULL,
    updated_at       TIMESTAMPTZ      NOT NULL
) WITH (fillfactor = 70);

-- Claims walk this in ORDER BY order from the oldest due task and stop at their LIMIT
-- (however many are due, whatever the statistics say); MIN(next_run_at) reads its
-- first entry. Priority breaks ties between tasks due at the same time, as in Quartz.
CREATE INDEX tickwork_tasks_claim ON tickwork_tasks (next_run_at, priority DESC, id)
    WHERE status = 'PENDING';
CREATE INDEX tickwork_tasks_lease ON tickwork_tasks (lease_expires_at) WHERE status = 'RUNNING';
CREATE UNIQUE INDEX tickwork_tasks_key ON tickwork_tasks (key)
    WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED');

CREATE TABLE tickwork_executions (
    id              BIGSERIAL   PRIMARY KEY,
    -- No foreign key: execution rows are only ever written in the statement that claims
    -- their task, and its per-row check would cost every claim a lock on the task row.
    task_id         BIGINT      NOT NULL,
    attempt         INTEGER     NOT NULL,
    scheduled_for   TIMESTAMPTZ NOT NULL,
    started_at      TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ,
    status          TEXT        NOT NULL CHECK (status IN
                        ('RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'SKIPPED')),
    node            TEXT,
    fence           BIGINT,
    error_type      TEXT,
    error_message   TEXT,
    error_traceback TEXT,
    result          JSONB,
    note            TEXT
) WITH (fillfactor = 70);

CREATE INDEX tickwork_executions_task ON tickwork_executions (task_id, id);

CREATE TABLE tickwork_nodes (
    id           TEXT        PRIMARY KEY,
    host         TEXT        NOT NULL,
    pid          INTEGER     NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    capacity     INTEGER     NOT NULL,
    running      INTEGER     NOT NULL DEFAULT 0
);
