-- Team secrets (E2B's /secrets), moved here from <data>/secrets.json (issue 22): the record in
-- team_secrets, each version's value in team_secret_versions, sealed by the server's vault
-- (AES-256-GCM, the secret's id and version as associated data), never in the clear.
CREATE TABLE team_secrets (
    id              TEXT PRIMARY KEY,
    team_id         TEXT NOT NULL,
    name            TEXT NOT NULL,
    current_version INTEGER NOT NULL,
    metadata        TEXT NOT NULL DEFAULT '{}',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (team_id, name)
) STRICT;
CREATE TABLE team_secret_versions (
    secret_id TEXT NOT NULL REFERENCES team_secrets (id) ON DELETE CASCADE,
    version   INTEGER NOT NULL,
    sealed    BLOB NOT NULL,
    PRIMARY KEY (secret_id, version)
) STRICT;
