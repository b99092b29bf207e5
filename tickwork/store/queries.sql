-- Named queries, portable across stores. Parameters are :name placeholders; a store's
-- own file (e.g. sqlite.sql) may override any query by name. Every write that concerns
-- a claimed run is fenced by id, version and lease_owner.

-- name: live_task_by_key
-- The live task holding an idempotency key.
SELECT * FROM tickwork_tasks
WHERE key = :key AND status IN ('PENDING', 'RUNNING', 'PAUSED');

-- Fragments ({{name}} in another query: tickwork/store/queries.py). Claims and counts
-- read the PENDING tasks through two partial indexes (migrations 0012 and 0013): plain
-- tasks (priority 0, no limit) by (queue, next_run_at, id), the lane by (priority DESC,
-- next_run_at, id). A read across queues or priorities walks them one queue or one
-- priority at a time, each walk a range that stops at its LIMIT or at what is due, so
-- what it costs does not grow with other queues' backlogs or with future tasks.

-- name: new_task_columns
-- (A fragment.) The columns a new task's insert writes (insert_task, insert_tasks in
-- postgres.sql and sqlite.sql; the id, when taken first, before them): the values are
-- encoding.task_row's, every other column takes its default.
name, args, kwargs, key, kind, cron, timezone, interval_seconds, scheduled_at,
    next_run_at, status, misfire, misfire_grace, jitter, timeout, max_retries,
    retry_backoff, priority, max_catchup, overlap, parent_id, on_lost, max_runtime,
    until_at, max_runs, origin, declared_at, max_lost, queue, lock, max_running, rate_limit,
    created_at, updated_at

-- name: queue_scan
-- The queues that have PENDING plain tasks, and the lane's priorities: a loose scan of
-- each index's first column, one index probe per queue or priority found.
pending_queues(queue) AS (
    -- (ORDER BY ... LIMIT 1, not MIN: the planner may read a whole index for a MIN.)
    SELECT (SELECT queue FROM tickwork_tasks
            WHERE status = 'PENDING' AND priority = 0 AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
            ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT t.queue FROM tickwork_tasks t
            WHERE t.status = 'PENDING' AND t.priority = 0
              AND t.lock IS NULL AND t.max_running IS NULL AND t.rate_limit IS NULL AND t.queue > q.queue
            ORDER BY t.queue LIMIT 1)
    FROM pending_queues q WHERE q.queue IS NOT NULL
),
lane_priorities(priority) AS (
    SELECT (SELECT priority FROM tickwork_tasks
            WHERE status = 'PENDING'
              AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
            ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM tickwork_tasks t
            WHERE t.status = 'PENDING'
              AND (t.priority <> 0 OR t.lock IS NOT NULL OR t.max_running IS NOT NULL OR t.rate_limit IS NOT NULL)
              AND t.priority < p.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM lane_priorities p WHERE p.priority IS NOT NULL
)

-- name: due_in_queues
-- (A fragment.) Due plain tasks per queue with PENDING plain tasks, and the oldest one's
-- dispatch time: two walks of that queue's due part (ORDER BY ... LIMIT 1, not MIN: the
-- planner may read a whole index for a MIN).
SELECT q.queue,
    (SELECT COUNT(*) FROM tickwork_tasks t
     WHERE t.queue = q.queue AND t.status = 'PENDING' AND t.next_run_at <= :now AND t.priority = 0
       AND t.lock IS NULL AND t.max_running IS NULL AND t.rate_limit IS NULL),
    (SELECT t.next_run_at FROM tickwork_tasks t
     WHERE t.queue = q.queue AND t.status = 'PENDING' AND t.next_run_at <= :now AND t.priority = 0
       AND t.lock IS NULL AND t.max_running IS NULL AND t.rate_limit IS NULL
     ORDER BY t.next_run_at LIMIT 1)
FROM pending_queues q WHERE q.queue IS NOT NULL

