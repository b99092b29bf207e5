-- PostgreSQL overrides of queries.sql, by name, and the queries only it has.
-- :now is replaced by now() when loaded: the database clock decides what is due and
-- when a lease ends, so nodes with skewed clocks agree. Leases run from
-- clock_timestamp(), the moment the row is written: a statement that waited on a lock
-- does not hand out a lease that is already partly spent.

-- name: served_queues
-- (A fragment.) The queues a claim reads, one at a time: those given (when :all_queues,
-- every queue with PENDING plain tasks), less the paused ones.
{{queue_scan}},
served_queues(queue) AS (
    SELECT queue FROM (
        SELECT q.queue FROM unnest(:queues::text[]) AS q(queue) WHERE NOT :all_queues
        UNION ALL
        SELECT queue FROM pending_queues WHERE :all_queues AND queue IS NOT NULL
    ) AS given
    WHERE queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
)

-- name: due_per_queue
-- queries.sql's, with each lane priority read by a LATERAL walk of its due part (a join
-- would be planned as one pass over the whole lane index).
{{queue_scan}},
due_per_queue(queue, due, oldest) AS (
    {{due_in_queues}}
    UNION ALL
    SELECT c.queue, COUNT(*), MIN(c.next_run_at)
    FROM lane_priorities p CROSS JOIN LATERAL (
        SELECT queue, next_run_at FROM tickwork_tasks
        WHERE priority = p.priority AND status = 'PENDING' AND next_run_at <= :now
          AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
    ) AS c
    GROUP BY c.queue
)

-- name: due_count
-- queries.sql's, each queue and lane priority read by a LATERAL walk of its due part.
WITH RECURSIVE {{queue_scan}}
SELECT COUNT(*) AS n FROM (
    SELECT 1 AS one FROM pending_queues q CROSS JOIN LATERAL (
        SELECT 1 FROM tickwork_tasks
        WHERE queue = q.queue AND status = 'PENDING' AND next_run_at <= :due_by AND priority = 0
          AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
        ORDER BY next_run_at  -- the index's order: a generic plan would rather scan the table
        LIMIT :limit
    ) AS plain
    UNION ALL
    SELECT 1 FROM lane_priorities p CROSS JOIN LATERAL (
        SELECT 1 FROM tickwork_tasks
        WHERE priority = p.priority AND status = 'PENDING' AND next_run_at <= :due_by
          AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
        ORDER BY next_run_at
        LIMIT :limit
    ) AS lane
    LIMIT :limit
) AS due;

-- name: upcoming_due
-- The next :ahead dispatch times among the tasks this node can run, earliest first:
-- each served queue's first :ahead plain tasks, and the lane's earliest, a rate's next
-- allowed start if later than the dispatch time (one held back by a full lock or
-- max_running counts as due), over the first 64 of each lane priority. Sleep hints,
-- capped by poll_interval: a node sleeps from one to the next without asking again
-- (tickwork/node/claims.py); next_due_at is the first. The lane gives only its earliest
-- time (a rate's start after the next is known only once the next is taken), so the
-- times end at it: a node that slept through them reads again once it has passed,
-- rather than sleep past the lane's next start toward a plain task's time. ``early``:
-- a plain one-time task's time, which a claim looking ahead can take before it comes.
WITH RECURSIVE {{served_queues}},
lane(at) AS (
    SELECT MIN(CASE WHEN l.tat IS NOT NULL AND l.tat > c.next_run_at THEN l.tat ELSE c.next_run_at END)
    FROM lane_priorities p CROSS JOIN LATERAL (
        SELECT name, next_run_at FROM tickwork_tasks
        WHERE priority = p.priority AND status = 'PENDING'
          AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
          AND name = ANY(:names) AND (:all_queues OR queue = ANY(:queues))
          AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)
        ORDER BY next_run_at, id LIMIT 64) AS c
    LEFT JOIN tickwork_limits l ON l.key = 'rate:' || c.name
)
SELECT u.at, u.early FROM (
    SELECT c.next_run_at AS at, c.kind = 'ONE_TIME' AS early FROM served_queues q CROSS JOIN LATERAL (
        SELECT next_run_at, kind FROM tickwork_tasks
        WHERE queue = q.queue AND status = 'PENDING' AND priority = 0
          AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL AND name = ANY(:names)
        ORDER BY next_run_at, id LIMIT :ahead) AS c
    UNION ALL
    SELECT at, false FROM lane
) AS u
WHERE u.at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM lane WHERE lane.at < u.at)
ORDER BY u.at LIMIT :ahead;

