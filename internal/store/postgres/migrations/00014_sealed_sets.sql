-- +goose Up
-- The vault's sets (the secret values a sandbox's output is redacted of), sealed by the vault
-- before they get here. node is the node that put the set last ('' on a lone server): each
-- node lists and prunes its own, any node reads any (a sandbox moved to it).
CREATE TABLE sealed_sets (
    name       TEXT COLLATE "C" PRIMARY KEY,
    node       TEXT NOT NULL DEFAULT '',
    sealed     BYTEA NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX sealed_sets_node ON sealed_sets (node);

-- +goose Down
DROP TABLE sealed_sets;
