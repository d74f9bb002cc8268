package events

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/teamapi"
	"github.com/cove-dev/cove/internal/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// Limits of the HTTP API.
const (
	defaultLimit  = 100
	maxLimit      = 1000
	maxBody       = 64 << 10
	maxURLLen     = 2048
	maxSecretLen  = 256
	maxNameLen    = 256
	headerNextTok = "X-Next-Token"
)

type api struct {
	cfg Config
	mux *teamapi.Mux
}

// NewAPI returns the events HTTP API on cfg.Store, for the team cfg.Team finds in each
// request's context (run it behind the API's authentication):
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
func NewAPI(cfg Config) *teamapi.Mux {
	a := &api{cfg: cfg, mux: teamapi.New("events api", cfg.Team)}
	a.mux.Handle("GET /events/sandboxes", a.listEvents)
	a.mux.Handle("GET /events/sandboxes/{id}", a.listEvents)
	a.mux.Handle("POST /events/webhooks", a.createWebhook)
	a.mux.Handle("GET /events/webhooks", a.listWebhooks)
	a.mux.Handle("GET /events/webhooks/{id}", a.getWebhook)
	a.mux.Handle("DELETE /events/webhooks/{id}", a.deleteWebhook)
	a.mux.Handle("GET /events/webhooks/{id}/deliveries", a.listDeliveries)
	return a.mux
}

