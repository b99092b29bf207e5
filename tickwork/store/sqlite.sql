-- SQLite overrides of queries.sql, by name.

-- name: served_queues
-- (A fragment.) The queues a claim reads, one at a time: those given (when :all_queues,
-- every queue with PENDING plain tasks), less the paused ones.
{{queue_scan}},
served_queues(queue) AS (
    SELECT queue FROM (
        SELECT value AS queue FROM json_each(:queues) WHERE NOT :all_queues
        UNION ALL
        SELECT queue FROM pending_queues WHERE :all_queues AND queue IS NOT NULL
    )
    WHERE queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
)

-- name: claim_candidates
-- Due plain tasks this node can run, the oldest first: each queue's first :limit (a
-- correlated subquery: SQLite has no LATERAL), then the best :limit of those.
WITH RECURSIVE {{served_queues}}
SELECT t.id, t.version, t.name, t.next_run_at, t.priority, t.lock, t.max_running, t.rate_limit, 0 AS lane
FROM served_queues q JOIN tickwork_tasks t ON t.id IN (
    SELECT i.id FROM tickwork_tasks i INDEXED BY tickwork_tasks_plain
    WHERE i.queue = q.queue AND i.status = 'PENDING' AND i.next_run_at <= :due_by AND i.priority = 0
      AND (i.next_run_at <= :now OR i.kind = 'ONE_TIME')  -- claimed ahead: store/base.py
      AND i.lock IS NULL AND i.max_running IS NULL AND i.rate_limit IS NULL
      AND i.name IN (SELECT value FROM json_each(:names)) AND i.id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY i.next_run_at, i.id
    LIMIT :limit)
ORDER BY t.next_run_at, t.id
LIMIT :limit;

-- name: overrun_runs
-- Runs claimed longer ago than their max_runtime plus :grace, live lease or not (µs).
SELECT t.*, e.id AS execution_id, e.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t
JOIN tickwork_executions e ON e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING'
WHERE t.status = 'RUNNING' AND t.max_runtime IS NOT NULL
  AND e.started_at + CAST((t.max_runtime + :grace) * 1000000 AS INTEGER) < :now
ORDER BY e.started_at
LIMIT :limit;

-- name: lane_candidates
-- The lane (tickwork/store/limits.sql), one priority at a time, highest first.
WITH RECURSIVE {{queue_scan}}
SELECT t.id, t.version, t.name, t.next_run_at, t.priority, t.lock, t.max_running, t.rate_limit, 1 AS lane
FROM lane_priorities p JOIN tickwork_tasks t ON t.id IN (
    SELECT i.id FROM tickwork_tasks i INDEXED BY tickwork_tasks_lane
    WHERE i.priority = p.priority AND i.status = 'PENDING' AND i.next_run_at <= :now
      AND (i.priority <> 0 OR i.lock IS NOT NULL OR i.max_running IS NOT NULL OR i.rate_limit IS NOT NULL)
      AND i.name IN (SELECT value FROM json_each(:names))
      AND (:all_queues OR i.queue IN (SELECT value FROM json_each(:queues)))
      AND i.queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
      AND i.id NOT IN (SELECT value FROM json_each(:exclude))
    ORDER BY i.next_run_at, i.id
    LIMIT :scan)
ORDER BY t.priority DESC, t.next_run_at, t.id
LIMIT :scan;

