package teamroutes

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Limits of the event routes.
const (
	defaultEventLimit = 100
	maxEventLimit     = 1000
	maxWebhookBody    = 64 << 10
	headerNextTok     = "X-Next-Token"
)

type eventAPI struct{ cfg Config }

// eventRoutes are the events and webhooks routes on cfg.Events:
//
//	GET    /events/sandboxes                    the team's events
//	GET    /events/sandboxes/{id}               one sandbox's events
//	POST   /events/webhooks                     {url, events, secret?, name?} → 201, secret shown once
//	GET    /events/webhooks                     the team's webhooks
//	GET    /events/webhooks/{id}
//	DELETE /events/webhooks/{id}                → 204
//	GET    /events/webhooks/{id}/deliveries     newest deliveries with their attempts
//
// Event listings take type (repeated or comma-separated; also "types"), since and until
// (RFC 3339 or unix milliseconds; since inclusive, until exclusive), limit (1..1000, 100),
// order (asc or desc, the default) and nextToken; they answer a JSON array and, when more
// follow, the X-Next-Token header.
func eventRoutes(cfg Config) []httpx.Route {
	a := &eventAPI{cfg: cfg}
	return []httpx.Route{
		route("GET /events/sandboxes", a.listEvents),
		route("GET /events/sandboxes/{id}", a.listEvents),
		route("POST /events/webhooks", a.createWebhook),
		route("GET /events/webhooks", a.listWebhooks),
		route("GET /events/webhooks/{id}", a.getWebhook),
		route("DELETE /events/webhooks/{id}", a.deleteWebhook),
		route("GET /events/webhooks/{id}/deliveries", a.listDeliveries),
	}
}

// listEvents serves both event listings; the sandbox one has a path id.
func (a *eventAPI) listEvents(w http.ResponseWriter, r *http.Request, teamID string) error {
	f, err := eventFilter(r.URL.Query())
	if err != nil {
		return err
	}
	f.TeamID, f.SandboxID = teamID, r.PathValue("id")
	page, err := a.cfg.Events.ListEvents(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]cove.SandboxEvent, 0, len(page.Events))
	for _, ev := range page.Events {
		out = append(out, events.Wire(ev))
	}
	if page.More {
		last := page.Events[len(page.Events)-1]
		w.Header().Set(headerNextTok, EncodeEventCursor(store.EventPosition{Timestamp: last.Timestamp, ID: last.ID}))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func eventFilter(q url.Values) (store.EventFilter, error) {
	f := store.EventFilter{Limit: defaultEventLimit, Desc: true}
	for _, v := range append(q["type"], q["types"]...) {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			t, err := events.ParseEventType(s)
			if err != nil {
				return f, BadRequest("type: %v", err)
			}
			if !slices.Contains(f.Types, string(t)) {
				f.Types = append(f.Types, string(t))
			}
		}
	}
	var err error
	if f.Since, err = parseTime(q.Get("since")); err != nil {
		return f, BadRequest("since: %v", err)
	}
	if f.Until, err = parseTime(q.Get("until")); err != nil {
		return f, BadRequest("until: %v", err)
	}
	if f.Limit, err = Limit(q, defaultEventLimit, maxEventLimit); err != nil {
		return f, err
	}
	order, err := OneOf(q, "order", "desc", "asc")
	if err != nil {
		return f, err
	}
	f.Desc = order == "desc"
	if s := q.Get("orderAsc"); s != "" { // E2B's spelling
		asc, err := strconv.ParseBool(s)
		if err != nil {
			return f, BadRequest("orderAsc %q: want true or false", s)
		}
		f.Desc = !asc
	}
	if tok := q.Get("nextToken"); tok != "" {
		pos, err := DecodeEventCursor(tok)
		if err != nil {
			return f, BadRequest("nextToken %q: %v", tok, err)
		}
		f.After = &pos
	}
	return f, nil
}

// parseTime reads RFC 3339 or unix milliseconds; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor unix milliseconds", s)
	}
	return t, nil
}

// EncodeEventCursor is the next token of an event listing's position (its page's last
// event), as GET /events gives it and other views of the listing (the console) take it:
// base64url("<unix µs>:<id>").
func EncodeEventCursor(p store.EventPosition) string { return EncodeCursor(p.Timestamp, p.ID) }

// DecodeEventCursor reads a token EncodeEventCursor made.
func DecodeEventCursor(s string) (store.EventPosition, error) {
	t, id, err := DecodeCursor(s)
	return store.EventPosition{Timestamp: t, ID: id}, err
}

