-- A cluster (issue 24): the node that runs or last ran a sandbox ('' on one node, and for
-- records from before). A node adopts, sweeps and serves only its own.
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
