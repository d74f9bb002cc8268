package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// The fake below stands in for the orchestrator at its interface so these tests pin the
// HTTP mapping (statuses, JSON shapes, headers); the real orchestrator is exercised behind
// the same handlers end to end.

const (
	testKey   = "e2b_0123456789abcdef0123456789abcdef01234567"
	testTeam  = "team1"
	otherKey  = "e2b_ffff"
	otherTeam = "team2"
	killedAt  = "2026-01-02T03:04:05Z"
)

type fakeKeys struct{}

func (fakeKeys) Authenticate(_ context.Context, key string) (*store.APIKey, *store.Team, error) {
	switch key {
	case testKey:
		return &store.APIKey{ID: "key1", TeamID: testTeam}, &store.Team{ID: testTeam}, nil
	case otherKey:
		return &store.APIKey{ID: "key2", TeamID: otherTeam}, &store.Team{ID: otherTeam}, nil
	}
	return nil, nil, store.ErrNotFound
}

type killCall struct {
	team, id, keyID string
	why             reason.KillReason
}

type fakeSandboxes struct {
	mu       sync.Mutex
	sbs      map[string]*store.Sandbox
	order    []string
	created  []orchestrator.CreateRequest
	filters  []store.SandboxFilter
	timeouts []time.Duration
	kills    []killCall
	pauses   []reason.PauseKind // what each PauseWith asked for
}

func newFake() *fakeSandboxes {
	f := &fakeSandboxes{sbs: map[string]*store.Sandbox{}}
	at, _ := time.Parse(time.RFC3339, killedAt)
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, sb := range []*store.Sandbox{
		{ID: "irunning", State: store.StateRunning, Metadata: map[string]string{"app": "web", "env": "a b&c"}},
		{ID: "ipaused", State: store.StatePaused},
		{ID: "isecure", State: store.StateRunning, Secure: true, EnvdAccessToken: "tok-secure"},
		{ID: "ikilled", State: store.StateKilled, KilledAt: &at, KillReason: reason.KillTimeout},
		{ID: "iother", State: store.StateRunning, TeamID: otherTeam},
	} {
		if sb.TeamID == "" {
			sb.TeamID = testTeam
		}
		sb.TemplateID, sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB = "base", 2, 512, 1024
		sb.StartedAt, sb.EndAt = start, start.Add(5*time.Minute)
		sb.AllowInternet = true
		f.add(sb)
	}
	return f
}

func (f *fakeSandboxes) add(sb *store.Sandbox) {
	f.sbs[sb.ID] = sb
	f.order = append(f.order, sb.ID)
}

// find returns the team's live sandbox, or the orchestrator's error for it.
func (f *fakeSandboxes) find(team, id string) (*store.Sandbox, error) {
	sb, ok := f.sbs[id]
	if !ok || sb.TeamID != team {
		return nil, orchestrator.ErrNotFound
	}
	if sb.State == store.StateKilled {
		return nil, &orchestrator.GoneError{ID: id, Reason: sb.KillReason, At: *sb.KilledAt}
	}
	return sb, nil
}

func (f *fakeSandboxes) Create(_ context.Context, req orchestrator.CreateRequest) (*store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	if req.TemplateID == "missing" {
		return nil, fmt.Errorf("template %s: %w", req.TemplateID, orchestrator.ErrTemplateNotFound)
	}
	if req.TemplateID == "over-quota" { // the orchestrator's refusal, as the fake's stand-in
		return nil, &orchestrator.QuotaError{Limit: "concurrent sandboxes", Have: 21, Max: 20}
	}
	sb := &store.Sandbox{ID: "inew" + strconv.Itoa(len(f.created)), TeamID: req.TeamID, TemplateID: req.TemplateID,
		State: store.StateRunning, Secure: req.Secure, Metadata: req.Metadata}
	if req.Secure {
		sb.EnvdAccessToken = "tok-new"
	}
	f.add(sb)
	return sb, nil
}

func (f *fakeSandboxes) Get(_ context.Context, team, id string) (*store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(team, id)
}

