-- Cluster-wide limits (store/limits.py, tickwork/limits.py): the claim of tasks that have
-- a lock, a max_running or a rate_limit, inside one transaction.

-- lane_candidates (postgres.sql, sqlite.sql): the lane: due tasks with a limit or a
-- priority other than 0 this node can run, highest priority first, then the oldest due
-- (those of priority 0 and above claimed before the other due tasks, those below 0
-- after them). Bounded by :scan: tasks held back by a full limit are read and passed
-- over, up to that many a claim.

-- name: running_by_name
-- RUNNING tasks per name (read after the names' keys are held), those scheduled before
-- the name had its max_running too. RUNNING tasks are few: the lease index walks them.
SELECT name, COUNT(*) AS running FROM tickwork_tasks
WHERE status = 'RUNNING' AND name IN (SELECT value FROM json_each(:names))
GROUP BY name;

-- name: running_locks
SELECT lock, COUNT(*) AS running FROM tickwork_tasks
WHERE status = 'RUNNING' AND lock IS NOT NULL AND lock IN (SELECT value FROM json_each(:locks))
GROUP BY lock;

-- name: limit_states
SELECT key, tat, full_since, held_until FROM tickwork_limits WHERE key IN (SELECT value FROM json_each(:keys));

-- name: set_limit_state
INSERT INTO tickwork_limits (key, tat, full_since, held_until) VALUES (:key, :tat, :full_since, :held_until)
ON CONFLICT (key) DO UPDATE SET tat = excluded.tat, full_since = excluded.full_since, held_until = excluded.held_until;

-- name: lock_holder
SELECT id FROM tickwork_tasks WHERE status = 'RUNNING' AND lock = :lock LIMIT 1;