// webhookRequest is POST /events/webhooks's body; wireWebhook a webhook on the wire: the
// SDK's types.
type (
	webhookRequest = cove.WebhookRequest
	wireWebhook    = cove.Webhook
)

func toWireWebhook(h *store.Webhook) wireWebhook {
	return wireWebhook{ID: h.ID, TeamID: h.TeamID, Name: h.Name, URL: h.URL, Events: h.Events,
		Enabled: true, CreatedAt: h.CreatedAt}
}

func (a *eventAPI) createWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	var req webhookRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxWebhookBody)).Decode(&req); err != nil {
		return BadRequest("body: %v", err)
	}
	if err := events.ValidateURL(req.URL); err != nil {
		return BadRequest("url: %v", err)
	}
	if err := events.AllowedHost(req.URL, a.cfg.AllowNets); err != nil {
		return BadRequest("url: %v", err)
	}
	if len(req.Name) > events.MaxNameLen {
		return BadRequest("name: longer than %d bytes", events.MaxNameLen)
	}
	if len(req.Events) == 0 {
		return BadRequest("events: at least one event type is required")
	}
	var types []string
	for _, s := range req.Events {
		t, err := events.ParseEventType(s)
		if err != nil {
			return BadRequest("events: %v", err)
		}
		if !slices.Contains(types, string(t)) {
			types = append(types, string(t))
		}
	}
	secret := req.Secret
	if secret == nil {
		secret = req.SignatureSecret
	}
	var s string
	switch {
	case secret == nil:
		s = events.NewWebhookSecret()
	case *secret == "":
		return BadRequest("secret: empty; omit it to have one generated")
	case len(*secret) > events.MaxSecretLen:
		return BadRequest("secret: longer than %d bytes", events.MaxSecretLen)
	default:
		s = *secret
	}
	h := &store.Webhook{ID: events.NewWebhookID(), TeamID: teamID, Name: req.Name, URL: req.URL,
		Events: types, Secret: s, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := a.cfg.Events.InsertWebhook(r.Context(), h); err != nil {
		return err
	}
	telemetry.Logger(r.Context()).Info("webhook created", telemetry.KeyWebhookID, h.ID, telemetry.KeyTeamID, teamID)
	out := toWireWebhook(h)
	out.Secret = h.Secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (a *eventAPI) listWebhooks(w http.ResponseWriter, r *http.Request, teamID string) error {
	hs, err := a.cfg.Events.ListWebhooks(r.Context(), teamID)
	if err != nil {
		return err
	}
	out := make([]wireWebhook, 0, len(hs))
	for _, h := range hs {
		out = append(out, toWireWebhook(h))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *eventAPI) getWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	h, err := a.cfg.Events.GetWebhook(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWireWebhook(h))
	return nil
}

func (a *eventAPI) deleteWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	id := r.PathValue("id")
	if err := a.cfg.Events.DeleteWebhook(r.Context(), teamID, id); err != nil {
		return err
	}
	telemetry.Logger(r.Context()).Info("webhook deleted", telemetry.KeyWebhookID, id, telemetry.KeyTeamID, teamID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// wireDelivery and wireAttempt are the SDK's types.
type (
	wireDelivery = cove.WebhookDelivery
	wireAttempt  = cove.WebhookAttempt
)

func (a *eventAPI) listDeliveries(w http.ResponseWriter, r *http.Request, teamID string) error {
	limit, err := Limit(r.URL.Query(), defaultEventLimit, maxEventLimit)
	if err != nil {
		return err
	}
	ds, err := a.cfg.Events.ListDeliveries(r.Context(), teamID, r.PathValue("id"), limit)
	if err != nil {
		return err
	}
	out := make([]wireDelivery, 0, len(ds))
	for _, d := range ds {
		wd := wireDelivery{ID: d.ID, WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType,
			State: string(d.State), CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, Attempts: []wireAttempt{}}
		if d.State == store.DeliveryPending {
			next := d.NextAttemptAt
			wd.NextAttemptAt = &next
		}
		for _, at := range d.History {
			wd.Attempts = append(wd.Attempts, wireAttempt{
				Attempt: at.Attempt, StartedAt: at.StartedAt, StatusCode: at.StatusCode,
				LatencyMS: float64(at.Latency.Microseconds()) / 1000, ErrorClass: at.ErrorClass,
				Error: at.Error, NextRetryAt: at.NextRetryAt,
			})
		}
		out = append(out, wd)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