// List pages through the team's sandboxes in insertion order; the token is an offset.
func (f *fakeSandboxes) List(_ context.Context, flt store.SandboxFilter) (*store.SandboxPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, flt)
	states := flt.States
	if len(states) == 0 {
		states = []store.SandboxState{store.StateRunning, store.StatePaused}
	}
	var match []*store.Sandbox
	for _, id := range f.order {
		sb := f.sbs[id]
		if sb.TeamID != flt.TeamID || !slices.Contains(states, sb.State) {
			continue
		}
		ok := true
		for k, v := range flt.Metadata {
			ok = ok && sb.Metadata[k] == v
		}
		if ok {
			match = append(match, sb)
		}
	}
	limit := flt.Limit
	if limit == 0 {
		limit = 100
	}
	off, _ := strconv.Atoi(flt.Next)
	page := &store.SandboxPage{Total: len(match)}
	end := min(off+limit, len(match))
	page.Sandboxes = match[off:end]
	if end < len(match) {
		page.Next = strconv.Itoa(end)
	}
	return page, nil
}

func (f *fakeSandboxes) Kill(_ context.Context, team, id string, why reason.KillReason, keyID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, killCall{team: team, id: id, keyID: keyID, why: why})
	_, err := f.find(team, id)
	return err
}

func (f *fakeSandboxes) SetTimeout(_ context.Context, team, id string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeouts = append(f.timeouts, d)
	_, err := f.find(team, id)
	return err
}

func (f *fakeSandboxes) Refresh(ctx context.Context, team, id string, d time.Duration) error {
	return f.SetTimeout(ctx, team, id, d)
}

func (f *fakeSandboxes) Pause(ctx context.Context, team, id string) error {
	return f.PauseWith(ctx, team, id, orchestrator.PauseOptions{})
}

func (f *fakeSandboxes) PauseWith(_ context.Context, team, id string, opts orchestrator.PauseOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, opts.Kind)
	sb, err := f.find(team, id)
	if err != nil {
		return err
	}
	if sb.State == store.StatePaused {
		return fmt.Errorf("sandbox %s is already paused: %w", id, orchestrator.ErrConflict)
	}
	return nil
}

func (f *fakeSandboxes) Resume(_ context.Context, team, id string, d time.Duration) (*store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeouts = append(f.timeouts, d)
	sb, err := f.find(team, id)
	if err != nil {
		return nil, err
	}
	if sb.State == store.StateRunning {
		return nil, fmt.Errorf("sandbox %s is running: %w", id, orchestrator.ErrConflict)
	}
	return sb, nil
}

func (f *fakeSandboxes) Connect(_ context.Context, team, id string, d time.Duration) (*store.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeouts = append(f.timeouts, d)
	sb, err := f.find(team, id)
	if err != nil {
		return nil, false, err
	}
	return sb, sb.State == store.StatePaused, nil
}

// logBuffer collects JSON log lines safely across the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines whose msg is msg.
func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

type env struct {
	url  string
	fake *fakeSandboxes
	logs *logBuffer
}

