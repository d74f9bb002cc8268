-- Teams own API keys and sandboxes.
CREATE TABLE teams (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL -- unix microseconds, as every time below
) STRICT;

-- API keys: only sha256(key) in hex is kept, plus a mask for listings.
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams (id),
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    mask       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_used  INTEGER,
    revoked_at INTEGER
) STRICT;

CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

-- Sandboxes: one row per sandbox, killed ones included.
CREATE TABLE sandboxes (
    id                TEXT PRIMARY KEY,
    team_id           TEXT NOT NULL REFERENCES teams (id),
    template_id       TEXT NOT NULL,
    alias             TEXT NOT NULL,
    state             TEXT NOT NULL,
    metadata          TEXT,          -- JSON object; NULL for a nil map
    env_var_names     TEXT,          -- JSON array; NULL for a nil slice
    cpu_count         INTEGER NOT NULL,
    memory_mb         INTEGER NOT NULL,
    disk_size_mb      INTEGER NOT NULL,
    envd_version      TEXT NOT NULL,
    envd_access_token TEXT NOT NULL,
    secure            INTEGER NOT NULL,
    auto_pause        INTEGER NOT NULL,
    auto_resume       INTEGER NOT NULL,
    allow_internet    INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    end_at            INTEGER NOT NULL,
    paused_at         INTEGER,
    killed_at         INTEGER,
    kill_reason       TEXT NOT NULL,
    kill_request_id   TEXT NOT NULL,
    kill_api_key_id   TEXT NOT NULL,
    created_by        TEXT NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;

-- Listings: one range per (team, state), already in page order.
CREATE INDEX sandboxes_by_team ON sandboxes (team_id, state, started_at, id);
-- LiveSandboxes, across teams.
CREATE INDEX sandboxes_by_state ON sandboxes (state, started_at, id);