-- name: due_per_queue
-- Due PENDING tasks per queue and the oldest one's dispatch time, counted one queue (and
-- one lane priority) at a time over the due part of each index. A queue may come twice
-- (plain and lane), or with nothing due: readers sum, and filter after the sum (a filter
-- on "due" would be pushed into the CTE and count each queue twice). postgres.sql has its
-- own, with a LATERAL read of each lane priority.
{{queue_scan}},
due_per_queue(queue, due, oldest) AS (
    {{due_in_queues}}
    UNION ALL
    -- (Each priority's rows by a correlated subquery: as a plain join, SQLite would build a
    -- Bloom filter of the whole table first.)
    SELECT t.queue, COUNT(*), MIN(t.next_run_at)
    FROM lane_priorities p JOIN tickwork_tasks t ON t.id IN (
        SELECT i.id FROM tickwork_tasks i
        WHERE i.priority = p.priority AND i.status = 'PENDING' AND i.next_run_at <= :now
          AND (i.priority <> 0 OR i.lock IS NOT NULL OR i.max_running IS NOT NULL OR i.rate_limit IS NOT NULL))
    GROUP BY t.queue
)

-- name: fail_undecodable
-- A claimed task its node cannot read, written just after the claim: still under that
-- claim's fence.
UPDATE tickwork_tasks
SET status = 'FAILED', last_status = 'FAILED', lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE id = :id AND version = :fence AND lease_owner = :node;

-- name: fail_undecodable_run
UPDATE tickwork_executions
SET status = 'FAILED', finished_at = :now, error_type = 'UndecodableTask',
    error_message = 'the stored task could not be read by this version of tickwork'
WHERE id = :execution_id AND status = 'RUNNING';

-- name: renew_lease
UPDATE tickwork_tasks SET lease_expires_at = :lease_until
WHERE id = :id AND version = :fence AND lease_owner = :node AND status = 'RUNNING'
RETURNING id, cancel_requested, cancel_run_only;

-- name: settled_task
-- (A fragment: the SET list of write_outcomes_batch in postgres.sql and sqlite.sql, over
-- the task t and the outcome o.) Apply the policy's decision for an ended run. The
-- statements write only where the fence holds; the reconciler reaping a lost run
-- (:expired_only) only while the lease is still expired, so that a renewal landing
-- first wins; one ending an overrun run needs only the fence.
-- Cancel wins: the status and cancel flags are tickwork.schedules.cancel_wins, applied
-- here to the flags as they are at the write (tests/test_store_rules.py holds this copy
-- to that function's table).
-- An edit made while the run went on (replan_at set) overrides two parts of the decision
-- made from the claim's snapshot (tickwork.schedules.edited_decision, held to the same
-- table): the task takes the edited slot when it moves on (PENDING, no attempt pending),
-- and a recurring task that the ends it was claimed with completed goes on to that slot
-- instead when the task's ends as they are now allow it (until_at, max_runs: an edit may
-- have moved them). Any other end of the task spends the replan. A run of the same slot
-- again (a lost or interrupted run: NOT o.counts, attempt back to where it was) keeps it
-- for when that slot has run. (An end that is NULL allows any slot: COALESCE(..., TRUE);
-- written so, the fragment keeps postgres.sql's statement within psycopg's query cache.)
    status = CASE WHEN t.cancel_requested AND NOT t.cancel_run_only
                           AND (o.task_status <> 'COMPLETED' OR (t.kind = 'RECURRING' AND t.replan_at IS NOT NULL
                                                         AND COALESCE(t.replan_at <= t.until_at, TRUE)
                                                         AND COALESCE(t.run_count + 1 < t.max_runs, TRUE)))
                      THEN 'CANCELLED'
                      WHEN o.task_status = 'COMPLETED' AND t.kind = 'RECURRING' AND t.replan_at IS NOT NULL
                           AND COALESCE(t.replan_at <= t.until_at, TRUE)
                           AND COALESCE(t.run_count + 1 < t.max_runs, TRUE)
                      THEN 'PENDING'
                      ELSE o.task_status END,
        cancel_requested = t.cancel_requested AND NOT t.cancel_run_only
                           AND (o.task_status <> 'COMPLETED' OR (t.kind = 'RECURRING' AND t.replan_at IS NOT NULL
                                                         AND COALESCE(t.replan_at <= t.until_at, TRUE)
                                                         AND COALESCE(t.run_count + 1 < t.max_runs, TRUE))),
        cancel_run_only = FALSE,
        scheduled_at = CASE WHEN t.replan_at IS NOT NULL AND o.attempt = 0 AND o.counts
                                 AND (o.task_status = 'PENDING' OR (o.task_status = 'COMPLETED' AND t.kind = 'RECURRING'
                                      AND COALESCE(t.replan_at <= t.until_at, TRUE)
                                      AND COALESCE(t.run_count + 1 < t.max_runs, TRUE)))
                            THEN t.replan_at ELSE o.scheduled_at END,
        next_run_at = CASE WHEN t.replan_at IS NOT NULL AND o.attempt = 0 AND o.counts
                                AND (o.task_status = 'PENDING' OR (o.task_status = 'COMPLETED' AND t.kind = 'RECURRING'
                                      AND COALESCE(t.replan_at <= t.until_at, TRUE)
                                      AND COALESCE(t.run_count + 1 < t.max_runs, TRUE)))
                           THEN t.replan_run_at ELSE o.next_run_at END,
        triggered = CASE WHEN t.replan_at IS NOT NULL AND o.attempt = 0 AND o.counts
                              AND (o.task_status = 'PENDING' OR (o.task_status = 'COMPLETED' AND t.kind = 'RECURRING'
                                      AND COALESCE(t.replan_at <= t.until_at, TRUE)
                                      AND COALESCE(t.run_count + 1 < t.max_runs, TRUE)))
                         THEN FALSE ELSE o.triggered END,
        replan_at = CASE WHEN o.task_status = 'PENDING' AND (o.attempt <> 0 OR NOT o.counts)
                              AND NOT (t.cancel_requested AND NOT t.cancel_run_only)
                         THEN t.replan_at END,
        replan_run_at = CASE WHEN o.task_status = 'PENDING' AND (o.attempt <> 0 OR NOT o.counts)
                                  AND NOT (t.cancel_requested AND NOT t.cancel_run_only)
                             THEN t.replan_run_at END,
        attempt = o.attempt, last_status = o.status,
        run_count = t.run_count + CASE WHEN o.status = 'SKIPPED' OR NOT o.counts THEN 0 ELSE 1 END,
        lost_runs = o.lost_runs,
        last_decision = COALESCE(o.decision, t.last_decision),
        lease_owner = NULL, lease_expires_at = NULL, updated_at = :now