-- name: claim_candidates
-- Due plain tasks this node can run, the oldest first: each queue's first :limit, then
-- the best :limit of those.
WITH RECURSIVE {{served_queues}}
SELECT c.* FROM served_queues q CROSS JOIN LATERAL (
    SELECT id, version, name, next_run_at, priority, lock, max_running, rate_limit, 0 AS lane FROM tickwork_tasks
    WHERE queue = q.queue AND status = 'PENDING' AND next_run_at <= :now + make_interval(secs => :ahead_s)
      AND priority = 0 AND (next_run_at <= :now OR kind = 'ONE_TIME')  -- claimed ahead: store/base.py
      AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
      AND name = ANY(:names) AND NOT (id = ANY(:exclude::bigint[]))
    ORDER BY next_run_at, id
    LIMIT :limit
) AS c
ORDER BY c.next_run_at, c.id
LIMIT :limit;

-- name: claimed_task
-- (A fragment: the RETURNING list of claim_skip_locked and claim_cas_batch, over the
-- updated task t.) What a claim's Task is made of (rows.TASK_COLUMNS, in that order:
-- tests/test_claim_rows.py) and its run's log row; not the run_* columns that carry it,
-- which a claimed row would otherwise load twice (a fifth of a row's load time).
t.id, t.name, t.args, t.kwargs, t.key, t.kind, t.cron, t.timezone, t.interval_seconds, t.scheduled_at,
    t.next_run_at, t.status, t.misfire, t.misfire_grace, t.jitter, t.timeout, t.max_retries, t.retry_backoff,
    t.priority, t.version, t.lease_owner, t.lease_expires_at, t.cancel_requested, t.triggered, t.attempt,
    t.run_count, t.last_status, t.created_at, t.updated_at, t.max_catchup, t.overlap, t.last_decision,
    t.parent_id, t.on_lost, t.cancel_run_only, t.max_runtime, t.until_at, t.max_runs, t.origin, t.declared_at,
    t.removed_at, t.revision, t.replan_at, t.replan_run_at, t.queue, t.lock, t.max_running, t.rate_limit,
    t.max_lost, t.lost_runs, t.run_id AS execution_id, t.run_scheduled_for AS execution_scheduled_for

-- name: claim_skip_locked
-- One short transaction: lock due rows others have not locked, claim them, log the
-- runs. Row locks end with the transaction, never held while a task runs. Each run's
-- scheduled_for is tickwork.schedules.run_slot (tests/test_store_rules.py).
-- With :unless_lane, it first asks whether lane_candidates would find anything (one
-- probe per lane priority) and, if so, claims nothing: the lane goes first (its higher
-- priorities and its limits), so the caller reads it and claims again without the
-- gate. Every row says so in lane_due; with nothing claimed, a single row of NULLs
-- carries it. A claim with an empty lane, the usual case, is then one round trip.
WITH RECURSIVE {{served_queues}},
lane_due(due) AS (
    SELECT :unless_lane AND EXISTS (
        SELECT 1 FROM lane_priorities p CROSS JOIN LATERAL (
            SELECT 1 FROM tickwork_tasks
            WHERE priority = p.priority AND {{lane_due_filter}}
            LIMIT 1
        ) AS c
        WHERE p.priority IS NOT NULL
    )
),
picked AS (
    -- Each queue's first :limit it can lock, then the oldest :limit of those (rows locked
    -- and not taken stay locked only until this statement's transaction ends).
    SELECT c.id FROM served_queues q CROSS JOIN LATERAL (
        SELECT id, next_run_at FROM tickwork_tasks
        WHERE queue = q.queue AND status = 'PENDING' AND next_run_at <= :now + make_interval(secs => :ahead_s)
          AND priority = 0 AND (next_run_at <= :now OR kind = 'ONE_TIME')  -- claimed ahead: store/base.py
          AND lock IS NULL AND max_running IS NULL AND rate_limit IS NULL
          AND name = ANY(:names) AND NOT (id = ANY(:exclude::bigint[]))
        ORDER BY next_run_at, id
        LIMIT :limit
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS c
    WHERE NOT (SELECT due FROM lane_due)
    ORDER BY c.next_run_at, c.id
    LIMIT :limit
), claimed AS (
    UPDATE tickwork_tasks t
    SET {{claimed_set}}
    -- by primary key, as an array: joined to picked, a generic plan (the hot path's, its
    -- LIMIT unknown) would hash the whole table
    WHERE t.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING {{claimed_task}}
)
SELECT claimed.*, lane_due.due AS lane_due FROM lane_due LEFT JOIN claimed ON true;

-- name: claim_cas_batch
-- Compare-and-set on version for a batch of candidates read without locks: a row
-- another node changed meanwhile no longer matches its version and is skipped. A row
-- locked by anyone else (a node claiming it right now, or a session of the user's
-- holding it) is skipped too rather than waited for: waiting would stall the whole
-- batch behind one row for as long as the lock is held. Each run's scheduled_for is
-- tickwork.schedules.run_slot (tests/test_store_rules.py).
WITH candidate AS (
    SELECT * FROM unnest(:ids::bigint[], :versions::bigint[]) AS c(id, version)
), locked AS (
    SELECT t.id FROM tickwork_tasks t JOIN candidate c ON c.id = t.id
    -- Found by primary key, whatever the statistics say: written as it is, the status test
    -- does not match the claim index's predicate, which the planner (with statistics that
    -- lag a burst of inserts) would otherwise walk whole to find these few rows.
    WHERE t.id = ANY(:ids::bigint[])
      AND t.version = c.version AND t.status::text = 'PENDING'::text COLLATE "C"
      AND t.queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)  -- paused since the read
      -- a limit or a priority given since the read: such a task is the lane's (limits.sql)
      -- (priority + 0: a filter on the rows found by id; as an index condition the planner
      -- would walk every PENDING task for it)
      AND (:lane OR (t.priority + 0 = 0 AND t.lock IS NULL AND t.max_running IS NULL AND t.rate_limit IS NULL))
    ORDER BY t.id
    FOR NO KEY UPDATE OF t SKIP LOCKED
), claimed AS (
    UPDATE tickwork_tasks t
    SET {{claimed_set}}
    FROM locked
    WHERE t.id = locked.id
    RETURNING {{claimed_task}}
)
SELECT * FROM claimed;

