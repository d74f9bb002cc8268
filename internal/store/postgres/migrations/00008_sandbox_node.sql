-- +goose Up
-- A cluster (issue 24): the node that runs or last ran a sandbox ('' on one node, and for
-- records from before). A node adopts, sweeps and serves only its own; a lost node's live
-- sandboxes are found by it.
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node_live ON sandboxes (node) WHERE state <> 'killed';

-- +goose Down
DROP INDEX sandboxes_node_live;
ALTER TABLE sandboxes DROP COLUMN node;
