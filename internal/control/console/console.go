// Package console serves Cove's web console at /dashboard/: server-rendered pages
// (html/template, every asset embedded) over the same orchestrator and key store as the API.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/trace"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

//go:embed assets templates
var files embed.FS

// Prefix is where the console is mounted.
const Prefix = "/dashboard/"

const (
	cookieName = "cove_session"
	sessionTTL = 12 * time.Hour
)

// Records reads what the stores kept of sandboxes, killed ones included; sqlite.DB implements it.
type Records interface {
	GetSandbox(ctx context.Context, id string) (*store.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) (*store.SandboxPage, error)
	QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error)
	ListCommands(ctx context.Context, sandboxID string, limit int, cursor string) (*store.CommandPage, error)
	ListEvents(ctx context.Context, f store.EventFilter) (*store.EventPage, error)
	// DownsampleSamples returns sandboxID's samples cut into at most points equal spans of
	// time, one sample each, oldest first: CPU averaged, memory, disk and the cumulative
	// network counters the span's largest.
	DownsampleSamples(ctx context.Context, sandboxID string, points int) ([]store.MetricSample, error)
	LatestSamples(ctx context.Context, teamID string, ids []string) ([]store.MetricSample, error)
	ListWebhooks(ctx context.Context, teamID string) ([]*store.Webhook, error)
	ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*store.Delivery, error)
	store.TraceStore
}

// Page sizes of the sandbox page.
const (
	pageCommands = 500
	pageLogLines = 1000
	pageEvents   = 1000
)

// Config is what New needs.
type Config struct {
	// Logger is the edge's base logger; nil uses the one in each request's context.
	Logger     *slog.Logger
	Sandboxes  api.Sandboxes
	Keys       store.Keys // Authenticate, as the API signs in; teams and keys for their pages
	Sessions   store.ConsoleSessions
	Records    Records
	AdminToken string    // "" disables admin sign-in
	Templates  Templates // nil: the templates page says there is no store
	Builds     Builds    // nil: the templates page lists no builds
	// Metrics is read by the health page; telemetry.Metrics() when nil.
	Metrics prometheus.Gatherer
	// Pools says what the warm pools hold (the orchestrator's), for the templates page; nil:
	// no pool column.
	Pools func(team string) []orchestrator.PoolStatus
	// Nodes is the cluster's membership, for the admin's nodes page; nil on a server that is
	// no cluster node.
	Nodes store.Nodes
}

// session is one signed-in viewer, as the store keeps it.
type session struct{ store.ConsoleSession }

func (s *session) admin() bool { return s.TeamID == "" }

// Console is the /dashboard/ handler.
type Console struct {
	cfg    Config
	edge   http.Handler // the route table served through the chain
	pages  *template.Template
	mu     sync.Mutex
	now    func() time.Time
	closed chan struct{} // closed by Close: live streams end
	once   sync.Once
	// health and healthAt are the counters the health page last read, for its rates.
	health   map[string]float64
	healthAt time.Time
}

// Close ends every live stream, so a server shutdown does not wait on open browsers.
func (c *Console) Close() { c.once.Do(func() { close(c.closed) }) }

