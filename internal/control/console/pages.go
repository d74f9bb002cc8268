package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/api/teamroutes"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Page sizes of the events and webhooks pages.
const (
	pageEventRows  = 100
	pageDeliveries = 50
)

// eventsPage lists the team's lifecycle events, newest first, by type and sandbox.
func (c *Console) eventsPage(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	v := r.URL.Query()
	team, teams, err := c.teamOf(r.Context(), s, v.Get("team"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	f := store.EventFilter{TeamID: team, SandboxID: strings.TrimSpace(v.Get("sandbox")), Limit: pageEventRows, Desc: true}
	if t := v.Get("type"); t != "" {
		et, err := events.ParseEventType(t)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("type: %w", err))
			return
		}
		f.Types = []string{et.String()}
	}
	if cur := v.Get("cursor"); cur != "" {
		pos, err := teamroutes.DecodeEventCursor(cur)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("cursor: %q is not an events page cursor", cur))
			return
		}
		f.After = &pos
	}
	data := map[string]any{"Title": "Events", "Teams": teams, "Team": team, "Types": events.EventTypes,
		"Type": v.Get("type"), "Sandbox": f.SandboxID}
	if team != "" {
		page, err := c.cfg.Records.ListEvents(r.Context(), f)
		if err != nil {
			c.fail(w, r, statusOf(err), fmt.Errorf("list events: %w", err))
			return
		}
		data["Events"] = page.Events
		if page.More && len(page.Events) > 0 {
			last := page.Events[len(page.Events)-1]
			next := url.Values{"cursor": {teamroutes.EncodeEventCursor(store.EventPosition{Timestamp: last.Timestamp, ID: last.ID})}}
			for _, k := range []string{"team", "type", "sandbox"} {
				if v.Get(k) != "" {
					next.Set(k, v.Get(k))
				}
			}
			data["Next"] = template.URL(next.Encode()) // url.Values.Encode: a safe query
		}
	}
	c.render(w, r, "events.html", data)
}

// webhookView is a webhook with its newest deliveries.
type webhookView struct {
	*store.Webhook
	Deliveries []*store.Delivery
}

