package cove

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The lifecycle event types (E2B's names, and Cove's oom).
const (
	EventSandboxCreated   = "sandbox.lifecycle.created"
	EventSandboxConnected = "sandbox.lifecycle.connected"
	EventSandboxPaused    = "sandbox.lifecycle.paused"
	EventSandboxResumed   = "sandbox.lifecycle.resumed"
	EventSandboxUpdated   = "sandbox.lifecycle.updated"
	EventSandboxKilled    = "sandbox.lifecycle.killed"
	EventSandboxOOM       = "sandbox.lifecycle.oom"
	// EventSandboxCheckpointed: a running sandbox was checkpointed in place (briefly paused,
	// same id and TTL) for a fork or a snapshot.
	EventSandboxCheckpointed = "sandbox.lifecycle.checkpointed"
	// EventSandboxNetworkDenied: the network rules refused connections of the sandbox
	// (sampled: at most a few per sandbox every two seconds).
	EventSandboxNetworkDenied = "sandbox.network.denied"
	// EventLimitReached: a bound of docs/bounds.md refused or cut something of a team (a
	// quota, the host's free space or files, a log budget, a build's time). Sampled: at most
	// one per team, limit and sandbox every ten seconds. SandboxID is "" when no sandbox was
	// concerned (a create or a volume refused).
	EventLimitReached = "team.limit.reached"
)

// Limits an EventLimitReached names: a closed set.
const (
	LimitTeamSandboxes = "team_sandboxes"    // the team's concurrent sandboxes (429)
	LimitTeamVCPUs     = "team_vcpus"        // the team's vCPUs (429)
	LimitTeamMemory    = "team_memory"       // the team's memory (429)
	LimitTeamCreates   = "team_create_rate"  // the team's creates per second (429)
	LimitTeamVolumes   = "team_volumes"      // the team's volume count or total size (429)
	LimitHostVolumes   = "host_volume_space" // a volume the host's disk cannot hold (507)
	LimitHostFiles     = "host_open_files"   // the host's open files, creates refused (503)
	LimitTeamLogBytes  = "team_log_bytes"    // the team's log bytes per hour: lines dropped
	LimitHostLogDisk   = "host_log_disk"     // the log store's free-space floor: lines dropped
	LimitBuildStepTime = "build_step_time"   // a template build's step killed at its limit
	LimitBuildTime     = "build_time"        // a whole template build cancelled at its limit
)

// LimitReachedEventData is an EventLimitReached's payload.
type LimitReachedEventData struct {
	Caller
	// Limit names the bound (the Limit* constants); Detail says what was refused or cut, in
	// the words of the refusal the client got.
	Limit  string `json:"limit"`
	Detail string `json:"detail"`
}

// SandboxEvent is one lifecycle event, as GET /events/sandboxes[/{id}] lists it and every
// webhook receives it. The server emits these very types.
type SandboxEvent struct {
	ID                string            `json:"id"`
	Type              string            `json:"type"`
	Timestamp         time.Time         `json:"timestamp"`
	SandboxID         string            `json:"sandboxId"`
	SandboxTemplateID string            `json:"sandboxTemplateId"`
	SandboxTeamID     string            `json:"sandboxTeamId"`
	SandboxMetadata   map[string]string `json:"sandboxMetadata"`
	RequestID         string            `json:"requestId"` // the call that caused it, or "system"
	APIKeyID          string            `json:"apiKeyId,omitempty"`
	// EventData is the type's payload; Data decodes it.
	EventData json.RawMessage `json:"eventData"`
}

// Data decodes the event's payload into the type registered for its event type: a
// *KilledEventData for a killed event, and so on (see EventDataFor).
func (e SandboxEvent) Data() (any, error) {
	v, err := EventDataFor(e.Type)
	if err != nil {
		return nil, err
	}
	if len(e.EventData) > 0 {
		if err := json.Unmarshal(e.EventData, v); err != nil {
			return nil, fmt.Errorf("event %s (%s): eventData: %w", e.ID, e.Type, err)
		}
	}
	return v, nil
}