// New returns the console handler; mount it at Prefix.
func New(cfg Config) *Console {
	if cfg.Metrics == nil {
		cfg.Metrics = telemetry.Metrics()
	}
	c := &Console{cfg: cfg, now: time.Now, closed: make(chan struct{})}
	c.pages = template.Must(template.New("").Funcs(template.FuncMap{
		"utc":        func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"fields":     pairs,
		"postmortem": postmortemOf,
		"data":       eventFields,
		"ms":         func(d time.Duration) string { return d.Truncate(time.Millisecond).String() },
		"size":       func(n int64) string { return bytesText(float64(n)) },
		"usize":      func(n uint64) string { return bytesText(float64(n)) },
		"offset": func(first, at time.Time) string {
			d := at.Sub(first)
			if d < time.Millisecond {
				return fmt.Sprintf("+%dµs", d.Microseconds())
			}
			return "+" + d.Round(100*time.Microsecond).String()
		},
		"deref": func(b *bool) bool { return b != nil && *b },
		"inc":   func(i int) int { return i + 1 },
		"last": func(as []*store.DeliveryAttempt) *store.DeliveryAttempt {
			if len(as) == 0 {
				return nil
			}
			return as[len(as)-1]
		},
		"exit": func(p *int) string {
			if p == nil {
				return "–"
			}
			return fmt.Sprint(*p)
		},
	}).ParseFS(files, "templates/*.html"))
	static, _ := fs.Sub(files, "assets")
	page, signedIn := func(pattern string, h http.HandlerFunc) httpx.Route {
		return httpx.Route{Pattern: pattern, Auth: httpx.AuthNone, Handler: httpx.Serve(h)}
	}, func(pattern string, h http.HandlerFunc) httpx.Route {
		return httpx.Route{Pattern: pattern, Auth: httpx.AuthTeam, Handler: httpx.Serve(h)}
	}
	routes := []httpx.Route{
		page("GET /dashboard/assets/", http.StripPrefix("/dashboard/assets/", http.FileServerFS(static)).ServeHTTP),
		page("GET /dashboard/login", c.loginForm),
		page("POST /dashboard/login", c.login),
		signedIn("POST /dashboard/logout", c.logout),
		signedIn("GET /dashboard/{$}", c.list),
		signedIn("GET /dashboard/sandboxes/{id}", c.sandbox),
		signedIn("POST /dashboard/sandboxes/{id}/{action}", c.act),
		signedIn("GET /dashboard/trace", c.trace),
		signedIn("GET /dashboard/live", c.live),
		signedIn("GET /dashboard/sandboxes/{id}/tail", c.tail),
		signedIn("GET /dashboard/logs", c.logsPage),
		signedIn("GET /dashboard/events", c.eventsPage),
		signedIn("GET /dashboard/webhooks", c.webhooksPage),
		signedIn("GET /dashboard/keys", c.keysPage),
		signedIn("POST /dashboard/keys", c.createKey),
		signedIn("POST /dashboard/keys/{id}/revoke", c.revokeKey),
		signedIn("GET /dashboard/health", c.healthPage),
		signedIn("GET /dashboard/templates", c.templatesPage),
		signedIn("GET /dashboard/nodes", c.nodesPage),
		signedIn("GET /dashboard/templates/{name}/log", c.buildLog),
		signedIn("GET /dashboard/builds/{id}", c.buildPage),
		signedIn("GET /dashboard/builds/{id}/tail", c.buildTail),
		// Anything else under the prefix is a console page with the request id, not Go's bare
		// 404 or 405.
		page("/dashboard/", func(w http.ResponseWriter, r *http.Request) {
			c.fail(w, r, http.StatusNotFound, fmt.Errorf("no console page %s %s", r.Method, r.URL.Path))
		}),
	}
	c.edge = c.Chain().Routes(routes)
	return c
}

// Chain is the console's edge: the one chain, where a session (its cookie, and its CSRF
// token on a POST) authenticates, and errors are pages.
func (c *Console) Chain() httpx.Chain {
	return httpx.Chain{Edge: "console", Logger: c.cfg.Logger, Authenticate: c.authenticate, Fail: c.failed}
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	c.edge.ServeHTTP(w, r)
}

// Errors of the console's authentication.
var (
	errNotSignedIn = errdefs.New(errdefs.ErrUnauthenticated, "not signed in")
	errCSRF        = errdefs.New(errdefs.ErrPermissionDenied, "csrf: the form's token does not match this session; reload the page")
)

// authenticate finds the request's live session, checking the CSRF token on every POST.
func (c *Console) authenticate(r *http.Request, _ httpx.Auth) (context.Context, error) {
	s, err := c.session(r)
	if err != nil {
		return nil, fmt.Errorf("console session: %w", err)
	}
	if s == nil {
		return nil, errNotSignedIn
	}
	if r.Method == http.MethodPost {
		got := r.PostFormValue("csrf")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) != 1 {
			return nil, errCSRF
		}
	}
	if s.TeamID != "" {
		httpx.NoteFrom(r.Context()).Add(telemetry.KeyTeamID, s.TeamID)
	}
	return context.WithValue(r.Context(), ctxKey{}, s), nil
}

// failed answers the chain's errors with a page; a GET without a session goes to the
// sign-in page.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errNotSignedIn) && r.Method == http.MethodGet {
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		return
	}
	c.fail(w, r, errdefs.Status(err), err)
}

type ctxKey struct{}

