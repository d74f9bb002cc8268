-- Web console sessions (issue 16): only the SHA-256 of the cookie's token is stored, so a
-- copy of the database signs nobody in. team_id is '' for an admin session.
CREATE TABLE console_sessions (
    token_hash TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL,
    team_name  TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    -- for an admin session, the SHA-256 of the admin token it signed in with
    admin_hash TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX console_sessions_by_key ON console_sessions (key_id);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