// webhooksPage lists the team's webhooks, each with its newest deliveries and their
// attempts (status, latency, error).
func (c *Console) webhooksPage(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	team, teams, err := c.teamOf(r.Context(), s, r.URL.Query().Get("team"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	var hooks []webhookView
	if team != "" {
		list, err := c.cfg.Records.ListWebhooks(r.Context(), team)
		if err != nil {
			c.fail(w, r, statusOf(err), fmt.Errorf("list webhooks: %w", err))
			return
		}
		for _, h := range list {
			ds, err := c.cfg.Records.ListDeliveries(r.Context(), team, h.ID, pageDeliveries)
			if err != nil {
				c.fail(w, r, statusOf(err), fmt.Errorf("deliveries of webhook %s: %w", h.ID, err))
				return
			}
			hooks = append(hooks, webhookView{Webhook: h, Deliveries: ds})
		}
	}
	c.render(w, r, "webhooks.html", map[string]any{"Title": "Webhooks", "Teams": teams, "Team": team, "Webhooks": hooks})
}

// keysPage lists the team's API keys (masked); created is a key just made, shown once.
func (c *Console) keysPage(w http.ResponseWriter, r *http.Request) {
	c.renderKeys(w, r, http.StatusOK, r.URL.Query().Get("team"), "", nil)
}

func (c *Console) renderKeys(w http.ResponseWriter, r *http.Request, code int, asked, created string, createErr error) {
	s := sessionOf(r)
	team, teams, err := c.teamOf(r.Context(), s, asked)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	data := map[string]any{"Title": "API keys", "Teams": teams, "Team": team, "Created": created}
	if createErr != nil {
		data["Error"] = createErr.Error()
	}
	if team != "" {
		keys, err := c.cfg.Keys.ListAPIKeys(r.Context(), team)
		if err != nil {
			c.fail(w, r, statusOf(err), fmt.Errorf("list api keys: %w", err))
			return
		}
		data["Keys"] = keys
	}
	// The page may hold a key in clear: never keep it in a cache or the history.
	w.Header().Set("Cache-Control", "no-store")
	c.renderStatus(w, r, code, "keys.html", data)
}

// createKey makes a key for the team and shows it once, on the answer to the POST.
func (c *Console) createKey(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	asked := r.PostFormValue("team")
	team, _, err := c.teamOf(r.Context(), s, asked)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" || len(name) > 100 {
		c.renderKeys(w, r, http.StatusBadRequest, asked, "", errors.New("name: give the key a name of 1 to 100 characters"))
		return
	}
	if team == "" {
		c.fail(w, r, http.StatusBadRequest, errors.New("team: there is no team to make a key for"))
		return
	}
	key, rec, err := c.cfg.Keys.CreateAPIKey(r.Context(), team, name)
	if err != nil {
		c.fail(w, r, statusOf(err), fmt.Errorf("create api key: %w", err))
		return
	}
	telemetry.Logger(r.Context()).Info("api key created", telemetry.KeyAPIKeyID, rec.ID, telemetry.KeyTeamID, team, telemetry.KeyActor, s.KeyID)
	c.renderKeys(w, r, http.StatusOK, team, key, nil)
}

// revokeKey revokes one of the team's keys and ends every console session signed in
// with it (the viewer's own included).
func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	team, _, err := c.teamOf(r.Context(), s, r.PostFormValue("team"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	id := r.PathValue("id")
	if err := c.cfg.Keys.RevokeAPIKey(r.Context(), team, id); err != nil {
		c.fail(w, r, statusOf(err), fmt.Errorf("revoke api key %s: %w", id, err))
		return
	}
	telemetry.Logger(r.Context()).Info("api key revoked", telemetry.KeyAPIKeyID, id, telemetry.KeyTeamID, team, telemetry.KeyActor, s.KeyID)
	// The store no longer finds a revoked key's sessions; deleting them keeps the table small.
	if err := c.cfg.Sessions.DeleteConsoleSessionsOfKey(r.Context(), id); err != nil {
		telemetry.Logger(r.Context()).Warn("end sessions of revoked key", telemetry.KeyAPIKeyID, id, telemetry.KeyError, err)
	}
	if id == s.KeyID {
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		return
	}
	target := Prefix + "keys"
	if s.admin() {
		target += "?team=" + url.QueryEscape(team)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// series is one labelled value of a metric family on the health page.
type series struct {
	Labels string
	Value  float64
	Rate   string // per second since the previous reading; "" when there is none
	Count  uint64 // histograms: observations
}

type family struct {
	Name, Help string
	Series     []series
}

// healthPage shows the server's own /metrics series (sandboxes by state, kills by
// reason, dropped log lines, request counts), with per-second rates over the time since the
// page last read them (it reloads itself every healthEvery).
func (c *Console) healthPage(w http.ResponseWriter, r *http.Request) {
	fams, err := c.cfg.Metrics.Gather()
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("gather metrics: %w", err))
		return
	}
	now := c.now()
	c.mu.Lock()
	prev, prevAt := c.health, c.healthAt
	c.health, c.healthAt = map[string]float64{}, now
	cur := c.health
	c.mu.Unlock()
	elapsed := now.Sub(prevAt).Seconds()
	var out []family
	for _, mf := range fams {
		if !strings.HasPrefix(mf.GetName(), "cove_") {
			continue
		}
		f := family{Name: mf.GetName(), Help: mf.GetHelp()}
		for _, m := range mf.GetMetric() {
			var parts []string
			for _, l := range m.GetLabel() {
				parts = append(parts, l.GetName()+"="+l.GetValue())
			}
			sv := series{Labels: strings.Join(parts, ", ")}
			counter := false
			switch {
			case m.GetCounter() != nil:
				sv.Value, counter = m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				sv.Value = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				sv.Count = h.GetSampleCount()
				if sv.Count > 0 {
					sv.Value = h.GetSampleSum() / float64(sv.Count)
				}
			default:
				continue
			}
			key := f.Name + "{" + sv.Labels + "}"
			if counter {
				cur[key] = sv.Value
				if before, ok := prev[key]; ok && elapsed > 0 && sv.Value >= before {
					sv.Rate = fmt.Sprintf("%.3g/s", (sv.Value-before)/elapsed)
				}
			}
			f.Series = append(f.Series, sv)
		}
		sort.Slice(f.Series, func(i, j int) bool { return f.Series[i].Labels < f.Series[j].Labels })
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	data := map[string]any{"Title": "Server health", "Families": out, "Refresh": int(healthEvery.Seconds())}
	if prev != nil {
		data["Over"] = time.Duration(elapsed * float64(time.Second)).Truncate(time.Second).String()
	}
	c.render(w, r, "health.html", data)
}

// healthEvery is how often the health page reloads itself.
const healthEvery = 10 * time.Second