-- name: release_task
-- Give back a claim that never started: the attempt did not happen. Its status is
-- cancel_wins of the decision PENDING (tests/test_store_rules.py).
UPDATE tickwork_tasks
SET status = CASE WHEN cancel_requested AND NOT cancel_run_only THEN 'CANCELLED' ELSE 'PENDING' END,
    cancel_requested = cancel_requested AND NOT cancel_run_only, cancel_run_only = FALSE,
    -- A pending replan waits for the end of the run this claim's slot will still get
    -- (the slot never ran); a cancel that wins spends it.
    replan_run_at = CASE WHEN cancel_requested AND NOT cancel_run_only THEN NULL ELSE replan_run_at END,
    replan_at = CASE WHEN cancel_requested AND NOT cancel_run_only THEN NULL ELSE replan_at END,
    attempt = attempt - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = :now
WHERE id = :task_id AND version = :fence AND lease_owner = :node AND status = 'RUNNING'
RETURNING id;

-- name: delete_execution
DELETE FROM tickwork_executions WHERE id = :execution_id AND status = 'RUNNING';

-- name: expired_runs
-- Runs whose owner stopped renewing: candidates for the reconciler.
SELECT t.*, e.id AS execution_id, e.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t
JOIN tickwork_executions e ON e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING'
WHERE t.status = 'RUNNING' AND t.lease_expires_at < :now
  AND t.id NOT IN (SELECT value FROM json_each(:exclude))
ORDER BY t.lease_expires_at
LIMIT :limit;

-- name: claimed_since
-- This node's runs claimed at or after :since: after a claim whose reply was lost, the
-- ones the node never received (and so never started) are among them.
SELECT t.*, e.id AS execution_id, e.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t
JOIN tickwork_executions e ON e.task_id = t.id AND e.fence = t.version AND e.status = 'RUNNING'
WHERE t.status = 'RUNNING' AND t.lease_owner = :node AND e.started_at >= :since
ORDER BY t.id;

-- name: get_task
SELECT * FROM tickwork_tasks WHERE id = :id;

