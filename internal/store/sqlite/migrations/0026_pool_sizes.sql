-- Warm pools: how many started sandboxes of each template the server keeps ready (set through
-- the API or CLI; cove server --pool is the default for a template without a row).
CREATE TABLE pool_sizes (
    template   TEXT PRIMARY KEY,
    size       INTEGER NOT NULL CHECK (size >= 0),
    updated_at INTEGER NOT NULL
) STRICT;
