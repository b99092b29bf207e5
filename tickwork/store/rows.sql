-- Task rows read without decoding them (tickwork/store/rows.py): the columns every row
-- can give, whatever else in it is broken. Portable: SQLite and PostgreSQL.

-- name: task_headers
-- In list_tasks's order and with its filters, so positions agree with its pages.
SELECT id, name, status FROM tickwork_tasks
WHERE (CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT))
  AND (CAST(:name AS TEXT) IS NULL OR name = CAST(:name AS TEXT))
ORDER BY id
LIMIT :limit OFFSET :offset;

-- name: task_header
SELECT id, name, status FROM tickwork_tasks WHERE id = :id;