func newEnv(t *testing.T, domain string) *env {
	t.Helper()
	e := &env{fake: newFake(), logs: &logBuffer{}}
	h := api.New(api.Config{
		Sandboxes: e.fake,
		Keys:      fakeKeys{},
		Domain:    domain,
		Logger:    slog.New(slog.NewJSONHandler(e.logs, nil)),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// do sends a request with the test key; body, when not "", is sent chunked (no
// Content-Length), as the SDKs send it.
func (e *env) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = io.MultiReader(strings.NewReader(body)) // unknown length: chunked
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
		t.Run("POST "+path+" with a chunked body answers 201 with the new sandbox", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, "POST", path, `{"templateID":"base","timeout":60,"metadata":{"a":"b"},"envVars":{"K":"V"},
				"autoPause":true,"autoResume":{"enabled":true},"secure":true,"allow_internet_access":false}`)
			if res.status != http.StatusCreated {
				t.Fatalf("status %d, body %s", res.status, res.body)
			}
			got := res.json(t)
			want := map[string]any{"sandboxID": "inew1", "templateID": "base", "clientID": "cove",
				"envdVersion": "0.6.4", "envdAccessToken": "tok-new", "domain": nil}
			for k, v := range want {
				if gv, ok := got[k]; !ok || gv != v {
					t.Errorf("%s = %#v, want %#v (body %s)", k, gv, v, res.body)
				}
			}
			req := e.fake.created[0]
			wantReq := orchestrator.CreateRequest{TeamID: testTeam, TemplateID: "base", APIKeyID: "key1",
				Timeout: time.Minute, Metadata: map[string]string{"a": "b"}, EnvVars: map[string]string{"K": "V"},
				Secure: true, AutoPause: true, AutoResume: true, AllowInternet: false,
				Secrets: []string{testKey}} // the caller's key is masked in what the sandbox outputs
			if fmt.Sprint(req) != fmt.Sprint(wantReq) {
				t.Errorf("create request\n got %+v\nwant %+v", req, wantReq)
			}
		})
	}

	tests := []struct {
		name   string
		domain string
		path   string // default /sandboxes
		body   string
		status int
		check  func(t *testing.T, e *env, body map[string]any)
	}{
		{
			name: "v1 with an empty body uses the defaults: insecure, internet allowed", body: "", status: 201,
			check: func(t *testing.T, e *env, body map[string]any) {
				req := e.fake.created[0]
				if req.Timeout != 0 || !req.AllowInternet || req.Secure || req.AutoResume {
					t.Errorf("defaults: %+v", req)
				}
				if _, ok := body["envdAccessToken"]; ok {
					t.Errorf("insecure sandbox returned an access token: %v", body)
				}
			},
		},
		{
			name: "the configured domain is reported", domain: "sb.example.com", body: `{"templateID":"base"}`, status: 201,
			check: func(t *testing.T, _ *env, body map[string]any) {
				if body["domain"] != "sb.example.com" {
					t.Errorf("domain = %v", body["domain"])
				}
			},
		},
		{
			name: "an unknown template is 404 naming it", body: `{"templateID":"missing"}`, status: 404,
			check: func(t *testing.T, _ *env, body map[string]any) {
				if msg, _ := body["message"].(string); !strings.Contains(msg, `"missing"`) || !strings.Contains(msg, "template not found") {
					t.Errorf("message %q does not name the template", msg)
				}
			},
		},
		{
			name: "v2 secures a sandbox by default, as E2B does", path: "/v2/sandboxes", body: `{"templateID":"base"}`, status: 201,
			check: func(t *testing.T, e *env, body map[string]any) {
				if !e.fake.created[0].Secure || body["envdAccessToken"] != "tok-new" {
					t.Errorf("secure %v, body %v", e.fake.created[0].Secure, body)
				}
			},
		},
		{
			name: "v2 honours an explicit secure false", path: "/v2/sandboxes", body: `{"secure":false}`, status: 201,
			check: func(t *testing.T, e *env, _ map[string]any) {
				if e.fake.created[0].Secure {
					t.Error("secure despite secure:false")
				}
			},
		},
		{name: "a create over the team's quota is 429 in E2B's shape, naming the limit", body: `{"templateID":"over-quota"}`, status: 429,
			check: wantMessage("21 concurrent sandboxes, over the team's limit of 20")},
		{name: "invalid JSON is 400", body: `{"templateID":`, status: 400},
		{name: "a negative timeout is 400", body: `{"timeout":-1}`, status: 400},
		{name: "a wrongly typed field is 400", body: `{"metadata":"x"}`, status: 400},
		{name: "a template id with '..' is 400", body: `{"templateID":"../etc"}`, status: 400},
		{name: "a template id with NUL is 400", body: `{"templateID":"base\u0000x"}`, status: 400},
		{name: "an env value with NUL is 400 at create", body: `{"envVars":{"K":"a\u0000b"}}`, status: 400},
		{name: "an env name with '=' is 400 at create", body: `{"envVars":{"K=1":"v"}}`, status: 400},
		{name: "metadata with too many keys is 400 naming the limit", body: bigMetadata(api.MaxMetadataKeys+1, 1, 1), status: 400,
			check: wantMessage("over the limit of 64 keys")},
		{name: "a metadata key too long is 400 naming the limit", body: bigMetadata(1, api.MaxMetadataKeyBytes+1, 1), status: 400,
			check: wantMessage("over the limit of 128 bytes per key")},
		{name: "a metadata value too long is 400 naming the limit", body: bigMetadata(1, 1, api.MaxMetadataValueBytes+1), status: 400,
			check: wantMessage("over the limit of 1024 bytes per value")},
		{name: "metadata too big in all is 400 naming the limit", body: bigMetadata(16, 100, 1000), status: 400,
			check: wantMessage("over the limit of 8192 bytes of keys and values in all")},
		{name: "metadata at every limit is accepted", body: bigMetadata(api.MaxMetadataKeys, 8, api.MaxMetadataBytes/api.MaxMetadataKeys-8), status: 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tt.domain)
			path := tt.path
			if path == "" {
				path = "/sandboxes"
			}
			res := e.do(t, "POST", path, tt.body)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			body := res.json(t)
			if tt.status >= 400 {
				checkErrorBody(t, res, tt.status)
			}
			if tt.check != nil {
				tt.check(t, e, body)
			}
		})
	}
}