// eventTypes is the registry of event types: each type with its payload, the one place a type
// and its shape meet. The server's events package takes its set from it and refuses to emit a
// payload of another type.
var eventTypes = []struct {
	name string
	data func() any
}{
	{EventSandboxCreated, func() any { return new(CreatedEventData) }},
	{EventSandboxConnected, func() any { return new(ConnectedEventData) }},
	{EventSandboxPaused, func() any { return new(PausedEventData) }},
	{EventSandboxResumed, func() any { return new(ResumedEventData) }},
	{EventSandboxUpdated, func() any { return new(UpdatedEventData) }},
	{EventSandboxKilled, func() any { return new(KilledEventData) }},
	{EventSandboxOOM, func() any { return new(OOMEventData) }},
	{EventSandboxCheckpointed, func() any { return new(CheckpointedEventData) }},
	{EventSandboxNetworkDenied, func() any { return new(NetworkDeniedEventData) }},
	{EventLimitReached, func() any { return new(LimitReachedEventData) }},
}

// EventTypes lists every event type, in the registry's order.
func EventTypes() []string {
	out := make([]string, len(eventTypes))
	for i, t := range eventTypes {
		out[i] = t.name
	}
	return out
}

// EventDataFor returns a new, empty payload of the event type (a pointer), or an error for a
// type outside the set.
func EventDataFor(eventType string) (any, error) {
	for _, t := range eventTypes {
		if t.name == eventType {
			return t.data(), nil
		}
	}
	return nil, fmt.Errorf("unknown event type %q", eventType)
}

// Caller names the key whose call caused an event, when a client's call did.
type Caller struct {
	APIKeyName string `json:"api_key_name,omitempty"`
}

// SetAPIKeyName records the caller's key name.
func (c *Caller) SetAPIKeyName(name string) { c.APIKeyName = name }

// GetAPIKeyName is the caller's key name, "" when Cove acted by itself.
func (c *Caller) GetAPIKeyName() string { return c.APIKeyName }

// Execution is E2B's event_data.execution: a sandbox's resources and run time.
type Execution struct {
	StartedAt       time.Time `json:"started_at"`
	VCPUCount       int       `json:"vcpu_count"`
	MemoryMB        int       `json:"memory_mb"`
	ExecutionTimeMS int64     `json:"execution_time"` // milliseconds
}

// CreatedEventData is a created event's payload.
type CreatedEventData struct {
	Caller
	TimeoutSeconds float64 `json:"timeout"`
	Secure         bool    `json:"secure"`
	AutoPause      bool    `json:"auto_pause"`
	// ForkedFrom or SnapshotID say where a sandbox restored from a checkpoint came from.
	ForkedFrom string `json:"forked_from,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// StartSnapshotBuild is the template build whose start snapshot the sandbox was
	// restored from, its start command running; "" when the command ran at create.
	StartSnapshotBuild string `json:"start_snapshot_build,omitempty"`
	// Pooled: the create claimed a started sandbox of the template's warm pool; ClaimMS is
	// how long the claim took (its record, network rules and envd's /init).
	Pooled  bool    `json:"pooled,omitempty"`
	ClaimMS float64 `json:"claim_ms,omitempty"`
}

// ConnectedEventData is a connected event's payload: the TTL after the connect.
type ConnectedEventData struct {
	Caller
	EndAt time.Time `json:"end_at"`
}

// PausedEventData is a paused event's payload: the execution the pause ended.
type PausedEventData struct {
	Caller
	Execution Execution `json:"execution"`
	// Kind is how it was paused: snapshot (memory to disk) or freeze.
	Kind       string `json:"kind,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// SnapshotBytes and SnapshotMS describe a snapshot pause's checkpoint, or the files a
	// filesystem pause kept (what the sandbox wrote) and the stop's time.
	SnapshotBytes int64 `json:"snapshot_bytes,omitempty"`
	SnapshotMS    int64 `json:"snapshot_ms,omitempty"`
}

