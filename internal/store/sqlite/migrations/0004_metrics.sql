-- Sandbox resource samples: one row per sandbox every few seconds, pruned by age. No foreign
-- keys, so samples outlive nothing they should not and the table can move to a time-series
-- store unchanged.
CREATE TABLE sandbox_metrics (
    sandbox_id     TEXT NOT NULL,
    ts             INTEGER NOT NULL, -- unix microseconds
    team_id        TEXT NOT NULL,
    cpu_count      INTEGER NOT NULL,
    cpu_used_pct   REAL NOT NULL,
    mem_used       INTEGER NOT NULL, -- bytes, as every size below
    mem_total      INTEGER NOT NULL,
    mem_cache      INTEGER NOT NULL,
    disk_used      INTEGER NOT NULL,
    disk_total     INTEGER NOT NULL,
    net_rx_bytes   INTEGER NOT NULL, -- counters since the sandbox started
    net_tx_bytes   INTEGER NOT NULL,
    net_rx_packets INTEGER NOT NULL,
    net_tx_packets INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, ts)
) STRICT, WITHOUT ROWID;

-- Pruning deletes by age across sandboxes.
CREATE INDEX sandbox_metrics_by_ts ON sandbox_metrics (ts);
