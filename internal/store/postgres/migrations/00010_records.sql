-- +goose Up
-- One persistence rule (issue 22): the records of snapshots, volumes (and their leases) and
-- network allocations, which were JSON files beside their data, live here. Their files stay
-- on the disk of the node named. config and token are sealed by the vault ("sealed:v1:").
CREATE TABLE snapshots (
    id          TEXT PRIMARY KEY,
    node        TEXT COLLATE "C" NOT NULL DEFAULT '',
    team_id     TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    sandbox_id  TEXT NOT NULL,
    template_id TEXT NOT NULL,
    runtime     TEXT NOT NULL DEFAULT '',
    metadata    JSONB NOT NULL DEFAULT '{}',
    created_at  TIMESTAMPTZ NOT NULL,
    bytes       BIGINT NOT NULL DEFAULT 0,
    config      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_node_team ON snapshots (node, team_id, created_at);

CREATE TABLE volumes (
    id         TEXT PRIMARY KEY,
    node       TEXT COLLATE "C" NOT NULL DEFAULT '',
    team_id    TEXT NOT NULL,
    name       TEXT NOT NULL,
    token      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    size_bytes BIGINT NOT NULL DEFAULT 0,
    UNIQUE (node, team_id, name)
);

CREATE TABLE volume_leases (
    volume_id  TEXT NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
    sandbox_id TEXT COLLATE "C" NOT NULL,
    read_only  BOOLEAN NOT NULL,
    paths      JSONB NOT NULL DEFAULT '[]',
    PRIMARY KEY (volume_id, sandbox_id)
);

CREATE TABLE network_records (
    node        TEXT COLLATE "C" NOT NULL DEFAULT '',
    sandbox_id  TEXT COLLATE "C" NOT NULL,
    slot_index  INTEGER NOT NULL,
    link        TEXT NOT NULL,
    addr        TEXT NOT NULL,
    netns       TEXT NOT NULL,
    resolv_conf TEXT NOT NULL,
    config      TEXT NOT NULL DEFAULT '',
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (node, sandbox_id)
);

-- +goose Down
DROP TABLE network_records;
DROP TABLE volume_leases;
DROP TABLE volumes;
DROP TABLE snapshots;