-- name: claimed_set
-- (A fragment: the SET list of both claims, over task t; bench/db_statements.py times it
-- too.) The lease, then the run a claim starts, on its task's row until its execution
-- row is written at its end (migration 0014): its id, from the executions' sequence, its
-- attempt, its start and its slot (tickwork.schedules.run_slot).
status = 'RUNNING', version = t.version + 1, lease_owner = :node,
        lease_expires_at = clock_timestamp() + make_interval(secs => :lease), attempt = t.attempt + 1,
        updated_at = :now, run_id = nextval('tickwork_executions_id_seq'), run_attempt = t.attempt + 1,
        run_started_at = GREATEST(:now, t.next_run_at),
        run_scheduled_for = CASE WHEN t.triggered THEN t.next_run_at ELSE t.scheduled_at END, run_note = NULL

-- name: newest_row_probe
-- (A fragment: a subquery over task t.) The log's row just below task t's end in the
-- index (task_id, id): task t's newest row if it has one, else another task's (its
-- reader tests task_id). Written as a range, not as task_id = t.id ORDER BY id DESC:
-- when a few tasks own most of the log, the planner would take that for a walk of the
-- primary key from its end until a row of t turns up, and for a task with no row (a
-- run going on, written only at its end) that walk reads the whole log (60 ms a task
-- on 1,000,000 rows of 3 tasks). No other index gives this order: one row read.
SELECT e.* FROM tickwork_executions e
WHERE (e.task_id, e.id) <= (t.id, 9223372036854775807)
ORDER BY e.task_id DESC, e.id DESC
LIMIT 1

