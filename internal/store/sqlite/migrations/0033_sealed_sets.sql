-- The vault's sets (the secret values a sandbox's output is redacted of), sealed by the vault
-- before they get here; before, one file each under <data>/vault. node is the node that put
-- the set last ('' on a lone server): each node lists and prunes its own.
CREATE TABLE sealed_sets (
    name       TEXT PRIMARY KEY,
    node       TEXT NOT NULL DEFAULT '',
    sealed     BLOB NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX sealed_sets_node ON sealed_sets (node);
