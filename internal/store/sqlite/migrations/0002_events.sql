-- Lifecycle events: an append-only log, one row per event. No foreign keys, so the table
-- can move to ClickHouse unchanged.
CREATE TABLE events (
    id          TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    ts          INTEGER NOT NULL, -- unix microseconds, as every time below
    team_id     TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    template_id TEXT NOT NULL,
    metadata    TEXT,             -- JSON object; NULL for a nil map
    request_id  TEXT NOT NULL,
    api_key_id  TEXT NOT NULL,
    data        TEXT NOT NULL     -- JSON object
) STRICT;

-- Listings are always of one team, optionally of one sandbox, in (ts, id) order.
CREATE INDEX events_by_team ON events (team_id, ts, id);
CREATE INDEX events_by_sandbox ON events (team_id, sandbox_id, ts, id);

-- Webhook subscriptions. The secret is kept in clear: it signs every delivery.
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams (id),
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL, -- JSON array of event types
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX webhooks_by_team ON webhooks (team_id, created_at, id);

-- The outbox: one row per (event, subscribed webhook), written in the event's transaction.
-- A pending row is claimable once next_attempt_at has passed and no lease holds it.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        TEXT NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    state           TEXT NOT NULL, -- pending, delivered, failed
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    leased_until    INTEGER,       -- set while an attempt is under way
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at, id);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

-- One row per HTTP attempt of a delivery.
CREATE TABLE webhook_attempts (
    delivery_id   TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL, -- 1 for the first
    started_at    INTEGER NOT NULL,
    status_code   INTEGER NOT NULL, -- 0 when no response came
    latency_us    INTEGER NOT NULL,
    error_class   TEXT NOT NULL,    -- '' on success
    error         TEXT NOT NULL,
    next_retry_at INTEGER,          -- NULL when it was the last attempt
    PRIMARY KEY (delivery_id, attempt)
) STRICT;
