-- +goose Up
-- Templates' records, their tags and their layers: the authority on which templates exist
-- (the root filesystems and layer diffs stay on disk, or in the object store in a cluster).
-- record is the template package's whole record, JSON. tag is '' for a template's own
-- record (its latest build).
CREATE TABLE templates (
    name       TEXT COLLATE "C" NOT NULL,
    tag        TEXT COLLATE "C" NOT NULL DEFAULT '',
    team_id    TEXT COLLATE "C" NOT NULL DEFAULT '',
    build_id   TEXT COLLATE "C" NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    record     TEXT NOT NULL,
    PRIMARY KEY (name, tag)
);

CREATE TABLE template_layers (
    key        TEXT COLLATE "C" PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL,
    record     TEXT NOT NULL
);

-- +goose Down
DROP TABLE template_layers;
DROP TABLE templates;
