-- Log lines are stored in chunks: one row per (sandbox, team, template) per written batch, at
-- most 2000 lines or about 1 MiB each. A row per line made ingest pay SQLite's B-tree work per
-- line; a chunk pays it once per a few hundred lines. The lines themselves are a binary blob
-- (see internal/store/sqlite/logchunk.go) that queries decode and filter in Go.
--
-- The old logs table stays: lines written before this migration are read from it, and
-- queries merge both, until PruneLogs deletes them. Nothing writes to it any more.
CREATE TABLE log_chunks (
    id          INTEGER PRIMARY KEY,
    sandbox_id  TEXT NOT NULL,
    team_id     TEXT NOT NULL,
    template_id TEXT NOT NULL,
    min_ts      INTEGER NOT NULL, -- unix microseconds of the chunk's oldest line
    max_ts      INTEGER NOT NULL, -- and of its newest
    min_seq     INTEGER NOT NULL,
    max_seq     INTEGER NOT NULL,
    lines       INTEGER NOT NULL, -- how many lines
    levels      INTEGER NOT NULL, -- bit 1<<level of each level present (0 debug .. 3 error)
    sources     INTEGER NOT NULL, -- bits of the sources present: envd 1, process 2, server 4, other 8
    streams     INTEGER NOT NULL, -- bits of the streams present: '' 1, stdout 2, stderr 4, pty 8, other 16
    data        BLOB NOT NULL     -- the encoded lines, in seq order
) STRICT;

CREATE INDEX log_chunks_by_start ON log_chunks (sandbox_id, min_ts);
CREATE INDEX log_chunks_by_end ON log_chunks (sandbox_id, max_ts);
CREATE INDEX log_chunks_by_age ON log_chunks (max_ts);

-- One row per distinct non-empty request id per chunk, so a request's lines (cove trace, or a
-- query by request id) are found without decoding every chunk.
CREATE TABLE log_chunk_requests (
    request_id TEXT NOT NULL,
    team_id    TEXT NOT NULL,
    chunk_id   INTEGER NOT NULL,
    PRIMARY KEY (request_id, team_id, chunk_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX log_chunk_requests_by_chunk ON log_chunk_requests (chunk_id);