-- name: upcoming_due
-- postgres.sql's, with correlated subqueries for LATERAL (the lane's time read once).
WITH RECURSIVE {{served_queues}},
lane(at) AS MATERIALIZED (
    SELECT MIN(CASE WHEN l.tat IS NOT NULL AND l.tat > t.next_run_at THEN l.tat ELSE t.next_run_at END)
    FROM lane_priorities p JOIN tickwork_tasks t ON t.id IN (
        SELECT i.id FROM tickwork_tasks i INDEXED BY tickwork_tasks_lane
        WHERE i.priority = p.priority AND i.status = 'PENDING'
          AND (i.priority <> 0 OR i.lock IS NOT NULL OR i.max_running IS NOT NULL OR i.rate_limit IS NOT NULL)
          AND i.name IN (SELECT value FROM json_each(:names))
          AND (:all_queues OR i.queue IN (SELECT value FROM json_each(:queues)))
          AND i.queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
        ORDER BY i.next_run_at, i.id LIMIT 64)
    LEFT JOIN tickwork_limits l ON l.key = 'rate:' || t.name
)
SELECT u.at, u.early FROM (
    SELECT t.next_run_at AS at, t.kind = 'ONE_TIME' AS early FROM served_queues q JOIN tickwork_tasks t ON t.id IN (
        SELECT i.id FROM tickwork_tasks i INDEXED BY tickwork_tasks_plain
        WHERE i.queue = q.queue AND i.status = 'PENDING' AND i.priority = 0
          AND i.lock IS NULL AND i.max_running IS NULL AND i.rate_limit IS NULL
          AND i.name IN (SELECT value FROM json_each(:names))
        ORDER BY i.next_run_at, i.id LIMIT :ahead)
    UNION ALL
    SELECT at, 0 FROM lane
) AS u
WHERE u.at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM lane WHERE lane.at < u.at)
ORDER BY u.at LIMIT :ahead;

-- name: claim_batch
-- The compare-and-set of a batch of candidates, each [id, version] (a JSON array): in the
-- write transaction that read them, so no other writer came between; the version is
-- checked all the same (a row changed since its read is skipped). Each row found by its
-- id: the first IN drives the lookups, the second checks the pair.
UPDATE tickwork_tasks
SET status = 'RUNNING', version = version + 1, lease_owner = :node,
    lease_expires_at = :lease_until, attempt = attempt + 1, updated_at = :now
WHERE id IN (SELECT json_extract(c.value, '$[0]') FROM json_each(:candidates) AS c)
  AND (id, version) IN (SELECT json_extract(c.value, '$[0]'), json_extract(c.value, '$[1]') FROM json_each(:candidates) AS c)
  AND status = 'PENDING' AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
RETURNING *;

-- name: log_claimed_runs
-- The execution rows of the runs claim_batch just claimed (:ids), in the same transaction.
-- scheduled_for is tickwork.schedules.run_slot (tests/test_store_rules.py); a run claimed
-- ahead of its due time starts when due (MAX: SQLite's GREATEST).
INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, status, node, fence)
SELECT id, attempt, CASE WHEN triggered THEN next_run_at ELSE scheduled_at END, MAX(:now, next_run_at),
    'RUNNING', :node, version
FROM tickwork_tasks WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, task_id, scheduled_for;

-- name: create_outcome_batch
-- A batch of outcomes, one row each (encoding.OUTCOME_COLUMNS, times as the store keeps
-- them, a result as its JSON text), for the two statements that write it: a table of
-- each connection's own (TEMP), filled by one executemany. Read from JSON text instead,
-- each field cost a parse of its outcome's whole object (SQLite before 3.45 keeps no
-- parse), ~13 us an outcome per statement, under the file's write lock. Each row also
-- holds its batch's token (batch), by which a write tells the table holds its batch
-- (hot.RowByRow: it is filled before the write transaction).
CREATE TEMP TABLE IF NOT EXISTS tickwork_outcome_batch (
    pos INTEGER PRIMARY KEY, task_id, fence, execution_id, status, task_status, scheduled_at, next_run_at,
    finished_at, started_at, attempt, triggered, error_type, error_message, error_traceback, result, note,
    skipped, skipped_last, decision, counts, lost_runs, batch
);

-- name: clear_outcome_batch
DELETE FROM temp.tickwork_outcome_batch;

-- name: add_outcome_batch
INSERT INTO temp.tickwork_outcome_batch VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: outcome_batch_token
-- The token of the batch the connection's outcome table holds (none: it holds none).
SELECT batch FROM temp.tickwork_outcome_batch WHERE pos = 0;