// NetworkDeniedEventData is a network.denied event's payload: the destination, its port (0
// without one), the protocol, the rule that refused it in the user's words and its kind,
// and how many packets the sample saw since FirstAt. BuildID is set when the connection was
// a template build's RUN step's (the event's sandbox id is then the build's too).
type NetworkDeniedEventData struct {
	Caller
	Destination string    `json:"destination"`
	Port        int       `json:"port"`
	Protocol    string    `json:"protocol"`
	Rule        string    `json:"rule"`
	DenyKind    string    `json:"deny_kind"`
	Packets     int       `json:"packets"`
	FirstAt     time.Time `json:"first_at"`
	BuildID     string    `json:"build_id,omitempty"`
}

// String is the sample in words: "3 connection attempts to 1.2.3.4:443/tcp denied by denyOut 0.0.0.0/0".
func (d *NetworkDeniedEventData) String() string {
	dst := d.Destination
	if d.Port > 0 {
		dst = fmt.Sprintf("%s:%d", dst, d.Port)
	}
	noun := "connection attempts"
	if d.Packets == 1 {
		noun = "connection attempt"
	}
	return fmt.Sprintf("%d %s to %s/%s denied by %s", d.Packets, noun, dst, d.Protocol, d.Rule)
}

// CheckpointedEventData is a checkpointed event's payload: why (a fork or a snapshot), how
// big and how long.
type CheckpointedEventData struct {
	Caller
	Purpose       string `json:"purpose"`
	SnapshotBytes int64  `json:"snapshot_bytes"`
	DurationMS    int64  `json:"duration_ms"`
}

// ResumedEventData is a resumed event's payload: the new TTL.
type ResumedEventData struct {
	Caller
	EndAt          time.Time `json:"end_at"`
	TimeoutSeconds float64   `json:"timeout"`
	// Kind is how it had been paused (snapshot: a restore; freeze: a thaw; filesystem: a
	// reboot).
	Kind       string `json:"kind,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	// Rebooted: it had been paused without its memory and cold-booted on its kept files;
	// its processes started afresh and its template's start command and ready check ran again.
	Rebooted bool `json:"rebooted,omitempty"`
}

// UpdatedEventData is an updated event's payload: the new end of the TTL and the timeout
// that set it.
type UpdatedEventData struct {
	Caller
	EndAt          time.Time `json:"end_at"`
	TimeoutSeconds int64     `json:"timeout"`
}

// OOMEventData is an oom event's payload: the sandbox's OOM kill count so far.
type OOMEventData struct {
	Caller
	Count int `json:"count"`
}

// KilledEventData is a killed event's payload: why, the execution, the TTL it had, and what
// the sandbox looked like at the kill.
type KilledEventData struct {
	Caller
	KillReason string      `json:"kill_reason"`
	Execution  Execution   `json:"execution"`
	EndAt      time.Time   `json:"end_at"` // the TTL, which a timeout kill reached
	Postmortem *Postmortem `json:"postmortem,omitempty"`
}

// Postmortem is what a sandbox looked like when it was killed.
type Postmortem struct {
	At time.Time `json:"at"`
	// Detail is why, when Cove knows more than the reason ("envd exited: code 2").
	Detail string `json:"detail,omitempty"`
	// Processes are the biggest by memory first, at most 50, commands redacted.
	Processes    []PostmortemProcess `json:"processes,omitempty"`
	ProcessCount int                 `json:"process_count,omitempty"`
	Resources    *Resources          `json:"resources,omitempty"`
	// LastOutput are the sandbox's last collected output lines.
	LastOutput []string `json:"last_output,omitempty"`
}

// PostmortemProcess is one process of a post-mortem.
type PostmortemProcess struct {
	PID      int    `json:"pid"`
	PPID     int    `json:"ppid"`
	State    string `json:"state"`
	Command  string `json:"command"`
	RSSBytes uint64 `json:"rss_bytes"`
}

// Resources is a sandbox's resource use at its kill.
type Resources struct {
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryMaxBytes   uint64  `json:"memory_max_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	OOMKills         uint64  `json:"oom_kills"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	PIDs             uint64  `json:"pids"`
	PIDsLimit        uint64  `json:"pids_limit"`
}