// bigMetadata is a create body with n metadata keys of about keyLen bytes and values of
// valueLen bytes.
func bigMetadata(n, keyLen, valueLen int) string {
	md := map[string]string{}
	for i := range n {
		md[fmt.Sprintf("k%0*d", keyLen-1, i)] = strings.Repeat("v", valueLen)
	}
	b, _ := json.Marshal(map[string]any{"templateID": "base", "metadata": md})
	return string(b)
}

func wantMessage(want string) func(t *testing.T, _ *env, body map[string]any) {
	return func(t *testing.T, _ *env, body map[string]any) {
		if msg, _ := body["message"].(string); !strings.Contains(msg, want) {
			t.Errorf("message %q, want %q", msg, want)
		}
	}
}

// checkErrorBody checks E2B's error shape: code is the status, the message and requestId
// carry the request id that the response header echoes.
func checkErrorBody(t *testing.T, res response, status int) map[string]any {
	t.Helper()
	body := res.json(t)
	if code, _ := body["code"].(float64); int(code) != status {
		t.Errorf("code = %v, want %d", body["code"], status)
	}
	id := res.header.Get("X-E2B-Request-Id")
	if id == "" || body["requestId"] != id {
		t.Errorf("requestId = %v, header %q", body["requestId"], id)
	}
	if msg, _ := body["message"].(string); msg == "" || !strings.Contains(msg, id) {
		t.Errorf("message %q lacks the request id %q", msg, id)
	}
	return body
}