// listEvents serves both event listings; the sandbox one has a path id.
func (a *api) listEvents(w http.ResponseWriter, r *http.Request, teamID string) error {
	f, err := eventFilter(r.URL.Query())
	if err != nil {
		return err
	}
	f.TeamID, f.SandboxID = teamID, r.PathValue("id")
	page, err := a.cfg.Store.ListEvents(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]wireEvent, 0, len(page.Events))
	for _, ev := range page.Events {
		out = append(out, toWire(ev))
	}
	if page.More {
		last := page.Events[len(page.Events)-1]
		w.Header().Set(headerNextTok, encodeToken(store.EventPosition{Timestamp: last.Timestamp, ID: last.ID}))
	}
	teamapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func eventFilter(q url.Values) (store.EventFilter, error) {
	f := store.EventFilter{Limit: defaultLimit, Desc: true}
	for _, v := range append(q["type"], q["types"]...) {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			t, err := ParseEventType(s)
			if err != nil {
				return f, teamapi.BadRequest("type: %v", err)
			}
			if !slices.Contains(f.Types, string(t)) {
				f.Types = append(f.Types, string(t))
			}
		}
	}
	var err error
	if f.Since, err = parseTime(q.Get("since")); err != nil {
		return f, teamapi.BadRequest("since: %v", err)
	}
	if f.Until, err = parseTime(q.Get("until")); err != nil {
		return f, teamapi.BadRequest("until: %v", err)
	}
	if f.Limit, err = teamapi.Limit(q, defaultLimit, maxLimit); err != nil {
		return f, err
	}
	order, err := teamapi.OneOf(q, "order", "desc", "asc")
	if err != nil {
		return f, err
	}
	f.Desc = order == "desc"
	if s := q.Get("orderAsc"); s != "" { // E2B's spelling
		asc, err := strconv.ParseBool(s)
		if err != nil {
			return f, teamapi.BadRequest("orderAsc %q: want true or false", s)
		}
		f.Desc = !asc
	}
	if tok := q.Get("nextToken"); tok != "" {
		pos, err := decodeToken(tok)
		if err != nil {
			return f, teamapi.BadRequest("nextToken %q: %v", tok, err)
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

// A next token is the position of a page's last event: base64url("<unix µs>:<id>").
func encodeToken(p store.EventPosition) string { return teamapi.EncodeCursor(p.Timestamp, p.ID) }

func decodeToken(s string) (store.EventPosition, error) {
	t, id, err := teamapi.DecodeCursor(s)
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

// ValidateURL checks that a webhook URL is absolute http or https with a host.
func ValidateURL(raw string) error {
	if raw == "" {
		return errors.New("required")
	}
	if len(raw) > maxURLLen {
		return fmt.Errorf("longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	return nil
}

// allowedHost refuses at once a URL whose host is an address deliveries would refuse; a
// name is resolved, and checked, at each delivery.
func (a *api) allowedHost(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return nil
	}
	if g := (&guard{allow: a.cfg.AllowNets, own: ownAddresses}); !g.allowed(addr) {
		return fmt.Errorf("%s is a loopback, link-local, private, unique-local or this server's own address: "+
			"deliveries there are refused unless the operator allows its range (cove server --webhook-allow-net)", addr)
	}
	return nil
}

func (a *api) createWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	var req webhookRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		return teamapi.BadRequest("body: %v", err)
	}
	if err := ValidateURL(req.URL); err != nil {
		return teamapi.BadRequest("url: %v", err)
	}
	if err := a.allowedHost(req.URL); err != nil {
		return teamapi.BadRequest("url: %v", err)
	}
	if len(req.Name) > maxNameLen {
		return teamapi.BadRequest("name: longer than %d bytes", maxNameLen)
	}
	if len(req.Events) == 0 {
		return teamapi.BadRequest("events: at least one event type is required")
	}
	var types []string
	for _, s := range req.Events {
		t, err := ParseEventType(s)
		if err != nil {
			return teamapi.BadRequest("events: %v", err)
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
		s = newSecret()
	case *secret == "":
		return teamapi.BadRequest("secret: empty; omit it to have one generated")
	case len(*secret) > maxSecretLen:
		return teamapi.BadRequest("secret: longer than %d bytes", maxSecretLen)
	default:
		s = *secret
	}
	h := &store.Webhook{ID: newID("wh_"), TeamID: teamID, Name: req.Name, URL: req.URL,
		Events: types, Secret: s, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := a.cfg.Store.InsertWebhook(r.Context(), h); err != nil {
		return err
	}
	telemetry.Logger(r.Context()).Info("webhook created", telemetry.KeyWebhookID, h.ID, telemetry.KeyTeamID, teamID)
	out := toWireWebhook(h)
	out.Secret = h.Secret
	teamapi.WriteJSON(w, http.StatusCreated, out)
	return nil
}

// newSecret generates a webhook secret: 32 random bytes.
func newSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

func (a *api) listWebhooks(w http.ResponseWriter, r *http.Request, teamID string) error {
	hs, err := a.cfg.Store.ListWebhooks(r.Context(), teamID)
	if err != nil {
		return err
	}
	out := make([]wireWebhook, 0, len(hs))
	for _, h := range hs {
		out = append(out, toWireWebhook(h))
	}
	teamapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) getWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	h, err := a.cfg.Store.GetWebhook(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	teamapi.WriteJSON(w, http.StatusOK, toWireWebhook(h))
	return nil
}

func (a *api) deleteWebhook(w http.ResponseWriter, r *http.Request, teamID string) error {
	id := r.PathValue("id")
	if err := a.cfg.Store.DeleteWebhook(r.Context(), teamID, id); err != nil {
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

func (a *api) listDeliveries(w http.ResponseWriter, r *http.Request, teamID string) error {
	limit, err := teamapi.Limit(r.URL.Query(), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	ds, err := a.cfg.Store.ListDeliveries(r.Context(), teamID, r.PathValue("id"), limit)
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
	teamapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// Handler returns NewAPI on the Bus's configuration.
func (b *Bus) Handler() *teamapi.Mux { return NewAPI(b.cfg) }

// EncodeCursor is the page token of an event listing's position, as GET /events gives it,
// for other views of the same listing (the console).
func EncodeCursor(p store.EventPosition) string { return encodeToken(p) }

// DecodeCursor reads a token EncodeCursor made.
func DecodeCursor(s string) (store.EventPosition, error) { return decodeToken(s) }