-- name: run_on_task_row
-- (A fragment.) Task t's run is the one on its row (migration 0014): it has one, its
-- execution row is not written yet (end_execution writes it early for a stuck thread),
-- and no node of an earlier version claimed the task the old way, with a RUNNING
-- execution row (a rolling upgrade: the run_id on the row is then an earlier run's).
-- Such a row is the task's newest (its id was taken at the claim): one probe of the
-- task's index from its end, however long the task's history. The view tickwork_runs
-- repeats this test (migration 0015): the two change together.
t.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tickwork_executions e WHERE e.id = t.run_id)
  AND NOT EXISTS (SELECT 1 FROM ({{newest_row_probe}}) AS latest
                  WHERE latest.task_id = t.id AND latest.fence = t.version AND latest.status = 'RUNNING')

-- name: current_run
-- (A fragment: a lateral subquery over task t.) Its run going on: the RUNNING execution
-- row a node of an earlier version wrote at its claim, or else the run on its row.
SELECT l.id, l.scheduled_for, l.started_at
FROM ({{newest_row_probe}}) AS l
WHERE l.task_id = t.id AND l.fence = t.version AND l.status = 'RUNNING'
UNION ALL
SELECT t.run_id, t.run_scheduled_for, t.run_started_at
WHERE t.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM tickwork_executions e WHERE e.id = t.run_id)
LIMIT 1

-- name: list_tasks
SELECT * FROM tickwork_tasks
WHERE (:status::text IS NULL OR status = :status::text) AND (:name::text IS NULL OR name = :name::text)
  AND (:kind::text IS NULL OR kind = :kind::text) AND (:queue::text IS NULL OR queue = :queue::text)
ORDER BY id
LIMIT :limit OFFSET :offset;

-- name: list_tasks_newest
SELECT * FROM tickwork_tasks
WHERE (:status::text IS NULL OR status = :status::text) AND (:name::text IS NULL OR name = :name::text)
  AND (:kind::text IS NULL OR kind = :kind::text) AND (:queue::text IS NULL OR queue = :queue::text)
ORDER BY id DESC
LIMIT :limit OFFSET :offset;

-- name: list_executions
-- The log as readers see it (tickwork_runs, migration 0014): ended runs from their rows,
-- running ones from their tasks' (and from their rows, for runs a node of an earlier
-- version claimed). Only running runs asked for: all of them are found from the running
-- tasks (the log has no index by status, and walking it back for a RUNNING row that a
-- rolling upgrade may have left read all of it).
SELECT * FROM (
    SELECT * FROM tickwork_executions
    WHERE (:task_id::bigint IS NULL OR task_id = :task_id::bigint) AND (:status::text IS NULL OR status = :status::text)
      AND :status::text IS DISTINCT FROM 'RUNNING'
    ORDER BY id DESC
    LIMIT :limit
) AS ended
UNION ALL
SELECT t.run_id, t.id, t.run_attempt, t.run_scheduled_for, t.run_started_at, NULL, 'RUNNING', t.lease_owner,
       t.version, NULL, NULL, NULL, NULL, t.run_note, NULL, NULL
FROM tickwork_tasks t
WHERE t.status = 'RUNNING' AND (:task_id::bigint IS NULL OR t.id = :task_id::bigint)
  AND (:status::text IS NULL OR :status::text = 'RUNNING') AND {{run_on_task_row}}
UNION ALL
SELECT l.*
FROM tickwork_tasks t CROSS JOIN LATERAL ({{newest_row_probe}}) AS l
WHERE :status::text = 'RUNNING' AND t.status = 'RUNNING' AND (:task_id::bigint IS NULL OR t.id = :task_id::bigint)
  AND l.task_id = t.id AND l.fence = t.version AND l.status = 'RUNNING'
ORDER BY id DESC
LIMIT :limit;

-- name: fail_undecodable_run
-- A claimed run whose task cannot be read: its execution row, from the task's (written
-- in the transaction that fails the task, after fail_undecodable).
INSERT INTO tickwork_executions (id, task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence,
    error_type, error_message)
SELECT run_id, id, COALESCE(run_attempt, attempt), COALESCE(run_scheduled_for, :now), run_started_at, :now,
       'FAILED', :node, version, 'UndecodableTask', 'the stored task could not be read by this version of tickwork'
