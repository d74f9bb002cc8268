// Package events records what happens to sandboxes and tells webhooks about it.
//
// The one idea: the store is an outbox. Emit writes an event and one pending delivery per
// subscribed webhook in one transaction, and a dispatcher goroutine works the pending
// deliveries off the store: woken by Emit, or by a timer set to the next retry. Nothing is
// held only in memory, so a restart loses no delivery; it resumes them.
//
// It must not import the orchestrator, the runtime or the edges: the orchestrator calls Emit
// through its Events interface, and the event and webhook routes (internal/control/api/teamroutes)
// call its checks (ValidateURL, AllowedHost) and the store.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
	"github.com/cove-dev/cove/sdk/requestid"
)

// SystemRequestID is the request id of events no client call caused (the TTL evictor, a
// restart's clean-up).
const SystemRequestID = requestid.System

// Event is one thing that happened to one sandbox.
type Event struct {
	ID         string    // filled by Emit when empty
	Type       EventType // required
	Timestamp  time.Time // filled by Emit when zero
	SandboxID  string    // required
	TemplateID string
	TeamID     string // required
	Metadata   map[string]string
	// RequestID is the call that caused the event. Emit takes the context's when empty, and
	// SystemRequestID when the context has none.
	RequestID string
	APIKeyID  string // the key whose call caused it, when a client did
	// Data is the event's event_data: its type's payload from the SDK (cove.KilledEventData
	// for SandboxKilled, and so on: cove.EventDataFor registers them; Emit refuses any other
	// type); nil sends {}.
	Data any
}

// EmitOrWarn emits ev to to, detached from ctx's cancel (an event outlives the call that caused
// it); a failure is a warning, rate-limited per event type, and never the caller's error: the
// orchestrator's and the network policy's events go through it.
func EmitOrWarn(ctx context.Context, to Emitter, ev Event, logger *slog.Logger) {
	if err := to.Emit(context.WithoutCancel(ctx), ev); err != nil {
		t := ev.Type.String()
		telemetry.Warnings.Warn(ctx, logger, t, "event not recorded", telemetry.KeyEventType, t, telemetry.KeyError, err.Error())
	}
}

// ForSandbox returns an event of type t about sb, with its ids and metadata filled in.
func ForSandbox(t EventType, sb *store.Sandbox) Event {
	return Event{Type: t, SandboxID: sb.ID, TemplateID: sb.TemplateID, TeamID: sb.TeamID, Metadata: sb.Metadata}
}

// Execution is E2B's event_data.execution of a killed (or paused) event.
type Execution = cove.Execution

// ExecutionOf returns sb's execution as of end: from its start (or last resume, when the
// caller sets StartedAt so) until end.
func ExecutionOf(sb *store.Sandbox, end time.Time) Execution {
	return Execution{StartedAt: sb.StartedAt.UTC(), VCPUCount: sb.CPUCount, MemoryMB: sb.MemoryMB,
		ExecutionTimeMS: max(0, end.Sub(sb.StartedAt)).Milliseconds()}
}

// KilledData is a SandboxKilled event's data; the orchestrator adds the post-mortem and TTL.
func KilledData(why reason.KillReason, ex Execution) *cove.KilledEventData {
	return &cove.KilledEventData{KillReason: why.String(), Execution: ex}
}

// PausedData is a SandboxPaused event's data: the execution that the pause ended.
func PausedData(ex Execution) *cove.PausedEventData {
	return &cove.PausedEventData{Execution: ex}
}

// UpdatedData is a SandboxUpdated event's data: the new end of the sandbox's TTL and the
// timeout that set it.
func UpdatedData(endAt time.Time, timeout time.Duration) *cove.UpdatedEventData {
	return &cove.UpdatedEventData{EndAt: endAt.UTC(), TimeoutSeconds: int64(timeout.Seconds())}
}

// OOMData is a SandboxOOM event's data: how many OOM kills happened.
func OOMData(count int) *cove.OOMEventData {
	return &cove.OOMEventData{Count: count}
}

// NetworkDeniedData is a network.denied event's data: the destination, its port (0 without
// one), the protocol, the rule that refused it in the user's words (rule) and its kind, and
// how many packets the sample saw since first.
func NetworkDeniedData(destination string, port int, protocol, rule, kind string, packets int, first time.Time) *cove.NetworkDeniedEventData {
	return &cove.NetworkDeniedEventData{Destination: destination, Port: port, Protocol: protocol, Rule: rule,
		DenyKind: kind, Packets: packets, FirstAt: first.UTC()}
}

// Backoff spaces a delivery's attempts: Initial, then doubling up to Max, for at most
// Attempts attempts in all.
type Backoff struct {
	Initial  time.Duration // 1 s when 0
	Max      time.Duration // 5 min when 0
	Attempts int           // 8 when 0
}

// Delay returns the wait after failed attempt n (1 for the first).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Minute
	}
	b.Max = max(b.Max, b.Initial)
	if b.Attempts <= 0 {
		b.Attempts = 8
	}
	return b
}

