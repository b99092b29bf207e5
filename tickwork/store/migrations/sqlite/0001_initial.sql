-- Times are INTEGER microseconds since the Unix epoch, UTC: exact and cheap to compare.
CREATE TABLE tickwork_tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL,
    args             TEXT    NOT NULL DEFAULT '[]',
    kwargs           TEXT    NOT NULL DEFAULT '{}',
    key              TEXT,
    kind             TEXT    NOT NULL CHECK (kind IN ('ONE_TIME', 'RECURRING')),
    cron             TEXT,
    timezone         TEXT    NOT NULL DEFAULT 'UTC',
    interval_seconds REAL,
    scheduled_at     INTEGER NOT NULL,
    next_run_at      INTEGER NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN
                         ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'PAUSED')),
    misfire          TEXT    NOT NULL DEFAULT 'SINGLE_CATCHUP',
    misfire_grace    REAL    NOT NULL DEFAULT 60,
    jitter           REAL    NOT NULL DEFAULT 0,
    timeout          REAL,
    max_retries      INTEGER NOT NULL DEFAULT 0,
    retry_backoff    REAL    NOT NULL DEFAULT 1,
    priority         INTEGER NOT NULL DEFAULT 0,
    version          INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    triggered        INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0,
    run_count        INTEGER NOT NULL DEFAULT 0,
    last_status      TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);

-- The claim walks this in its ORDER BY order and stops at its LIMIT, however many tasks
-- are due; "when is the next one due" reads its first PENDING entry. Priority breaks
-- ties between tasks due at the same time, as in Quartz.
CREATE INDEX tickwork_tasks_claim ON tickwork_tasks (status, next_run_at, priority DESC, id);
CREATE INDEX tickwork_tasks_lease ON tickwork_tasks (lease_expires_at) WHERE status = 'RUNNING';
CREATE UNIQUE INDEX tickwork_tasks_key ON tickwork_tasks (key)
    WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED');

CREATE TABLE tickwork_executions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id         INTEGER NOT NULL REFERENCES tickwork_tasks (id) ON DELETE CASCADE,
    attempt         INTEGER NOT NULL,
    scheduled_for   INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER,
    status          TEXT    NOT NULL CHECK (status IN
                        ('RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'SKIPPED')),
    node            TEXT,
    fence           INTEGER,
    error_type      TEXT,
    error_message   TEXT,
    error_traceback TEXT,
    result          TEXT,
    note            TEXT
);

CREATE INDEX tickwork_executions_task ON tickwork_executions (task_id, id);
CREATE INDEX tickwork_executions_status ON tickwork_executions (status, id);

CREATE TABLE tickwork_nodes (
    id           TEXT    PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    capacity     INTEGER NOT NULL,
    running      INTEGER NOT NULL DEFAULT 0
);
