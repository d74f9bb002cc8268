-- Volumes in a cluster (issue 24): a volume no node holds (node '') is its image in the object
-- store at version; used_bytes is what its files took when it was published.
ALTER TABLE volumes ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE volumes ADD COLUMN used_bytes INTEGER NOT NULL DEFAULT 0;
