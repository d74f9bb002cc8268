-- +goose Up
-- Cove's records on PostgreSQL, the shapes of the SQLite store's (internal/store/sqlite) with
-- PostgreSQL's types: times are timestamptz (microseconds, as the store keeps them), JSON is
-- jsonb, flags are booleans. Columns listings order or page by compare bytes (COLLATE "C"),
-- as SQLite does, so both engines list in the same order.

-- Teams own API keys and sandboxes.
CREATE TABLE teams (
    id         TEXT COLLATE "C" PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

-- API keys: only sha256(key) in hex is kept, plus a mask for listings.
CREATE TABLE api_keys (
    id         TEXT COLLATE "C" PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams (id),
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    mask       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    last_used  TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

-- Sandboxes: one row per sandbox, killed ones included. envd_access_token is sealed by the
-- server's vault ("sealed:v1:…") when the store has one.
CREATE TABLE sandboxes (
    id                TEXT COLLATE "C" PRIMARY KEY,
    team_id           TEXT NOT NULL REFERENCES teams (id),
    template_id       TEXT NOT NULL,
    alias             TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('running', 'paused', 'killed')),
    metadata          JSONB,          -- NULL for a nil map
    env_var_names     JSONB,          -- NULL for a nil slice
    cpu_count         INTEGER NOT NULL,
    memory_mb         INTEGER NOT NULL,
    disk_size_mb      INTEGER NOT NULL,
    envd_version      TEXT NOT NULL,
    envd_access_token TEXT NOT NULL,
    secure            BOOLEAN NOT NULL,
    auto_pause        BOOLEAN NOT NULL,
    auto_resume       BOOLEAN NOT NULL,
    allow_internet    BOOLEAN NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL,
    end_at            TIMESTAMPTZ NOT NULL,
    paused_at         TIMESTAMPTZ,
    killed_at         TIMESTAMPTZ,
    kill_reason       TEXT NOT NULL,
    kill_request_id   TEXT NOT NULL,
    kill_api_key_id   TEXT NOT NULL,
    created_by        TEXT NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL
);
CREATE INDEX sandboxes_by_team ON sandboxes (team_id, state, started_at, id);
CREATE INDEX sandboxes_by_state ON sandboxes (state, started_at, id);

-- Team secrets: the record, and each version's value sealed by the vault.
CREATE TABLE team_secrets (
    id              TEXT PRIMARY KEY,
    team_id         TEXT NOT NULL,
    name            TEXT COLLATE "C" NOT NULL,
    current_version BIGINT NOT NULL,
    metadata        JSONB NOT NULL DEFAULT '{}',
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (team_id, name)
);
CREATE TABLE team_secret_versions (
    secret_id TEXT NOT NULL REFERENCES team_secrets (id) ON DELETE CASCADE,
    version   BIGINT NOT NULL,
    sealed    BYTEA NOT NULL,
    PRIMARY KEY (secret_id, version)
);

-- Web console sessions: only the SHA-256 of the cookie's token. team_id is '' for an admin.
CREATE TABLE console_sessions (
    token_hash TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL,
    team_name  TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    admin_hash TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX console_sessions_by_key ON console_sessions (key_id);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
DROP TABLE team_secret_versions;
DROP TABLE team_secrets;
DROP TABLE sandboxes;
DROP TABLE api_keys;
DROP TABLE teams;
