-- +goose Up
-- Lifecycle events: an append-only log partitioned by day (events_YYYYMMDD, made on first use
-- by InsertEvent), so retention drops whole days rather than deleting rows. The key holds the
-- partition key, as PostgreSQL asks; ids stay unique because they are minted unique.
CREATE TABLE events (
    id          TEXT COLLATE "C" NOT NULL,
    type        TEXT NOT NULL,
    ts          TIMESTAMPTZ NOT NULL,
    team_id     TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    template_id TEXT NOT NULL,
    metadata    JSONB,
    request_id  TEXT NOT NULL,
    api_key_id  TEXT NOT NULL,
    data        JSONB NOT NULL,
    PRIMARY KEY (id, ts)
) PARTITION BY RANGE (ts);
CREATE INDEX events_by_team ON events (team_id, ts, id);
CREATE INDEX events_by_sandbox ON events (team_id, sandbox_id, ts, id);
CREATE INDEX events_by_request ON events (request_id) WHERE request_id != '';

-- Webhook subscriptions; secret is sealed by the vault when the store has one.
CREATE TABLE webhooks (
    id         TEXT COLLATE "C" PRIMARY KEY,
    team_id    TEXT NOT NULL REFERENCES teams (id),
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     JSONB NOT NULL,
    secret     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhooks_by_team ON webhooks (team_id, created_at, id);

-- The outbox: one row per (event, subscribed webhook), written in the event's transaction.
-- No foreign key to the partitioned events (a dropped day must not need a cascade): the
-- event's type and time are copied here, and its row is found by (id, ts).
CREATE TABLE webhook_deliveries (
    id              TEXT COLLATE "C" PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        TEXT NOT NULL,
    event_ts        TIMESTAMPTZ NOT NULL,
    event_type      TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    leased_until    TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at, id);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

CREATE TABLE webhook_attempts (
    delivery_id   TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    status_code   INTEGER NOT NULL,
    latency_us    BIGINT NOT NULL,
    error_class   TEXT NOT NULL,
    error         TEXT NOT NULL,
    next_retry_at TIMESTAMPTZ,
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE events;
