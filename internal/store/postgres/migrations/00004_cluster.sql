-- +goose Up
-- The nodes of a cluster: each registers with its capacity and renews a lease every few
-- seconds; a node whose lease lapsed is marked lost by whichever node sweeps first.
CREATE TABLE nodes (
    name             TEXT COLLATE "C" PRIMARY KEY,
    advertise_url    TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('active', 'draining', 'lost', 'left')),
    vcpus            INTEGER NOT NULL,
    memory_mb        BIGINT NOT NULL,
    disk_mb          BIGINT NOT NULL,
    max_sandboxes    INTEGER NOT NULL,
    max_starts       INTEGER NOT NULL,
    -- What placement has reserved on the node: running sandboxes and starts under way.
    used_vcpus       INTEGER NOT NULL DEFAULT 0,
    used_memory_mb   BIGINT NOT NULL DEFAULT 0,
    used_sandboxes   INTEGER NOT NULL DEFAULT 0,
    starting         INTEGER NOT NULL DEFAULT 0,
    templates        JSONB NOT NULL DEFAULT '[]', -- templates cached on the node
    version          TEXT NOT NULL,
    registered_at    TIMESTAMPTZ NOT NULL,
    heartbeat_at     TIMESTAMPTZ NOT NULL,
    lease_until      TIMESTAMPTZ NOT NULL,
    lost_at          TIMESTAMPTZ
);

-- What each team holds across the cluster, reserved in the same transaction as a node's
-- capacity, so racing creates on different nodes never pass a team's quota.
CREATE TABLE team_usage (
    team_id    TEXT COLLATE "C" PRIMARY KEY,
    sandboxes  INTEGER NOT NULL DEFAULT 0,
    vcpus      INTEGER NOT NULL DEFAULT 0,
    memory_mb  BIGINT NOT NULL DEFAULT 0
);

-- Where each sandbox runs, and what it reserved there: the routing catalog every node's API
-- and proxy read, and what a kill gives back. A start under way holds starting on its node.
CREATE TABLE placements (
    sandbox_id TEXT COLLATE "C" PRIMARY KEY,
    node       TEXT NOT NULL REFERENCES nodes (name),
    team_id    TEXT NOT NULL,
    vcpus      INTEGER NOT NULL,
    memory_mb  BIGINT NOT NULL,
    starting   BOOLEAN NOT NULL,
    placed_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX placements_by_node ON placements (node);

-- +goose Down
DROP TABLE placements;
DROP TABLE team_usage;
DROP TABLE nodes;