func TestGet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		id      string
		status  int
		message string // in the error message
	}{
		{name: "a running sandbox is 200 with its detail", id: "irunning", status: 200},
		{name: "a secure sandbox returns its access token", id: "isecure", status: 200},
		{name: "an unknown sandbox is 404", id: "inope", status: 404, message: "sandbox not found"},
		{name: "another team's sandbox is 404", id: "iother", status: 404, message: "sandbox not found"},
		{name: "a killed sandbox is 404 with why and when", id: "ikilled", status: 404,
			message: "sandbox ikilled was killed: timeout at " + killedAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, "GET", "/sandboxes/"+tt.id, "")
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			if tt.status != 200 {
				body := checkErrorBody(t, res, tt.status)
				if msg, _ := body["message"].(string); !strings.Contains(msg, tt.message) {
					t.Errorf("message %q lacks %q", msg, tt.message)
				}
				return
			}
			body := res.json(t)
			for _, k := range []string{"sandboxID", "templateID", "clientID", "startedAt", "endAt", "state",
				"cpuCount", "memoryMB", "diskSizeMB", "envdVersion", "metadata", "domain"} {
				if _, ok := body[k]; !ok {
					t.Errorf("field %s missing from %s", k, res.body)
				}
			}
			if body["startedAt"] != "2026-01-02T03:00:00Z" || body["endAt"] != "2026-01-02T03:05:00Z" {
				t.Errorf("times %v %v", body["startedAt"], body["endAt"])
			}
			if body["state"] != "running" || body["cpuCount"] != 2.0 || body["memoryMB"] != 512.0 || body["diskSizeMB"] != 1024.0 {
				t.Errorf("detail %s", res.body)
			}
			token, has := body["envdAccessToken"]
			if tt.id == "isecure" && token != "tok-secure" || tt.id != "isecure" && has {
				t.Errorf("envdAccessToken = %v", token)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header []string
		status int
	}{
		{name: "no key is 401", header: []string{"X-API-Key", ""}, status: 401},
		{name: "an unknown key is 401", header: []string{"X-API-Key", "e2b_dead"}, status: 401},
		{name: "a bearer token is accepted", header: []string{"X-API-Key", "", "Authorization", "Bearer " + testKey}, status: 200},
		{name: "a malformed Authorization header is 401", header: []string{"X-API-Key", "", "Authorization", "Basic " + testKey}, status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, "GET", "/sandboxes/irunning", "", tt.header...)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			if tt.status == 401 {
				checkErrorBody(t, res, 401)
			}
		})
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	// The SDK url-encodes each key and value (encodeURIComponent), then builds a query string
	// of them (URLSearchParams, encoding them again), and sends that as one parameter.
	sdkMetadata := url.Values{"metadata": {"env=a%2520b%2526c&app=web"}}.Encode()
	tests := []struct {
		name      string
		path      string
		status    int
		ids       []string
		next      string
		total     string
		wantState []store.SandboxState
		wantMeta  map[string]string
	}{
		{name: "v2 lists running and paused by default", path: "/v2/sandboxes", status: 200,
			ids: []string{"irunning", "ipaused", "isecure"}, total: "3"},
		{name: "v2 filters by comma-separated states", path: "/v2/sandboxes?state=running,paused", status: 200,
			ids: []string{"irunning", "ipaused", "isecure"}, total: "3",
			wantState: []store.SandboxState{store.StateRunning, store.StatePaused}},
		{name: "v2 filters by a repeated state", path: "/v2/sandboxes?state=paused", status: 200,
			ids: []string{"ipaused"}, total: "1", wantState: []store.SandboxState{store.StatePaused}},
		{name: "v2 filters by the SDK's doubly encoded metadata", path: "/v2/sandboxes?" + sdkMetadata, status: 200,
			ids: []string{"irunning"}, total: "1", wantMeta: map[string]string{"env": "a b&c", "app": "web"}},
		{name: "v2 pages with limit and answers X-Next-Token", path: "/v2/sandboxes?limit=2", status: 200,
			ids: []string{"irunning", "ipaused"}, next: "2", total: "3"},
		{name: "v2 follows nextToken", path: "/v2/sandboxes?limit=2&nextToken=2", status: 200,
			ids: []string{"isecure"}, total: "3"},
		{name: "legacy list is running only", path: "/sandboxes", status: 200,
			ids: []string{"irunning", "isecure"}, total: "2", wantState: []store.SandboxState{store.StateRunning}},
		{name: "a limit of 0 is 400", path: "/v2/sandboxes?limit=0", status: 400},
		{name: "a limit over 100 is 400", path: "/v2/sandboxes?limit=101", status: 400},
		{name: "an unknown state is 400", path: "/v2/sandboxes?state=killed", status: 400},
		{name: "a singly encoded metadata filter works too", path: "/v2/sandboxes?metadata=" + url.QueryEscape("app=web"),
			status: 200, ids: []string{"irunning"}, total: "1", wantMeta: map[string]string{"app": "web"}},
		{name: "a malformed metadata filter is 400", path: "/v2/sandboxes?metadata=" + url.QueryEscape("a=%zz"), status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, "GET", tt.path, "")
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			if tt.status != 200 {
				checkErrorBody(t, res, tt.status)
				return
			}
			var list []map[string]any
			if err := json.Unmarshal(res.body, &list); err != nil {
				t.Fatalf("body %s: %v", res.body, err)
			}
			var ids []string
			for _, sb := range list {
				ids = append(ids, sb["sandboxID"].(string))
				if _, ok := sb["envdAccessToken"]; ok {
					t.Errorf("a listing leaked an access token: %v", sb)
				}
				if _, ok := sb["metadata"].(map[string]any); !ok {
					t.Errorf("metadata is not an object: %v", sb)
				}
			}
			if !slices.Equal(ids, tt.ids) {
				t.Errorf("ids %v, want %v", ids, tt.ids)
			}
			if got := res.header.Get("X-Next-Token"); got != tt.next {
				t.Errorf("X-Next-Token %q, want %q", got, tt.next)
			}
			if got := res.header.Get("X-Total-Running"); got != tt.total {
				t.Errorf("X-Total-Running %q, want %q", got, tt.total)
			}
			f := e.fake.filters[0]
			if f.TeamID != testTeam {
				t.Errorf("team %q", f.TeamID)
			}
			if tt.wantState != nil && !slices.Equal(f.States, tt.wantState) {
				t.Errorf("states %v, want %v", f.States, tt.wantState)
			}
			if tt.wantMeta != nil && fmt.Sprint(f.Metadata) != fmt.Sprint(tt.wantMeta) {
				t.Errorf("metadata %v, want %v", f.Metadata, tt.wantMeta)
			}
		})
	}
	t.Run("an empty listing is [] not null", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		res := e.do(t, "GET", "/v2/sandboxes?metadata=nobody%3Dhere", "")
		if res.status != 200 || strings.TrimSpace(string(res.body)) != "[]" {
			t.Errorf("status %d body %s", res.status, res.body)
		}
	})
	t.Run("legacy list follows every page", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		for i := range 150 {
			e.fake.add(&store.Sandbox{ID: fmt.Sprintf("ibulk%d", i), TeamID: testTeam, State: store.StateRunning})
		}
		res := e.do(t, "GET", "/sandboxes", "")
		var list []map[string]any
		if err := json.Unmarshal(res.body, &list); err != nil || len(list) != 152 {
			t.Errorf("got %d sandboxes (%v), want 152", len(list), err)
		}
	})
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		status  int
		message string        // in the error message
		timeout time.Duration // passed to the orchestrator, when checked
	}{
		{name: "kill answers 204", method: "DELETE", path: "/sandboxes/irunning", status: 204},
		{name: "kill of an unknown sandbox is a 404 body", method: "DELETE", path: "/sandboxes/inope", status: 404,
			message: "kill sandbox inope: sandbox not found"},
		{name: "kill of a killed sandbox is 404 with the reason", method: "DELETE", path: "/sandboxes/ikilled", status: 404,
			message: "sandbox ikilled was killed: timeout at " + killedAt},
		{name: "timeout answers 204 with the TTL in seconds", method: "POST", path: "/sandboxes/irunning/timeout",
			body: `{"timeout":30}`, status: 204, timeout: 30 * time.Second},
		{name: "timeout without a body is 400", method: "POST", path: "/sandboxes/irunning/timeout", status: 400},
		{name: "timeout of a killed sandbox is 404", method: "POST", path: "/sandboxes/ikilled/timeout",
			body: `{"timeout":30}`, status: 404, message: "was killed: timeout"},
		{name: "refresh answers 204", method: "POST", path: "/sandboxes/irunning/refreshes",
			body: `{"duration":10}`, status: 204, timeout: 10 * time.Second},
		{name: "refresh with no body answers 204", method: "POST", path: "/sandboxes/irunning/refreshes", status: 204},
		{name: "pause answers 204", method: "POST", path: "/sandboxes/irunning/pause", status: 204},
		{name: "pause of a paused sandbox is 409", method: "POST", path: "/sandboxes/ipaused/pause", status: 409,
			message: "already paused"},
		{name: "resume answers 201", method: "POST", path: "/sandboxes/ipaused/resume", body: `{"timeout":120}`,
			status: 201, timeout: 2 * time.Minute},
		{name: "resume of a running sandbox is 409", method: "POST", path: "/sandboxes/irunning/resume", status: 409},
		{name: "connect to a running sandbox answers 200", method: "POST", path: "/sandboxes/irunning/connect",
			body: `{"timeout":300}`, status: 200, timeout: 5 * time.Minute},
		{name: "v2 connect to a running sandbox answers 200", method: "POST", path: "/v2/sandboxes/irunning/connect",
			body: `{}`, status: 200},
		{name: "v2 connect to a paused sandbox resumes it and answers 201", method: "POST",
			path: "/v2/sandboxes/ipaused/connect", body: `{"timeout":60}`, status: 201, timeout: time.Minute},
		{name: "connect to a killed sandbox is 404", method: "POST", path: "/v2/sandboxes/ikilled/connect",
			status: 404, message: "was killed"},
		{name: "an unknown route is a 404 body", method: "GET", path: "/nope", status: 404, message: "no such route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, tt.method, tt.path, tt.body)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			switch {
			case tt.status == 204:
				if len(res.body) != 0 {
					t.Errorf("204 with body %q", res.body)
				}
			case tt.status >= 400:
				body := checkErrorBody(t, res, tt.status)
				if msg, _ := body["message"].(string); !strings.Contains(msg, tt.message) {
					t.Errorf("message %q lacks %q", msg, tt.message)
				}
			default:
				body := res.json(t)
				if body["sandboxID"] == nil || body["envdVersion"] != "0.6.4" || body["clientID"] != "cove" {
					t.Errorf("body %s", res.body)
				}
			}
			if tt.timeout != 0 {
				if len(e.fake.timeouts) != 1 || e.fake.timeouts[0] != tt.timeout {
					t.Errorf("timeouts passed %v, want [%v]", e.fake.timeouts, tt.timeout)
				}
			}
		})
	}
}

func TestKillLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	res := e.do(t, "DELETE", "/sandboxes/irunning", "", "X-E2B-Request-Id", "req-kill-1")
	if res.status != 204 || res.header.Get("X-E2B-Request-Id") != "req-kill-1" {
		t.Fatalf("status %d, request id %q", res.status, res.header.Get("X-E2B-Request-Id"))
	}
	if want := (killCall{team: testTeam, id: "irunning", keyID: "key1", why: reason.KillRequest}); e.fake.kills[0] != want {
		t.Errorf("kill call %+v, want %+v", e.fake.kills[0], want)
	}
	t.Run("one kill line names sandbox, team, request and reason", func(t *testing.T) {
		lines := e.logs.lines("sandbox kill requested")
		if len(lines) != 1 {
			t.Fatalf("%d kill lines", len(lines))
		}
		want := map[string]any{"sandbox.id": "irunning", "team.id": testTeam, "request_id": "req-kill-1", "kill_reason": "request"}
		for k, v := range want {
			if lines[0][k] != v {
				t.Errorf("%s = %v, want %v", k, lines[0][k], v)
			}
		}
	})
	t.Run("one access line names route, status and ids", func(t *testing.T) {
		lines := e.logs.lines("api request")
		if len(lines) != 1 {
			t.Fatalf("%d access lines", len(lines))
		}
		want := map[string]any{"http.request.method": "DELETE", "http.route": "DELETE /sandboxes/{id}",
			"http.response.status_code": 204.0, "sandbox.id": "irunning", "team.id": testTeam, "request_id": "req-kill-1"}
		for k, v := range want {
			if lines[0][k] != v {
				t.Errorf("%s = %v, want %v", k, lines[0][k], v)
			}
		}
		if _, ok := lines[0]["duration_ms"].(float64); !ok {
			t.Errorf("no duration: %v", lines[0])
		}
	})
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	t.Run("a client's X-Request-Id is taken and echoed as X-E2B-Request-Id", func(t *testing.T) {
		res := e.do(t, "GET", "/sandboxes/inope", "", "X-Request-Id", "alt-id-7")
		body := checkErrorBody(t, res, 404)
		if body["requestId"] != "alt-id-7" {
			t.Errorf("requestId %v", body["requestId"])
		}
	})
	t.Run("a request without one gets a minted id", func(t *testing.T) {
		res := e.do(t, "GET", "/sandboxes/irunning", "")
		if len(res.header.Get("X-E2B-Request-Id")) != 20 {
			t.Errorf("minted id %q", res.header.Get("X-E2B-Request-Id"))
		}
	})
}

func TestCreateSendsChunkedBody(t *testing.T) {
	t.Parallel()
	// Guard for the tests above: the helper really sends bodies without Content-Length.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.ContentLength, r.TransferEncoding)
	}))
	t.Cleanup(srv.Close)
	e := &env{url: srv.URL}
	res := e.do(t, "POST", "/", `{}`)
	if string(res.body) != "-1 [chunked]" {
		t.Errorf("the test client sent %q", res.body)
	}
}