// session returns the request's live session; nil when it has none (no cookie, an
// unknown or expired token, a revoked key, an admin session once admin sign-in is off).
func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil, nil
	}
	st, err := c.cfg.Sessions.GetConsoleSession(r.Context(), tokenHash(ck.Value), c.now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &session{*st}
	if s.admin() && (c.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(s.AdminHash), []byte(tokenHash(c.cfg.AdminToken))) != 1) {
		return nil, nil // admin sign-in is off, or the token changed since
	}
	return s, nil
}

// tokenHash is what the store keeps of a session's token.
func tokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func sessionOf(r *http.Request) *session { s, _ := r.Context().Value(ctxKey{}).(*session); return s }

func token() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login.html", map[string]any{"Title": "Sign in"})
}

// login accepts an API key (that key's team) or the admin token (all teams).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSpace(r.PostFormValue("key"))
	now := c.now()
	s := &store.ConsoleSession{CSRF: token(), CreatedAt: now, Expires: now.Add(sessionTTL)}
	switch {
	case key == "":
		c.renderStatus(w, r, http.StatusBadRequest, "login.html", map[string]any{"Title": "Sign in", "Error": "key: enter an API key or the admin token"})
		return
	case c.cfg.AdminToken != "" && subtle.ConstantTimeCompare([]byte(key), []byte(c.cfg.AdminToken)) == 1:
		s.TeamName, s.KeyID, s.AdminHash = "all teams (admin)", "admin", tokenHash(c.cfg.AdminToken)
	default:
		k, team, err := c.cfg.Keys.Authenticate(r.Context(), key)
		if err != nil || k == nil || team == nil {
			c.renderStatus(w, r, http.StatusUnauthorized, "login.html", map[string]any{"Title": "Sign in", "Error": "invalid or revoked API key"})
			return
		}
		s.TeamID, s.TeamName, s.KeyID = team.ID, team.Name, k.ID
	}
	id := token()
	s.TokenHash = tokenHash(id)
	if err := c.cfg.Sessions.PruneConsoleSessions(r.Context(), now); err != nil {
		telemetry.Logger(r.Context()).Warn("prune console sessions", telemetry.KeyError, err)
	}
	if err := c.cfg.Sessions.InsertConsoleSession(r.Context(), s); err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("sign in: %w", err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, Expires: s.Expires})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		if err := c.cfg.Sessions.DeleteConsoleSession(r.Context(), tokenHash(ck.Value)); err != nil {
			c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("sign out: %w", err))
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// listFilter is the sandbox list's query: ?state=running&template=base&meta=taskId=7&next=…
type listFilter struct {
	State, Template, Meta, Next string
}

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	data, code, err := c.listData(r)
	if err != nil {
		c.fail(w, r, code, err)
		return
	}
	c.render(w, r, "list.html", data)
}

// live pushes the list's rows (the same query as the page's) as Server-Sent Events
// whenever they change, checked every liveEvery, until the viewer goes away. Each "rows"
// event is the total on its first line, then the rows.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	if _, code, err := c.listData(r); err != nil {
		c.fail(w, r, code, err)
		return
	}
	last := ""
	c.stream(w, r, func(context.Context) (sse, error) {
		data, _, err := c.listData(r)
		if err != nil {
			return sse{}, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d\n", data["Total"])
		if err := c.pages.ExecuteTemplate(&b, "rows", data); err != nil {
			return sse{}, fmt.Errorf("render rows: %w", err)
		}
		if b.String() == last {
			return sse{}, nil
		}
		last = b.String()
		return sse{Event: "rows", Data: last}, nil
	})
}

// liveEvery is how often the live list looks for changes.
const liveEvery = time.Second