-- name: list_tasks
SELECT * FROM tickwork_tasks
WHERE (:status IS NULL OR status = :status) AND (:name IS NULL OR name = :name)
  AND (:kind IS NULL OR kind = :kind) AND (:queue IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit OFFSET :offset;

-- name: list_tasks_newest
-- list_tasks newest first (a placeholder cannot choose the direction): the primary key
-- walked backwards, stopping at the page.
SELECT * FROM tickwork_tasks
WHERE (:status IS NULL OR status = :status) AND (:name IS NULL OR name = :name)
  AND (:kind IS NULL OR kind = :kind) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit OFFSET :offset;

-- name: list_executions
SELECT * FROM tickwork_executions
WHERE (:task_id IS NULL OR task_id = :task_id) AND (:status IS NULL OR status = :status)
ORDER BY id DESC
LIMIT :limit;

-- name: cancel_task
-- A waiting task ends now; a running one is flagged and ends when its run does.
UPDATE tickwork_tasks
SET cancel_requested = TRUE, cancel_run_only = FALSE,
    status = CASE WHEN status = 'RUNNING' THEN 'RUNNING' ELSE 'CANCELLED' END,
    replan_at = CASE WHEN status = 'RUNNING' THEN replan_at END,
    replan_run_at = CASE WHEN status = 'RUNNING' THEN replan_run_at END,
    version = CASE WHEN status = 'RUNNING' THEN version ELSE version + 1 END,
    updated_at = :now
WHERE id = :id AND status IN ('PENDING', 'PAUSED', 'RUNNING')
RETURNING *;

-- name: cancel_run
-- Stop the current run of a running recurring task; its schedule goes on.
UPDATE tickwork_tasks SET cancel_requested = TRUE, cancel_run_only = TRUE, updated_at = :now
WHERE id = :id AND status = 'RUNNING' AND kind = 'RECURRING' AND NOT (cancel_requested AND NOT cancel_run_only)
RETURNING *;

-- name: pause_task
UPDATE tickwork_tasks SET status = 'PAUSED', version = version + 1, updated_at = :now
WHERE id = :id AND status = 'PENDING'
RETURNING *;

-- name: resume_task
UPDATE tickwork_tasks SET status = 'PENDING', version = version + 1, updated_at = :now
WHERE id = :id AND status = 'PAUSED'
RETURNING *;

-- name: resume_skipping
-- Resume without catching up: move to the next slot and keep the decision.
UPDATE tickwork_tasks
SET status = 'PENDING', version = version + 1, scheduled_at = :scheduled_at, next_run_at = :next_run_at,
    last_decision = :decision, updated_at = :now
WHERE id = :id AND status = 'PAUSED' AND version = :version
RETURNING *;

-- name: insert_skipped
-- The record of slots a decision skipped without a claim (resume without catch-up).
INSERT INTO tickwork_executions
    (task_id, attempt, scheduled_for, started_at, finished_at, status, note, skipped_count, skipped_last)
VALUES (:id, 0, :skipped_first, :now, :now, 'SKIPPED', :decision, :skipped, :skipped_last);

-- name: lock_task
-- Serialises writers of one task's backfill (the SQLite file lock already does).
SELECT id FROM tickwork_tasks WHERE id = :id;

-- name: taken_slots
-- Slots of a recurring task in [:start, :end] that already completed (the task's own
-- runs or backfill runs) or are waiting in a live backfill run.
SELECT e.scheduled_for AS slot
FROM tickwork_executions e JOIN tickwork_tasks t ON t.id = e.task_id
WHERE (t.id = :id OR t.parent_id = :id) AND e.status = 'COMPLETED'
  AND e.scheduled_for >= :start AND e.scheduled_for <= :end
UNION
SELECT scheduled_at AS slot FROM tickwork_tasks
WHERE parent_id = :id AND status IN ('PENDING', 'RUNNING', 'PAUSED')
  AND scheduled_at >= :start AND scheduled_at <= :end;

-- name: trigger_task
UPDATE tickwork_tasks
SET next_run_at = :now,
    scheduled_at = CASE WHEN kind = 'ONE_TIME' THEN :now ELSE scheduled_at END,
    triggered = (kind = 'RECURRING'),
    version = version + 1, updated_at = :now
WHERE id = :id AND status = 'PENDING'
RETURNING *;

-- name: upsert_node
INSERT INTO tickwork_nodes (id, host, pid, started_at, heartbeat_at, capacity, running)
VALUES (:id, :host, :pid, :started_at, :now, :capacity, :running)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, capacity = excluded.capacity, running = excluded.running;

-- name: node_heartbeat
UPDATE tickwork_nodes SET heartbeat_at = :now, running = :running, stuck = :stuck WHERE id = :id;

-- name: end_execution
-- A run's execution ends while its task stays RUNNING (its thread past its timeout has
-- not let go): fenced by the task's version and lease, and only while the row runs.
UPDATE tickwork_executions
SET status = :status, finished_at = :finished_at, error_type = :error_type, error_message = :error_message,
    error_traceback = :error_traceback, note = :note