-- name: write_outcomes_batch
-- The task side of a batch of outcomes in one statement (the execution rows:
-- finish_executions_batch, for the outcomes that applied), each row fenced by its own
-- version and lease owner: postgres.sql's, as SQLite can write it (no data-modifying
-- WITH, RETURNING of the updated table only). Found by id, the batch driving the lookups:
-- its rows are named by their positions (:positions, all of them), a list the planner
-- knows is short; over the bare table, with statistics, SQLite would first build a Bloom
-- filter of the running tasks by reading every one (tests/test_sqlite_batches.py).
UPDATE tickwork_tasks AS t
SET {{settled_task}}
FROM temp.tickwork_outcome_batch AS o
WHERE o.pos IN (SELECT value FROM json_each(:positions)) AND t.id = o.task_id AND t.version = o.fence AND t.lease_owner = :node AND t.status = 'RUNNING'
  AND (NOT :expired_only OR t.lease_expires_at < :now)
RETURNING id, version;

-- name: finish_executions_batch
-- The execution rows of the outcomes write_outcomes_batch applied (:positions, theirs in
-- the batch). A run that never started (claimed ahead, cancelled before its
-- due time) keeps a start no later than its end (two-argument MIN: SQLite's LEAST).
-- (+e.status: the batch drives the lookups by id, not the status index.)
UPDATE tickwork_executions AS e
SET status = o.status, started_at = COALESCE(o.started_at, MIN(e.started_at, o.finished_at)),
    finished_at = o.finished_at, error_type = o.error_type, error_message = o.error_message,
    error_traceback = o.error_traceback, result = o.result, note = o.note, skipped_count = o.skipped,
    skipped_last = o.skipped_last
FROM temp.tickwork_outcome_batch AS o
WHERE o.pos IN (SELECT value FROM json_each(:positions)) AND e.id = o.execution_id AND +e.status = 'RUNNING';

-- name: allocate_task_ids
-- Ids for the tasks one insert_tasks adds, as one JSON array (see postgres.sql): the next ones after the
-- table's AUTOINCREMENT counter, which no other writer moves while this transaction
-- holds the file's write lock.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n)
SELECT json_group_array(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tickwork_tasks'), 0) + i) AS ids
FROM n;

-- name: insert_tasks
-- One task of a batch (Session.insert_rows runs it once per row, in order): a key a live
-- task already holds, or an earlier task of the batch, inserts nothing.
INSERT INTO tickwork_tasks (id, {{new_task_columns}})
VALUES (
    :id, :name, :args, :kwargs, :key, :kind, :cron, :timezone, :interval_seconds, :scheduled_at,
    :next_run_at, 'PENDING', :misfire, :misfire_grace, :jitter, :timeout, :max_retries,
    :retry_backoff, :priority, :max_catchup, :overlap, :parent_id, :on_lost, :max_runtime,
    :until_at, :max_runs, :origin, :declared_at, :max_lost, :queue, :lock, :max_running, :rate_limit,
    :created_at, :created_at)
ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED')
DO NOTHING;

-- name: copy_tasks
-- One task that holds no key (Session.copy_rows runs it once per row), its values in the
-- order of encoding.task_values.
INSERT INTO tickwork_tasks (id, {{new_task_columns}})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_task
-- One task (schedule()), its id from AUTOINCREMENT; no row returned when a live task
-- holds its key.
INSERT INTO tickwork_tasks ({{new_task_columns}})
VALUES (
    :name, :args, :kwargs, :key, :kind, :cron, :timezone, :interval_seconds, :scheduled_at,
    :next_run_at, 'PENDING', :misfire, :misfire_grace, :jitter, :timeout, :max_retries,
    :retry_backoff, :priority, :max_catchup, :overlap, :parent_id, :on_lost, :max_runtime,
    :until_at, :max_runs, :origin, :declared_at, :max_lost, :queue, :lock, :max_running, :rate_limit,
    :created_at, :created_at)
ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED')
DO NOTHING
RETURNING id;

-- name: inserted_task_ids
-- Which of an insert_tasks batch's ids were inserted (the others' keys were held).
SELECT id FROM tickwork_tasks WHERE id IN (SELECT value FROM json_each(:ids));