// listData runs the list's query; the int is the status for its error.
func (c *Console) listData(r *http.Request) (map[string]any, int, error) {
	s := sessionOf(r)
	q := r.URL.Query()
	lf := listFilter{State: q.Get("state"), Template: q.Get("template"), Meta: q.Get("meta"), Next: q.Get("next")}
	f := store.SandboxFilter{TeamID: s.TeamID, Next: lf.Next, Limit: 100, Template: lf.Template}
	switch lf.State {
	case "":
	case string(store.StateRunning), string(store.StatePaused), string(store.StateKilled):
		f.States = []store.SandboxState{store.SandboxState(lf.State)}
	default:
		return nil, http.StatusBadRequest, fmt.Errorf("state: %q is not one of running, paused, killed", lf.State)
	}
	if lf.Meta != "" {
		f.Metadata = map[string]string{}
		for _, pair := range strings.Split(lf.Meta, ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, http.StatusBadRequest, fmt.Errorf("meta: %q is not key=value", pair)
			}
			f.Metadata[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	page, err := c.cfg.Records.ListSandboxes(r.Context(), f)
	if errors.Is(err, store.ErrBadCursor) {
		return nil, http.StatusBadRequest, fmt.Errorf("next: %w", err)
	}
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("list sandboxes: %w", err)
	}
	rows, err := c.withUsage(r.Context(), page.Sandboxes)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return map[string]any{"Title": "Sandboxes", "Rows": rows, "Total": page.Total, "Query": r.URL.RawQuery,
		"Next": page.Next, "Filter": lf, "States": []store.SandboxState{store.StateRunning, store.StatePaused, store.StateKilled}}, 0, nil
}

// listRow is a sandbox of the list with its CPU and memory now (nil unless it runs and
// has been sampled).
type listRow struct {
	*store.Sandbox
	Usage *usage
}

// withUsage pairs the running sandboxes of a page with their newest resource sample, one
// query per team on the page.
func (c *Console) withUsage(ctx context.Context, sbs []*store.Sandbox) ([]listRow, error) {
	rows := make([]listRow, len(sbs))
	byTeam := map[string][]string{}
	at := map[string]int{}
	for i, sb := range sbs {
		rows[i].Sandbox = sb
		if sb.State == store.StateRunning {
			byTeam[sb.TeamID] = append(byTeam[sb.TeamID], sb.ID)
			at[sb.ID] = i
		}
	}
	for team, ids := range byTeam {
		latest, err := c.cfg.Records.LatestSamples(ctx, team, ids)
		if err != nil {
			return nil, fmt.Errorf("resource usage: %w", err)
		}
		for _, s := range latest {
			rows[at[s.SandboxID]].Usage = usageOf(s)
		}
	}
	return rows, nil
}

// find returns a sandbox the viewer may see, killed ones included.
func (c *Console) find(ctx context.Context, s *session, id string) (*store.Sandbox, error) {
	sb, err := c.cfg.Records.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !s.admin() && sb.TeamID != s.TeamID) {
		return nil, fmt.Errorf("sandbox %s: %w", id, orchestrator.ErrNotFound)
	}
	return sb, err
}

type metaPair struct{ Key, Value string }

// pairs is m's entries sorted by key, values as text.
func pairs(m map[string]any) []metaPair {
	out := make([]metaPair, 0, len(m))
	for k, v := range m {
		out = append(out, metaPair{k, fmt.Sprint(v)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (c *Console) sandbox(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	sb, err := c.find(r.Context(), s, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	meta := make([]metaPair, 0, len(sb.Metadata))
	for k, v := range sb.Metadata {
		meta = append(meta, metaPair{k, v})
	}
	sort.Slice(meta, func(i, j int) bool { return meta[i].Key < meta[j].Key })
	cmds, err := c.cfg.Records.ListCommands(r.Context(), sb.ID, pageCommands, "")
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("commands of %s: %w", sb.ID, err))
		return
	}
	lq, lv, err := logQuery(url.Values{"q": {r.URL.Query().Get("q")}, "field": {r.URL.Query().Get("field")}})
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	lq.TeamID, lq.SandboxID, lq.Limit, lq.Backward = sb.TeamID, sb.ID, pageLogLines, true
	logs, err := c.cfg.Records.QueryLogs(r.Context(), lq)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("logs of %s: %w", sb.ID, err))
		return
	}
	evs, err := c.cfg.Records.ListEvents(r.Context(), store.EventFilter{TeamID: sb.TeamID, SandboxID: sb.ID, Limit: pageEvents})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("events of %s: %w", sb.ID, err))
		return
	}
	samples, err := c.cfg.Records.DownsampleSamples(r.Context(), sb.ID, plotPoints)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("resource samples of %s: %w", sb.ID, err))
		return
	}
	c.render(w, r, "sandbox.html", map[string]any{"Title": "Sandbox " + sb.ID, "SB": sb, "Meta": meta, "Events": evs.Events, "Plots": plots(samples),
		"Commands": cmds.Commands, "Logs": logs.Lines, "View": lv, "Tail": tailQuery(lv, logs.First)})
}

