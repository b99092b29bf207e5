-- PostgreSQL overrides of edits.sql, by name.

-- name: lock_key
-- A transaction-level advisory lock per key: two retries giving tasks the same key back
-- at once are checked one after the other, never both passing other_key_holder.
SELECT 1 AS got FROM (SELECT pg_advisory_xact_lock(1953063788, hashtext(:key))) AS locked;

-- name: sync_lock
-- One sync at a time across every node; let go when the sync's transaction ends.
SELECT 1 AS got FROM (SELECT pg_advisory_xact_lock(1953063789)) AS locked;

-- name: code_schedules
SELECT * FROM tickwork_tasks t
WHERE t.origin = 'code'
  AND (t.key = ANY(:keys) OR (t.name = ANY(:names) AND t.status IN ('PENDING', 'RUNNING', 'PAUSED')))
  AND t.id = (SELECT MAX(k.id) FROM tickwork_tasks k WHERE k.origin = 'code' AND k.key = t.key);

-- name: runtime_key_holders
SELECT * FROM tickwork_tasks
WHERE key = ANY(:keys) AND origin IS NULL AND status IN ('PENDING', 'RUNNING', 'PAUSED');
