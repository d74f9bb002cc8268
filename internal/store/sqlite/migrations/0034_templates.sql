-- Templates' records, their tags and their layers: the authority on which templates exist
-- (the root filesystems and layer diffs stay on disk, or in the object store in a cluster).
-- record is the template package's whole record, JSON. tag is '' for a template's own
-- record (its latest build).
CREATE TABLE templates (
    name       TEXT NOT NULL,
    tag        TEXT NOT NULL DEFAULT '',
    team_id    TEXT NOT NULL DEFAULT '',
    build_id   TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    record     TEXT NOT NULL,
    PRIMARY KEY (name, tag)
) STRICT, WITHOUT ROWID;

CREATE TABLE template_layers (
    key        TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    record     TEXT NOT NULL
) STRICT, WITHOUT ROWID;
