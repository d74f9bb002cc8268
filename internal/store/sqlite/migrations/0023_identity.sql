-- Workload identity (issue 25, iam). The issuer's signing keys: the private key only sealed
-- with the vault's key, never in clear. retired_at is NULL while the key signs.
CREATE TABLE identity_keys (
    id         TEXT PRIMARY KEY,
    algorithm  TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
) STRICT;

-- The named tokens each sandbox registered at create: what to mint, never a token.
CREATE TABLE identity_tokens (
    sandbox_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    audience   TEXT NOT NULL,
    token_type TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, name)
) STRICT;
