-- Template builds asked for over the API and their logs (they were JSON files under
-- <data>/builds and lines in memory or posing as a sandbox's in log_lines). record is the
-- template package's whole record, JSON; the columns beside it are what listings and
-- retention select on. A build's log lines go with it.
CREATE TABLE template_builds (
    id          TEXT PRIMARY KEY,
    template    TEXT NOT NULL,
    team_id     TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER,
    record      TEXT NOT NULL
) STRICT;

CREATE INDEX template_builds_template ON template_builds (template, created_at);

CREATE TABLE template_build_logs (
    build_id TEXT NOT NULL REFERENCES template_builds (id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL,
    ts       INTEGER NOT NULL,
    level    TEXT NOT NULL,
    step     TEXT NOT NULL DEFAULT '',
    message  TEXT NOT NULL,
    PRIMARY KEY (build_id, seq)
) STRICT, WITHOUT ROWID;
