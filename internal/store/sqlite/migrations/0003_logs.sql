-- Sandbox log lines, clustered by (sandbox_id, ts, seq): a query is always of one sandbox, so
-- its lines sit together and a search scans them in order without a lookup per row. No
-- foreign keys, so the table can move to ClickHouse unchanged.
--
-- No FTS5 index: modernc's FTS5 (unicode61 or trigram) caps inserts near 30k or 13k lines/s
-- against about 120k/s without it, while a LIKE scan of one sandbox's 100k lines in this
-- layout takes about 25 ms.
CREATE TABLE logs (
    sandbox_id  TEXT NOT NULL,
    ts          INTEGER NOT NULL, -- unix microseconds, as every time below
    seq         INTEGER NOT NULL, -- orders lines of the same ts by insertion
    team_id     TEXT NOT NULL,
    template_id TEXT NOT NULL,
    level       INTEGER NOT NULL, -- 0 debug, 1 info, 2 warn, 3 error
    source      TEXT NOT NULL,    -- envd, process
    stream      TEXT NOT NULL,    -- stdout, stderr, pty; '' for envd
    pid         INTEGER NOT NULL, -- 0 when not about a process
    request_id  TEXT NOT NULL,
    message     TEXT NOT NULL,
    fields      TEXT,             -- JSON object; NULL when there are none
    PRIMARY KEY (sandbox_id, ts, seq)
) STRICT, WITHOUT ROWID;

CREATE INDEX logs_by_request ON logs (request_id) WHERE request_id != '';

-- Command records. A pid repeats over a sandbox's life, so the start time is in the key.
CREATE TABLE commands (
    sandbox_id        TEXT NOT NULL,
    pid               INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    team_id           TEXT NOT NULL,
    template_id       TEXT NOT NULL,
    tag               TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    user              TEXT NOT NULL,
    command           TEXT NOT NULL,
    args              TEXT,             -- JSON array; NULL for a nil slice
    cwd               TEXT NOT NULL,
    ended_at          INTEGER,          -- NULL while it runs
    duration_us       INTEGER NOT NULL,
    exit_code         INTEGER,          -- NULL when unknown
    signal            TEXT NOT NULL,
    end_cause         TEXT NOT NULL,    -- exited, killed, timeout, sandbox_killed; '' while it runs
    signal_request_id TEXT NOT NULL,
    kill_reason       TEXT NOT NULL,
    stdout_bytes      INTEGER NOT NULL,
    stderr_bytes      INTEGER NOT NULL,
    stdout_head       TEXT NOT NULL,
    stdout_tail       TEXT NOT NULL,
    stderr_head       TEXT NOT NULL,
    stderr_tail       TEXT NOT NULL,
    truncated         INTEGER NOT NULL,
    redactions        TEXT,             -- JSON object of counts by kind; NULL for none
    PRIMARY KEY (sandbox_id, pid, started_at)
) STRICT, WITHOUT ROWID;

CREATE INDEX commands_by_start ON commands (sandbox_id, started_at, pid);
CREATE INDEX commands_by_request ON commands (request_id) WHERE request_id != '';
CREATE INDEX commands_by_end ON commands (ended_at) WHERE ended_at IS NOT NULL;
