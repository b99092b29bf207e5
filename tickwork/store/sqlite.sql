-- SQLite overrides of queries.sql, by name.

-- name: claim_candidates
-- Walk the claim index in ORDER BY order and stop at LIMIT, however many are due.
SELECT id, version FROM tickwork_tasks INDEXED BY tickwork_tasks_claim
WHERE status = 'PENDING' AND next_run_at <= :now
  AND name IN (SELECT value FROM json_each(:names))
ORDER BY next_run_at, priority DESC, id
LIMIT :limit;