WHERE id = :id AND status = 'RUNNING'
  AND EXISTS (SELECT 1 FROM tickwork_tasks
              WHERE id = :task_id AND version = :fence AND lease_owner = :node AND status = 'RUNNING');

-- name: note_execution
-- What a node learnt of a run after recording it (its thread did not stop).
UPDATE tickwork_executions
SET note = CASE WHEN note IS NULL OR note = '' THEN :text ELSE note || '; ' || :text END
WHERE id = :id;

-- name: delete_node
DELETE FROM tickwork_nodes WHERE id = :id;

-- name: prune_nodes
-- Rows of nodes that died without removing themselves.
DELETE FROM tickwork_nodes WHERE heartbeat_at < :cutoff;

-- name: list_nodes
SELECT * FROM tickwork_nodes ORDER BY started_at;

-- name: queue_depth
-- Due and unclaimed: what the nodes have not caught up with, read from the claim
-- indexes, so every replica reports the same at scrape time.
WITH RECURSIVE {{due_per_queue}}
SELECT COALESCE(SUM(due), 0) AS depth, MIN(oldest) AS oldest FROM due_per_queue;

-- name: count_by_status
SELECT status, COUNT(*) AS n FROM tickwork_tasks GROUP BY status;

-- name: recent_runs
-- Runs that ended in the last minute and hour, by status, from the newest :window
-- executions (a bounded walk of the primary key, not a scan of the whole log).
SELECT status,
       SUM(CASE WHEN finished_at >= :minute_ago THEN 1 ELSE 0 END) AS last_minute,
       SUM(CASE WHEN finished_at >= :hour_ago THEN 1 ELSE 0 END) AS last_hour,
       COUNT(*) AS seen
FROM (SELECT status, finished_at FROM tickwork_executions ORDER BY id DESC LIMIT :window) AS recent
WHERE finished_at IS NOT NULL
GROUP BY status;

-- name: due_count
-- Due by :due_by and unclaimed, counted up to :limit only (a producer's backpressure
-- check must stay cheap however deep the queue is). :due_by, not the statement's own
-- now(): it must judge the rows just inserted by the same clock that stamped them.
WITH RECURSIVE {{queue_scan}}
SELECT COUNT(*) AS n FROM (
    SELECT 1 AS one FROM pending_queues q JOIN tickwork_tasks t ON t.id IN (
        SELECT i.id FROM tickwork_tasks i
        WHERE i.queue = q.queue AND i.status = 'PENDING' AND i.next_run_at <= :due_by AND i.priority = 0
          AND i.lock IS NULL AND i.max_running IS NULL AND i.rate_limit IS NULL
        LIMIT :limit)
    UNION ALL
    SELECT 1 FROM lane_priorities p JOIN tickwork_tasks t ON t.id IN (
        SELECT i.id FROM tickwork_tasks i
        WHERE i.priority = p.priority AND i.status = 'PENDING' AND i.next_run_at <= :due_by
          AND (i.priority <> 0 OR i.lock IS NOT NULL OR i.max_running IS NOT NULL OR i.rate_limit IS NOT NULL)
        LIMIT :limit)
    LIMIT :limit
) AS due;

-- Signed-out dashboard sessions (by SHA-256 of the session id).
-- name: revoke_session
-- A signed-out session: every server on this database refuses it from now on.
INSERT INTO tickwork_revoked_sessions (id, expires_at) VALUES (:id, :expires_at)
ON CONFLICT (id) DO NOTHING;

-- name: prune_revoked_sessions
-- Sessions whose cookie has expired anyway need no entry.
DELETE FROM tickwork_revoked_sessions WHERE expires_at < :now;

-- name: session_revoked
SELECT 1 AS revoked FROM tickwork_revoked_sessions WHERE id = :id;

-- Task rows read without decoding them: the columns every row can give, whatever else
-- in it is broken (listings that must show rows another program wrote).
-- name: task_headers
-- In list_tasks's order and with its filters, so positions agree with its pages.
SELECT id, name, status FROM tickwork_tasks
WHERE (CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT))
  AND (CAST(:name AS TEXT) IS NULL OR name = CAST(:name AS TEXT))
  AND (CAST(:queue AS TEXT) IS NULL OR queue = CAST(:queue AS TEXT))
ORDER BY id
LIMIT :limit OFFSET :offset;

-- name: task_header
SELECT id, name, status FROM tickwork_tasks WHERE id = :id;