FROM tickwork_tasks WHERE id = :id AND run_id = :execution_id
ON CONFLICT (id) DO NOTHING;

-- name: end_execution
-- A run's execution ends while its task stays RUNNING (its thread past its timeout has
-- not let go): its row is written now, fenced by the task's version and lease; the
-- outcome written when the thread lets go leaves it as it is (write_outcomes_batch).
INSERT INTO tickwork_executions (id, task_id, attempt, scheduled_for, started_at, finished_at, status, node, fence,
    error_type, error_message, error_traceback, note)
SELECT run_id, id, COALESCE(run_attempt, attempt), COALESCE(run_scheduled_for, :finished_at), run_started_at,
       :finished_at, :status, :node, version, :error_type, :error_message, :error_traceback, :note
FROM tickwork_tasks
WHERE id = :task_id AND run_id = :id AND version = :fence AND lease_owner = :node AND status = 'RUNNING'
ON CONFLICT (id) DO NOTHING;

-- name: prune_nodes
DELETE FROM tickwork_nodes WHERE heartbeat_at < :now - make_interval(secs => :silent_for);

-- name: lock_task
SELECT id FROM tickwork_tasks WHERE id = :id FOR UPDATE;

-- name: clock
SELECT clock_timestamp() AS now;

-- name: take_keeper
-- The keeper role of a group of nodes (those claiming the same task names and queues):
-- a session-level advisory lock on the node's listening connection, held until that
-- connection ends (the node stops, dies or loses the server). Its own class of key, so
-- it never meets a limit's or the pruner's lock.
SELECT pg_try_advisory_lock(1953063791, hashtext(:group)) AS taken;

-- name: notify
-- Delivered when the transaction commits, to every node listening on any host.
SELECT pg_notify('tickwork', :payload);

-- name: write_outcomes_batch
-- The outcomes of a batch of runs, task (settled_task, queries.sql) and execution rows,
-- in one statement (one parse, one plan, one round trip): the batch arrives as one JSON
-- array, which the server unpacks faster than a driver can send one array per column
-- (json, not jsonb: unpacked once, never stored, it parses faster). Its times are whole
-- microseconds since 1970 (sa: scheduled_at, na: next_run_at, fa: finished_at, ba:
-- started_at, la: skipped_last), made and read at a third of what ISO text costs each
-- side; exact within 2^53 microseconds of 1970 (a float8 holds them: 1684 to 2255), the
-- node writes any outcome with a time outside those years with write_outcomes_text.
WITH {{outcome_rows}}, {{settled_outcomes}};

