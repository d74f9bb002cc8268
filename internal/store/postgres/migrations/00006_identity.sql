-- +goose Up
-- Workload identity: the issuer's signing keys (private halves only sealed by the vault) and
-- the named tokens each sandbox registered at create (what to mint, never a token).
CREATE TABLE identity_keys (
    id         TEXT COLLATE "C" PRIMARY KEY,
    algorithm  TEXT NOT NULL,
    sealed     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    retired_at TIMESTAMPTZ
);
CREATE TABLE identity_tokens (
    sandbox_id TEXT NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    audience   TEXT NOT NULL,
    token_type TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, name)
);

-- +goose Down
DROP TABLE identity_tokens;
DROP TABLE identity_keys;
