-- +goose Up
-- Log lines, one row each, partitioned by day (log_lines_YYYYMMDD, made as the days come), so
-- retention drops whole days. seq orders the lines of one microsecond by insertion.
CREATE TABLE log_lines (
    team_id     TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    template_id TEXT NOT NULL,
    ts          TIMESTAMPTZ NOT NULL,
    seq         BIGINT NOT NULL,
    level       SMALLINT NOT NULL, -- 0 debug, 1 info, 2 warn, 3 error
    source      TEXT NOT NULL,
    stream      TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    request_id  TEXT NOT NULL,
    message     TEXT NOT NULL,
    fields      JSONB           -- NULL when there are none
) PARTITION BY RANGE (ts);
CREATE INDEX log_lines_by_sandbox ON log_lines (team_id, sandbox_id, ts, seq);
CREATE INDEX log_lines_by_team ON log_lines (team_id, ts, seq);
CREATE INDEX log_lines_by_request ON log_lines (request_id, team_id) WHERE request_id != '';
CREATE SEQUENCE log_seq;

-- Command records. A pid repeats over a sandbox's life, so the start time is in the key.
CREATE TABLE commands (
    sandbox_id        TEXT NOT NULL,
    pid               INTEGER NOT NULL,
    started_at        TIMESTAMPTZ NOT NULL,
    team_id           TEXT NOT NULL,
    template_id       TEXT NOT NULL,
    tag               TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    "user"            TEXT NOT NULL,
    command           TEXT NOT NULL,
    args              JSONB,
    cwd               TEXT NOT NULL,
    ended_at          TIMESTAMPTZ,
    duration_us       BIGINT NOT NULL,
    exit_code         INTEGER,
    signal            TEXT NOT NULL,
    end_cause         TEXT NOT NULL,
    signal_request_id TEXT NOT NULL,
    kill_reason       TEXT NOT NULL,
    stdout_bytes      BIGINT NOT NULL,
    stderr_bytes      BIGINT NOT NULL,
    stdout_head       TEXT NOT NULL,
    stdout_tail       TEXT NOT NULL,
    stderr_head       TEXT NOT NULL,
    stderr_tail       TEXT NOT NULL,
    truncated         BOOLEAN NOT NULL,
    redactions        JSONB,
    PRIMARY KEY (sandbox_id, pid, started_at)
);
CREATE INDEX commands_by_start ON commands (sandbox_id, started_at, pid);
CREATE INDEX commands_by_request ON commands (request_id) WHERE request_id != '';
CREATE INDEX commands_by_signal_request ON commands (signal_request_id) WHERE signal_request_id != '';
CREATE INDEX commands_by_end ON commands (ended_at) WHERE ended_at IS NOT NULL;

-- Sandbox resource samples, pruned by age.
CREATE TABLE sandbox_metrics (
    sandbox_id     TEXT NOT NULL,
    ts             TIMESTAMPTZ NOT NULL,
    team_id        TEXT NOT NULL,
    cpu_count      INTEGER NOT NULL,
    cpu_used_pct   DOUBLE PRECISION NOT NULL,
    mem_used       BIGINT NOT NULL,
    mem_total      BIGINT NOT NULL,
    mem_cache      BIGINT NOT NULL,
    disk_used      BIGINT NOT NULL,
    disk_total     BIGINT NOT NULL,
    net_rx_bytes   BIGINT NOT NULL,
    net_tx_bytes   BIGINT NOT NULL,
    net_rx_packets BIGINT NOT NULL,
    net_tx_packets BIGINT NOT NULL,
    PRIMARY KEY (sandbox_id, ts)
);
CREATE INDEX sandbox_metrics_by_ts ON sandbox_metrics (ts);

-- +goose Down
DROP TABLE sandbox_metrics;
DROP TABLE commands;
DROP SEQUENCE log_seq;
DROP TABLE log_lines;
