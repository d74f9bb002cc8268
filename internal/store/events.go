package store

import (
	"context"
	"encoding/json"
	"time"
)

// Event is one stored lifecycle event. Type is an events.EventType's string; the store does
// not interpret it beyond matching webhooks' subscriptions.
type Event struct {
	ID         string // unique; sorts by creation time within a process
	Type       string
	Timestamp  time.Time
	TeamID     string
	SandboxID  string
	TemplateID string
	Metadata   map[string]string // the sandbox's metadata when the event happened
	RequestID  string            // the call that caused it, or "system"
	APIKeyID   string            // the key whose call caused it, when a client did
	Data       json.RawMessage   // a JSON object
}

// EventPosition is a place in an event listing: the (Timestamp, ID) of the last event a
// page returned.
type EventPosition struct {
	Timestamp time.Time
	ID        string
}

// EventFilter selects events for a listing.
type EventFilter struct {
	TeamID    string    // required: listings never cross teams
	SandboxID string    // "" for all the team's sandboxes
	Types     []string  // any of these; all types when empty
	Since     time.Time // inclusive; zero for no bound
	Until     time.Time // exclusive; zero for no bound
	Limit     int       // 1..1000; 100 when 0
	Desc      bool      // newest first
	// After continues a listing after this position, in the listing's order.
	After *EventPosition
}

// EventPage is one page of an event listing.
type EventPage struct {
	Events []*Event
	// More reports that events follow the last one of this page.
	More bool
}

// Webhook is a team's subscription: events of the listed types are POSTed to URL, signed
// with Secret.
type Webhook struct {
	ID        string
	TeamID    string
	Name      string
	URL       string
	Events    []string // event types
	Secret    string   // kept in clear: it signs every delivery
	CreatedAt time.Time
}

// DeliveryState is where a webhook delivery stands.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"   // waiting for its first or next attempt
	DeliveryDelivered DeliveryState = "delivered" // a 2xx answered
	DeliveryFailed    DeliveryState = "failed"    // out of attempts, or a status not worth retrying
)

// Delivery is one event on its way to one webhook: the outbox row.
type Delivery struct {
	ID            string
	WebhookID     string
	EventID       string
	EventType     string
	State         DeliveryState
	Attempts      int       // attempts made so far
	NextAttemptAt time.Time // when pending: when the next attempt is due
	CreatedAt     time.Time
	UpdatedAt     time.Time
	History       []*DeliveryAttempt // oldest first; filled by listings
}

// DeliveryAttempt is one HTTP attempt of a delivery.
type DeliveryAttempt struct {
	DeliveryID string
	Attempt    int // 1 for the first
	StartedAt  time.Time
	StatusCode int           // 0 when no response came
	Latency    time.Duration // until the response headers, or the failure
	ErrorClass string        // "" on success; dns, connect, timeout, tls, http_status, other
	Error      string
	// NextRetryAt is when the next attempt is due; nil when this was the last.
	NextRetryAt *time.Time
}

// DueDelivery is a claimed delivery with what its attempt needs.
type DueDelivery struct {
	Delivery *Delivery
	Webhook  *Webhook
	Event    *Event
}

// Events stores lifecycle events and the webhook outbox. Writing an event and queueing its
// deliveries is one transaction, so an event is never recorded without its deliveries nor a
// delivery queued for an event that was not recorded.
type Events interface {
	// InsertEvent stores ev and one pending delivery, due at once, for each of its team's
	// webhooks subscribed to its type. It returns how many deliveries it queued.
	InsertEvent(ctx context.Context, ev *Event) (deliveries int, err error)
	ListEvents(ctx context.Context, f EventFilter) (*EventPage, error)
}

// Webhooks stores webhook subscriptions and their deliveries.
type Webhooks interface {
	InsertWebhook(ctx context.Context, w *Webhook) error
	// GetWebhook returns team teamID's webhook id; ErrNotFound when the team has none.
	GetWebhook(ctx context.Context, teamID, id string) (*Webhook, error)
	ListWebhooks(ctx context.Context, teamID string) ([]*Webhook, error)
	// DeleteWebhook deletes the webhook and its deliveries; ErrNotFound when the team has
	// no such webhook.
	DeleteWebhook(ctx context.Context, teamID, id string) error
	// ListDeliveries returns the webhook's newest deliveries, at most limit, with their
	// attempts; ErrNotFound when the team has no such webhook.
	ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*Delivery, error)

	// ClaimDeliveries leases up to limit pending deliveries due at now, oldest due first,
	// until leaseUntil: no other claim returns them before then.
	ClaimDeliveries(ctx context.Context, now, leaseUntil time.Time, limit int) ([]*DueDelivery, error)
	// NextDeliveryAt returns when the earliest pending delivery becomes claimable; ok is
	// false when none is pending.
	NextDeliveryAt(ctx context.Context) (at time.Time, ok bool, err error)
	// RecordAttempt records attempt a of a claimed delivery and moves it to state, due
	// again at a.NextRetryAt when still pending, and ends its lease. ErrNotFound when the
	// delivery is gone (its webhook was deleted).
	RecordAttempt(ctx context.Context, a *DeliveryAttempt, state DeliveryState) error
	// ReleaseLeases ends the leases of the deliveries ids, or of every delivery when ids is
	// empty (on start, a previous process's claims), making them claimable again.
	ReleaseLeases(ctx context.Context, ids ...string) error
}

// EventStore is what the events package needs.
type EventStore interface {
	Events
	Webhooks
}