// EventOptions select events.
type EventOptions struct {
	Types []string // any of these; all when empty
	Limit int      // 1..1000; the server's default (100) when 0
}

// Events lists a sandbox's lifecycle events ("" for all the team's sandboxes), newest first.
// A killed sandbox's events stay readable.
func (c *Client) Events(ctx context.Context, sandboxID string, opts EventOptions) ([]SandboxEvent, error) {
	q := url.Values{}
	for _, t := range opts.Types {
		q.Add("type", t)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	path := "/events/sandboxes"
	if sandboxID != "" {
		path += "/" + url.PathEscape(sandboxID)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out []SandboxEvent
	if _, err := c.do(ctx, "list events", sandboxID, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// WebhookRequest is POST /events/webhooks's body. SignatureSecret is E2B's name for Secret;
// without either, the server generates one and shows it once.
type WebhookRequest struct {
	Name            string   `json:"name"`
	URL             string   `json:"url"`
	Events          []string `json:"events"`
	Secret          *string  `json:"secret,omitempty"`
	SignatureSecret *string  `json:"signatureSecret,omitempty"`
}

// Webhook is a team's subscription to lifecycle events: the server emits this very type.
type Webhook struct {
	ID        string    `json:"id"`
	TeamID    string    `json:"teamId"`
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Enabled   bool      `json:"enabled"`
	CreatedAt time.Time `json:"createdAt"`
	// Secret signs every delivery; it is shown once, in the answer to the create.
	Secret string `json:"secret,omitempty"`
}

// WebhookAttempt is one try at delivering an event.
type WebhookAttempt struct {
	Attempt     int        `json:"attempt"`
	StartedAt   time.Time  `json:"startedAt"`
	StatusCode  int        `json:"statusCode,omitempty"`
	LatencyMS   float64    `json:"latencyMs"`
	ErrorClass  string     `json:"errorClass,omitempty"`
	Error       string     `json:"error,omitempty"`
	NextRetryAt *time.Time `json:"nextRetryAt,omitempty"`
}

// WebhookDelivery is one event on its way to one webhook, with every attempt.
type WebhookDelivery struct {
	ID            string           `json:"id"`
	WebhookID     string           `json:"webhookId"`
	EventID       string           `json:"eventId"`
	EventType     string           `json:"eventType"`
	State         string           `json:"state"` // pending, delivered, failed
	NextAttemptAt *time.Time       `json:"nextAttemptAt,omitempty"`
	CreatedAt     time.Time        `json:"createdAt"`
	UpdatedAt     time.Time        `json:"updatedAt"`
	Attempts      []WebhookAttempt `json:"attempts"`
}

// AddWebhook registers a webhook; the answer carries its signing secret, once.
func (c *Client) AddWebhook(ctx context.Context, req WebhookRequest) (*Webhook, error) {
	var out Webhook
	if _, err := c.do(ctx, "add webhook", "", http.MethodPost, "/events/webhooks", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Webhooks lists the team's webhooks (without their secrets).
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out []Webhook
	if _, err := c.do(ctx, "list webhooks", "", http.MethodGet, "/events/webhooks", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveWebhook deletes a webhook and its deliveries.
func (c *Client) RemoveWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, "remove webhook", "", http.MethodDelete, "/events/webhooks/"+url.PathEscape(id), nil, nil)
	return err
}

// WebhookDeliveries lists a webhook's newest deliveries with their attempts.
func (c *Client) WebhookDeliveries(ctx context.Context, id string) ([]WebhookDelivery, error) {
	var out []WebhookDelivery
	if _, err := c.do(ctx, "list webhook deliveries", "", http.MethodGet, "/events/webhooks/"+url.PathEscape(id)+"/deliveries", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
