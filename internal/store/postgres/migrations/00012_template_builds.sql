-- +goose Up
-- Template builds asked for over the API and their logs (they were JSON files under
-- <data>/builds and lines in memory or posing as a sandbox's in log_lines). record is the
-- template package's whole record, JSON; the columns beside it are what listings and
-- retention select on. A build's log lines go with it.
CREATE TABLE template_builds (
    id          TEXT COLLATE "C" PRIMARY KEY,
    template    TEXT COLLATE "C" NOT NULL,
    team_id     TEXT COLLATE "C" NOT NULL DEFAULT '',
    status      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    record      TEXT NOT NULL
);

CREATE INDEX template_builds_template ON template_builds (template, created_at);

CREATE TABLE template_build_logs (
    build_id TEXT COLLATE "C" NOT NULL REFERENCES template_builds (id) ON DELETE CASCADE,
    seq      BIGINT NOT NULL,
    ts       TIMESTAMPTZ NOT NULL,
    level    TEXT NOT NULL,
    step     TEXT NOT NULL DEFAULT '',
    message  TEXT NOT NULL,
    PRIMARY KEY (build_id, seq)
);

-- +goose Down
DROP TABLE template_build_logs;
DROP TABLE template_builds;