// trace shows `cove trace` for one request id: what the server, envd, the command and the
// events recorded under it, oldest first. Traces are kept per team: the admin sees the
// request's entries in every team that has some, each entry naming its team.
func (c *Console) trace(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	data := map[string]any{"Title": "Trace", "ID": id}
	if id != "" {
		teams := []*store.Team{{ID: s.TeamID}}
		if s.admin() {
			var err error
			if teams, err = c.cfg.Keys.ListTeams(r.Context()); err != nil {
				c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("list teams: %w", err))
				return
			}
		}
		all := &trace.Timeline{RequestID: id, Entries: []trace.Entry{}}
		for _, team := range teams {
			tl, err := trace.Build(r.Context(), c.cfg.Records, team.ID, id)
			if err != nil {
				c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("trace %s: %w", id, err))
				return
			}
			for _, e := range tl.Entries {
				if s.admin() {
					e.Fields = maps.Clone(e.Fields)
					if e.Fields == nil {
						e.Fields = map[string]any{}
					}
					e.Fields[telemetry.KeyTeamID] = team.Name
				}
				all.Entries = append(all.Entries, e)
			}
		}
		sort.SliceStable(all.Entries, func(i, j int) bool { return all.Entries[i].Time.Before(all.Entries[j].Time) })
		data["Title"], data["Timeline"] = "Trace "+id, all
		spans, total := trace.Waterfall(all.Entries)
		data["Spans"], data["Total"] = spans, total
		if len(spans) > 0 {
			data["First"] = spans[0].Start
		}
	}
	c.render(w, r, "trace.html", data)
}

// act runs one action on a sandbox: kill, pause, resume or timeout.
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	ctx := authz.With(r.Context(), authz.Caller{TeamID: s.TeamID, KeyID: s.KeyID, KeyName: "console"})
	sb, err := c.find(ctx, s, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	switch action := r.PathValue("action"); action {
	case "kill":
		err = c.cfg.Sandboxes.Kill(ctx, sb.TeamID, sb.ID, reason.KillRequest, s.KeyID)
	case "pause":
		err = c.cfg.Sandboxes.Pause(ctx, sb.TeamID, sb.ID)
	case "resume":
		_, err = c.cfg.Sandboxes.Resume(ctx, sb.TeamID, sb.ID, 0)
	case "timeout":
		secs, perr := parseSeconds(r.PostFormValue("timeout"))
		if perr != nil {
			c.fail(w, r, http.StatusBadRequest, perr)
			return
		}
		err = c.cfg.Sandboxes.SetTimeout(ctx, sb.TeamID, sb.ID, secs)
	default:
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("action: %q is not one of kill, pause, resume, timeout", action))
		return
	}
	if err != nil {
		c.fail(w, r, statusOf(err), fmt.Errorf("%s sandbox %s: %w", r.PathValue("action"), sb.ID, err))
		return
	}
	http.Redirect(w, r, Prefix+"sandboxes/"+sb.ID, http.StatusSeeOther)
}

func parseSeconds(v string) (time.Duration, error) {
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &n); err != nil || n < 1 || n > 24*3600 {
		return 0, fmt.Errorf("timeout: %q is not a number of seconds from 1 to 86400", v)
	}
	return time.Duration(n) * time.Second, nil
}

func requestID(r *http.Request) string { return telemetry.RequestID(r.Context()) }

func statusOf(err error) int {
	var gone *orchestrator.GoneError
	switch {
	case errors.Is(err, httpx.ErrBadRequest), errors.Is(err, store.ErrBadCursor), errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, orchestrator.ErrNotFound), errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &gone):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// fail renders an error page that names the request id.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	httpx.NoteFrom(r.Context()).Err = err // for the access line
	c.renderStatus(w, r, code, "error.html", map[string]any{"Title": http.StatusText(code), "Error": err.Error(), "Code": code})
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, data map[string]any) {
	c.renderStatus(w, r, http.StatusOK, name, data)
}

func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, code int, name string, data map[string]any) {
	data["RequestID"] = telemetry.RequestID(r.Context())
	if s := sessionOf(r); s != nil {
		data["Session"] = s
	}
	var b strings.Builder
	if err := c.pages.ExecuteTemplate(&b, name, data); err != nil {
		telemetry.Logger(r.Context()).Error("console render", telemetry.KeyPage, name, telemetry.KeyError, err)
		http.Error(w, "render "+name+": "+err.Error()+" (request "+telemetry.RequestID(r.Context())+")", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}
