-- Dashboard sessions signed out before their cookie expired, by the SHA-256 of their id:
-- every server on this database refuses them. A row goes once no cookie of that session
-- can be valid any longer (expires_at).
CREATE TABLE tickwork_revoked_sessions (
    id         TEXT        PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX tickwork_revoked_sessions_expiry ON tickwork_revoked_sessions (expires_at);