-- name: write_fresh_outcomes
-- write_outcomes_batch for a node's own runs, whose execution rows are not there yet
-- (a row is written at a run's end, migration 0014): a plain INSERT, where
-- write_outcomes_batch's ON CONFLICT (a row end_execution wrote while a stuck thread went
-- on, or a RUNNING row of an earlier version's claim) costs every row a speculative
-- insertion, ~2.5 µs of the write's ~19 (bench.db_statements). A row there after all fails
-- the statement whole, nothing written, and the batch goes again as write_outcomes_batch
-- (hot.py).
WITH {{outcome_rows}}, {{settled_rows}}, logged AS ({{execution_rows}})
SELECT id, fence, execution_id FROM settled;

-- name: outcome_rows
-- (A fragment: write_outcomes_batch's and write_fresh_outcomes's batch, o.)
o AS (
    SELECT j.*, e + sa * u AS scheduled_at, e + na * u AS next_run_at, e + fa * u AS finished_at,
           e + ba * u AS started_at, e + la * u AS skipped_last
    FROM json_to_recordset(:batch::json) AS j(task_id bigint, fence bigint, execution_id bigint, status text,
        task_status text, sa bigint, na bigint, fa bigint, ba bigint, attempt int, triggered boolean,
        error_type text, error_message text, error_traceback text, result jsonb, note text, skipped int,
        la bigint, decision text, counts boolean, lost_runs int),
      (VALUES (timestamptz 'epoch', interval '1 us')) AS k(e, u)
    -- Always true (task ids are never NULL), and estimated to hold about one row: the
    -- planner then drives the update from the batch through the primary key at any table
    -- size. Without it, it takes a set function for 100 rows and, below ~10,000 tasks,
    -- scans the table and compares every row this node runs with every outcome (a batch
    -- of 200 in a table of 2,000 tasks: 29 ms instead of 2.5).
    WHERE j.task_id = j.task_id + 0
)

-- name: write_outcomes_text
-- write_outcomes_batch with its times as ISO text: for the rare outcome with a time
-- outside the years that one can carry exactly.
WITH o AS (
    SELECT * FROM json_to_recordset(:batch::json) AS o(
        task_id bigint, fence bigint, execution_id bigint, status text, task_status text,
        scheduled_at timestamptz, next_run_at timestamptz, finished_at timestamptz, started_at timestamptz,
        attempt int, triggered boolean, error_type text, error_message text, error_traceback text,
        result jsonb, note text, skipped int, skipped_last timestamptz, decision text, counts boolean,
        lost_runs int)
    WHERE o.task_id = o.task_id + 0
), {{settled_outcomes}};

-- name: settled_outcomes
-- (A fragment: write_outcomes_batch's and write_outcomes_text's common part, over their
-- outcomes o.) Each row is fenced by its own version and lease owner; an execution row
-- is written only if its task's update applied. Status and cancel flags:
-- tickwork.schedules.cancel_wins. Two outcomes of one task in a batch (a late result of
-- a run taken over, beside the result of the task's next run) are told apart by fence
-- and execution: only the one whose fence matched is reported applied, and only its
-- execution row is written.
{{settled_rows}}, logged AS (
    {{execution_rows}}
    -- A row already there is one end_execution wrote while the run's thread went on: it
    -- stays as it is; or a RUNNING one, of a run a node of an earlier version claimed (a
    -- rolling upgrade): it is ended, by a reconciler (this version writes no other outcome
    -- of such a run: no result, no skip, no later start).
    ON CONFLICT (id) DO UPDATE
    SET status = excluded.status, finished_at = excluded.finished_at, error_type = excluded.error_type,
        error_message = excluded.error_message, error_traceback = excluded.error_traceback, note = excluded.note
    WHERE e.status = 'RUNNING'
)
SELECT id, fence, execution_id FROM settled;

-- name: settled_rows
-- (A fragment: the task rows' update of settled_outcomes and write_fresh_outcomes.)
settled AS (
    UPDATE tickwork_tasks t
    SET {{settled_task}}
    FROM o
    -- Each row found by primary key from the batch's (the status test is written so that it
    -- does not match the lease index's predicate: with statistics that lag, the planner
    -- would walk that index once per outcome, a cost that grows with the square of the batch).
    WHERE t.id = o.task_id AND t.version = o.fence AND t.lease_owner = :node
      AND t.status::text = 'RUNNING'::text COLLATE "C"
      AND (NOT :expired_only OR t.lease_expires_at < :now)
    -- (the outcome's own fields too: one row per task updated, the row its log takes)
    RETURNING t.id, t.run_attempt, t.run_started_at, t.run_scheduled_for, o.*
)

-- name: execution_rows
-- (A fragment: each run's one execution row, for the tasks settled_rows updated.)
INSERT INTO tickwork_executions AS e (id, task_id, attempt, scheduled_for, started_at, finished_at, status,
    node, fence, error_type, error_message, error_traceback, result, note, skipped_count, skipped_last)
SELECT r.execution_id, r.id, COALESCE(r.run_attempt, r.attempt), COALESCE(r.run_scheduled_for, r.finished_at),
       COALESCE(r.started_at, LEAST(r.run_started_at, r.finished_at)), r.finished_at, r.status,
       :node, r.fence, r.error_type, r.error_message, r.error_traceback, r.result, r.note, r.skipped, r.skipped_last
FROM settled AS r

-- name: renew_batch
-- renew_lease for all of a node's runs in one statement.
UPDATE tickwork_tasks t SET lease_expires_at = clock_timestamp() + make_interval(secs => :lease)
FROM unnest(:ids::bigint[], :fences::bigint[]) AS r(id, fence)
-- (by primary key, the status test kept off the lease index: as in write_outcomes_batch)
WHERE t.id = r.id AND t.version = r.fence AND t.lease_owner = :node AND t.status::text = 'RUNNING'::text COLLATE "C"
RETURNING t.id, t.version, t.cancel_requested, t.cancel_run_only;

-- name: overrun_runs
-- Runs claimed longer ago than their max_runtime plus :grace, live lease or not (a run
-- whose execution row end_execution wrote early is no longer one).
SELECT t.*, r.id AS execution_id, r.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t CROSS JOIN LATERAL ({{current_run}}) AS r
WHERE t.status = 'RUNNING' AND t.max_runtime IS NOT NULL
  AND r.started_at + make_interval(secs => t.max_runtime + :grace) < :now
ORDER BY r.started_at
LIMIT :limit;

-- name: expired_runs
SELECT t.*, r.id AS execution_id, r.scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t CROSS JOIN LATERAL ({{current_run}}) AS r
WHERE t.status = 'RUNNING' AND t.lease_expires_at < :now AND NOT (t.id = ANY(:exclude::bigint[]))
ORDER BY t.lease_expires_at
LIMIT :limit;

-- name: claimed_since
-- queries.sql's, the run read from its task's row (migration 0014).
SELECT t.*, t.run_id AS execution_id, t.run_scheduled_for AS execution_scheduled_for
FROM tickwork_tasks t
WHERE t.status = 'RUNNING' AND t.lease_owner = :node AND t.run_started_at >= :since AND {{run_on_task_row}}
ORDER BY t.id;

-- name: lane_due_filter
-- (A fragment.) A lane task of one priority this node could claim now: lane_candidates'
-- rows, and what claim_skip_locked's gate probes for (the two must agree, or a claim
-- could pass over the lane).
status = 'PENDING' AND next_run_at <= :now
      AND (priority <> 0 OR lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)
      AND name = ANY(:names) AND NOT (id = ANY(:exclude::bigint[]))
      AND (:all_queues OR queue = ANY(:queues)) AND queue NOT IN (SELECT name FROM tickwork_queues WHERE paused)

-- name: lane_candidates
-- The lane (tickwork/store/limits.sql), one priority at a time, highest first.
WITH RECURSIVE {{queue_scan}}
SELECT c.* FROM lane_priorities p CROSS JOIN LATERAL (
    SELECT id, version, name, next_run_at, priority, lock, max_running, rate_limit, 1 AS lane FROM tickwork_tasks
    WHERE priority = p.priority AND {{lane_due_filter}}
    ORDER BY next_run_at, id
    LIMIT :scan
) AS c
ORDER BY c.priority DESC, c.next_run_at, c.id
LIMIT :scan;

-- name: running_by_name
SELECT name, COUNT(*) AS running FROM tickwork_tasks
WHERE status = 'RUNNING' AND name = ANY(:names)
GROUP BY name;

-- name: running_locks
SELECT lock, COUNT(*) AS running FROM tickwork_tasks
WHERE status = 'RUNNING' AND lock IS NOT NULL AND lock = ANY(:locks)
GROUP BY lock;

-- name: limit_states
SELECT key, tat, full_since, held_until FROM tickwork_limits WHERE key = ANY(:keys);

-- name: try_limit_keys
-- One claimer per limit key at a time, until its transaction ends; a key another node
-- holds is left to it this round (never waited for). Counts read after this see every
-- claim the key's previous holder committed. Returns the keys taken, in one round trip.
SELECT key FROM unnest(:keys::text[]) AS k(key) WHERE pg_try_advisory_xact_lock(1953063790, hashtext(key));

-- name: transaction_now
-- The moment every :now of this transaction reads (a limited claim's grant time).
SELECT now() AS now;

-- name: allocate_task_ids
-- Ids for the tasks one insert_tasks adds, taken before the insert so that the caller
-- knows which row is which task (tickwork/store/inserts.py). A task whose key turns out
-- to be held burns its id, as a conflicting insert always has.
-- The sequence is looked up once (per row, the lookup cost 10x the nextval), and the ids
-- come back as one JSON array (a row each cost the client more than the server).
WITH sequence(id) AS (SELECT pg_get_serial_sequence('tickwork_tasks', 'id')::regclass)
SELECT json_agg(taken.id ORDER BY taken.id) AS ids
FROM (SELECT nextval((SELECT id FROM sequence)) AS id FROM generate_series(1, :n)) AS taken;

-- name: insert_tasks
-- Many tasks in one statement, from one JSON array of rows keyed by column
-- (encoding.task_row; json, not jsonb: unpacked once, never stored, it parses faster).
-- Rows go in by key, then id: of two tasks in one batch with the same key the first is
-- stored, and two writers sharing keys wait on each other's keys in one order, never
-- in a cycle. A key a live task already holds inserts nothing.
INSERT INTO tickwork_tasks (id, {{new_task_columns}})
SELECT
    r.id, r.name, r.args::jsonb, r.kwargs::jsonb, r.key, r.kind, r.cron, r.timezone, r.interval_seconds,
    r.scheduled_at, r.next_run_at, 'PENDING', r.misfire, r.misfire_grace, r.jitter, r.timeout, r.max_retries,
    r.retry_backoff, r.priority, r.max_catchup, r.overlap, r.parent_id, r.on_lost, r.max_runtime,
    r.until_at, r.max_runs, r.origin, r.declared_at, r.max_lost, r.queue, r.lock, r.max_running, r.rate_limit,
    r.created_at, r.created_at
FROM json_to_recordset(:rows::json) AS r(
    id bigint, name text, args text, kwargs text, key text, kind text, cron text, timezone text,
    interval_seconds double precision, scheduled_at timestamptz, next_run_at timestamptz, misfire text,
    misfire_grace double precision, jitter double precision, timeout double precision, max_retries integer,
    retry_backoff double precision, priority integer, max_catchup integer, overlap text, parent_id bigint,
    on_lost text, max_runtime double precision, until_at timestamptz, max_runs integer, origin text,
    declared_at timestamptz, max_lost integer, queue text, lock text, max_running integer, rate_limit text,
    created_at timestamptz)
ORDER BY r.key, r.id
ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED')
DO NOTHING;

-- name: copy_tasks
-- Tasks that hold no key (nothing to conflict with) streamed in, in the order of
-- encoding.task_values (TASK_COLUMNS): ids taken first, times as timestamptz, each
-- column in the binary form of the type the table gives it (store/pg_copy.py).
COPY tickwork_tasks (id, {{new_task_columns}}) FROM STDIN (FORMAT BINARY);

-- name: insert_task
-- One task (schedule()): one round trip, its id from the sequence; no row returned when
-- a live task holds its key. The values are encoding.task_row's.
INSERT INTO tickwork_tasks ({{new_task_columns}})
VALUES (
    :name, :args::jsonb, :kwargs::jsonb, :key, :kind, :cron, :timezone, :interval_seconds,
    :scheduled_at::timestamptz, :next_run_at::timestamptz, 'PENDING', :misfire, :misfire_grace, :jitter, :timeout,
    :max_retries, :retry_backoff, :priority, :max_catchup, :overlap, :parent_id, :on_lost, :max_runtime,
    :until_at::timestamptz, :max_runs, :origin, :declared_at::timestamptz, :max_lost, :queue, :lock, :max_running,
    :rate_limit, :created_at::timestamptz, :created_at::timestamptz)
ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED')
DO NOTHING
RETURNING id;

-- name: inserted_task_ids
-- Which of an insert_tasks batch's ids were inserted (the others' keys were held).
SELECT id FROM tickwork_tasks WHERE id = ANY(:ids);

-- name: note_execution
-- queries.sql's; a run still going has no execution row yet (migration 0014): its note
-- waits on its task's row, which tickwork_runs shows.
WITH logged AS (
    UPDATE tickwork_executions
    SET note = CASE WHEN note IS NULL OR note = '' THEN :text ELSE note || '; ' || :text END
    WHERE id = :id
    RETURNING id
)
UPDATE tickwork_tasks
SET run_note = CASE WHEN run_note IS NULL OR run_note = '' THEN :text ELSE run_note || '; ' || :text END
WHERE id = :task_id AND run_id = :id AND status = 'RUNNING' AND NOT EXISTS (SELECT 1 FROM logged);