// Config is what New needs.
type Config struct {
	Store store.EventStore
	// Logger logs the dispatcher's lines; nil uses telemetry's default.
	Logger *slog.Logger
	// HTTPClient sends deliveries; nil uses a client that does not follow redirects and
	// refuses addresses outside AllowNets that are loopback, link-local, private,
	// unique-local or the server's own, resolving at delivery time and pinning the address.
	HTTPClient *http.Client
	// AllowNets are ranges deliveries may reach although they are otherwise refused (an
	// operator's receiver on the loopback or the private network).
	AllowNets []netip.Prefix
	Backoff   Backoff
	// AttemptTimeout bounds one delivery attempt; 10 s when 0.
	AttemptTimeout time.Duration
	// Workers is how many deliveries are attempted at once; 8 when 0.
	Workers int
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = telemetry.Logger(context.Background())
	}
	if c.HTTPClient == nil {
		c.HTTPClient = deliveryClient(&guard{allow: c.AllowNets, resolver: net.DefaultResolver, own: ownAddresses})
	}
	c.Backoff = c.Backoff.withDefaults()
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 10 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	return c
}

// Bus records events and delivers them to webhooks.
type Bus struct {
	cfg    Config
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New starts a Bus on cfg.Store. Deliveries a previous process left pending are resumed,
// and the leases of those it was attempting when it stopped are ended first.
func New(ctx context.Context, cfg Config) (*Bus, error) {
	if cfg.Store == nil {
		return nil, errors.New("events: no store")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Store.ReleaseLeases(ctx); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	// The dispatcher outlives New's context; it stops on Close.
	runCtx, cancel := context.WithCancel(telemetry.WithLogger(context.WithoutCancel(ctx), cfg.Logger))
	b := &Bus{cfg: cfg, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	b.poke()
	go b.dispatch(runCtx)
	return b, nil
}

// Close stops the dispatcher and waits for attempts under way to end. Interrupted attempts
// are not counted; their deliveries stay pending for the next Bus.
func (b *Bus) Close() {
	b.once.Do(func() {
		b.cancel()
		<-b.done
	})
}

func (b *Bus) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Emit records ev and queues its webhook deliveries. It fills ID, Timestamp and RequestID
// when they are empty.
func (b *Bus) Emit(ctx context.Context, ev Event) error {
	rec, err := toStore(ctx, ev)
	if err != nil {
		return err
	}
	n, err := b.cfg.Store.InsertEvent(ctx, rec)
	if err != nil {
		return fmt.Errorf("emit %s of %s: %w", ev.Type, ev.SandboxID, err)
	}
	if n > 0 {
		b.poke()
	}
	return nil
}

// toStore checks ev and fills what Emit fills.
func toStore(ctx context.Context, ev Event) (*store.Event, error) {
	if !ev.Type.Valid() {
		return nil, fmt.Errorf("emit: unknown event type %q", string(ev.Type))
	}
	if (ev.SandboxID == "" && ev.Type != LimitReached) || ev.TeamID == "" {
		return nil, fmt.Errorf("emit %s: sandbox and team are required", ev.Type)
	}
	if err := CheckData(ev.Type, ev.Data); err != nil {
		return nil, fmt.Errorf("emit: %w", err)
	}
	if ev.ID == "" {
		ev.ID = newID("evt_")
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now()
	}
	if ev.RequestID == "" {
		ev.RequestID = telemetry.RequestID(ctx)
	}
	if ev.RequestID == "" {
		ev.RequestID = SystemRequestID
	}
	data := []byte("{}")
	if ev.Data != nil {
		var err error
		if data, err = json.Marshal(ev.Data); err != nil {
			return nil, fmt.Errorf("emit %s of %s: data: %w", ev.Type, ev.SandboxID, err)
		}
	}
	return &store.Event{
		ID: ev.ID, Type: string(ev.Type), Timestamp: ev.Timestamp.UTC(), TeamID: ev.TeamID,
		SandboxID: ev.SandboxID, TemplateID: ev.TemplateID, Metadata: ev.Metadata,
		RequestID: ev.RequestID, APIKeyID: ev.APIKeyID, Data: data,
	}, nil
}

// newID mints a unique id that sorts by creation time within this process.
func newID(prefix string) string { return prefix + telemetry.NewRequestID() }

// wireEvent is an event on the wire, the API's listings and every webhook body: the SDK's
// type, so the two sides cannot drift.
type wireEvent = cove.SandboxEvent

func toWire(ev *store.Event) wireEvent {
	md := ev.Metadata
	if md == nil {
		md = map[string]string{}
	}
	data := ev.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return wireEvent{
		ID: ev.ID, Type: ev.Type, Timestamp: ev.Timestamp.UTC(), SandboxID: ev.SandboxID,
		SandboxTemplateID: ev.TemplateID, SandboxTeamID: ev.TeamID, SandboxMetadata: md,
		RequestID: ev.RequestID, APIKeyID: ev.APIKeyID, EventData: data,
	}
}

// Stamp says which attempt of which delivery a webhook body is, and when it was sent. It
// is inside the signed body, so a receiver that refuses stale or seen stamps cannot be
// replayed to: the signature header stays E2B's, over the body.
type Stamp struct {
	DeliveryID string    `json:"deliveryId"`
	Attempt    int       `json:"attempt"`
	SentAt     time.Time `json:"sentAt"`
}

// webhookBody is what a webhook receives: the event and the delivery's stamp.
type webhookBody struct {
	wireEvent
	Delivery Stamp `json:"delivery"`
}

// Body returns the JSON of ev as a webhook receives it in the attempt stamp describes.
func Body(ev *store.Event, stamp Stamp) ([]byte, error) {
	stamp.SentAt = stamp.SentAt.UTC()
	return json.Marshal(webhookBody{toWire(ev), stamp})
}
