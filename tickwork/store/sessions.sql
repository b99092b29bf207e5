-- Signed-out dashboard sessions (tickwork/store/sessions.py). Portable: SQLite and
-- PostgreSQL run the same texts.

-- name: revoke_session
-- A signed-out session: every server on this database refuses it from now on.
INSERT INTO tickwork_revoked_sessions (id, expires_at) VALUES (:id, :expires_at)
ON CONFLICT (id) DO NOTHING;

-- name: prune_revoked_sessions
-- Sessions whose cookie has expired anyway need no entry.
DELETE FROM tickwork_revoked_sessions WHERE expires_at < :now;

-- name: session_revoked
SELECT 1 AS revoked FROM tickwork_revoked_sessions WHERE id = :id;
