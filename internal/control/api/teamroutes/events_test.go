package teamroutes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// loopback is the operator's allow option the tests' receivers on 127.0.0.1 need.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// apiServer serves the event routes with the team taken from an X-Team header, standing in
// for the API's authentication.
func apiServer(t testing.TB, db *sqlite.DB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(serve(Config{Events: db, AllowNets: loopback}))
	t.Cleanup(srv.Close)
	return srv
}

func call(t testing.TB, method, u, team string, body any) (*http.Response, []byte) {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, u, rd)
	if team != "" {
		req.Header.Set("X-Team", team)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp, buf.Bytes()
}

// listAll follows X-Next-Token from query q and returns every event id, in order.
func listAll(t testing.TB, base, path, team string, q url.Values) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		resp, body := call(t, "GET", base+path+"?"+q.Encode(), team, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s?%s: %d %s", path, q.Encode(), resp.StatusCode, body)
		}
		var evs []cove.SandboxEvent
		if err := json.Unmarshal(body, &evs); err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			ids = append(ids, ev.ID)
		}
		next := resp.Header.Get("X-Next-Token")
		if next == "" {
			return ids
		}
		q.Set("nextToken", next)
	}
}

func TestEventsAPI(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	teamA, teamB := newTeam(t, db), newTeam(t, db)
	bus := newBus(t, db)
	srv := apiServer(t, db)

	// 30 events for team A, one a second: sandboxes sb0..sb2, types cycling through four.
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cycle := []events.EventType{events.SandboxCreated, events.SandboxUpdated, events.SandboxPaused, events.SandboxKilled}
	var all []string // in time order
	for i := range 30 {
		ev := events.Event{Type: cycle[i%4], SandboxID: fmt.Sprintf("sb%d", i%3), TeamID: teamA, TemplateID: "base",
			Timestamp: base.Add(time.Duration(i) * time.Second)}
		ctx := telemetry.WithRequestID(context.Background(), fmt.Sprintf("req-%d", i))
		rec, err := events.Record(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.InsertEvent(ctx, rec); err != nil {
			t.Fatal(err)
		}
		all = append(all, rec.ID)
	}
	if err := bus.Emit(context.Background(), events.Event{Type: events.SandboxCreated, SandboxID: "sbB", TeamID: teamB}); err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(all)
	slices.Reverse(reversed)
	pick := func(keep func(i int) bool) []string {
		var out []string
		for i, id := range all {
			if keep(i) {
				out = append(out, id)
			}
		}
		return out
	}

	for _, c := range []struct {
		name, path string
		q          url.Values
		want       []string
	}{
		{"all of a team's events come newest first by default, in pages", "/events/sandboxes",
			url.Values{"limit": {"7"}}, reversed},
		{"order=asc lists oldest first", "/events/sandboxes",
			url.Values{"limit": {"4"}, "order": {"asc"}}, all},
		{"a comma list of types filters", "/events/sandboxes",
			url.Values{"type": {"sandbox.lifecycle.created,sandbox.lifecycle.killed"}, "order": {"asc"}},
			pick(func(i int) bool { return i%4 == 0 || i%4 == 3 })},
		{"repeated types filter", "/events/sandboxes",
			url.Values{"type": {"sandbox.lifecycle.created", "sandbox.lifecycle.killed"}, "order": {"asc"}, "limit": {"3"}},
			pick(func(i int) bool { return i%4 == 0 || i%4 == 3 })},
		{"since (RFC 3339) is inclusive and until (unix ms) exclusive", "/events/sandboxes",
			url.Values{"since": {base.Add(10 * time.Second).Format(time.RFC3339)},
				"until": {strconv.FormatInt(base.Add(20*time.Second).UnixMilli(), 10)}, "order": {"asc"}, "limit": {"3"}},
			all[10:20]},
		{"one sandbox's events", "/events/sandboxes/sb1",
			url.Values{"order": {"asc"}, "limit": {"2"}}, pick(func(i int) bool { return i%3 == 1 })},
		{"one sandbox's events of one type, newest first", "/events/sandboxes/sb0",
			url.Values{"type": {"sandbox.lifecycle.created"}},
			[]string{all[24], all[12], all[0]}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := listAll(t, srv.URL, c.path, teamA, c.q)
			if !slices.Equal(got, c.want) {
				t.Errorf("got %d events %v\nwant %d %v", len(got), got, len(c.want), c.want)
			}
		})
	}

	t.Run("an event carries the E2B field names and its request id", func(t *testing.T) {
		resp, body := call(t, "GET", srv.URL+"/events/sandboxes?limit=1&order=asc", teamA, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var evs []map[string]any
		json.Unmarshal(body, &evs)
		for _, k := range []string{"id", "type", "timestamp", "sandboxId", "sandboxTemplateId", "sandboxTeamId",
			"sandboxMetadata", "requestId", "eventData"} {
			if _, ok := evs[0][k]; !ok {
				t.Errorf("event lacks %q: %s", k, body)
			}
		}
		if evs[0]["requestId"] != "req-0" {
			t.Errorf("requestId %v, want req-0", evs[0]["requestId"])
		}
	})

	t.Run("a team sees only its own events", func(t *testing.T) {
		got := listAll(t, srv.URL, "/events/sandboxes", teamB, url.Values{})
		if len(got) != 1 {
			t.Errorf("team B sees %d events, want its 1", len(got))
		}
		if got := listAll(t, srv.URL, "/events/sandboxes/sb0", teamB, url.Values{}); len(got) != 0 {
			t.Errorf("team B sees %d of team A's sandbox events", len(got))
		}
	})

	t.Run("no team is 401", func(t *testing.T) {
		if resp, body := call(t, "GET", srv.URL+"/events/sandboxes", "", nil); resp.StatusCode != 401 {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "type=sandbox.lifecycle.exploded",
		"since=yesterday", "until=2026-13-01T00:00:00Z", "order=sideways", "nextToken=%21%21", "orderAsc=maybe"} {
		t.Run("bad query "+q+" is 400 with a JSON body", func(t *testing.T) {
			resp, body := call(t, "GET", srv.URL+"/events/sandboxes?"+q, teamA, nil)
			var e cove.ErrorBody
			if resp.StatusCode != 400 || json.Unmarshal(body, &e) != nil || e.Code != 400 || e.RequestID == "" {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
		})
	}
}

func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	teamA, teamB := newTeam(t, db), newTeam(t, db)
	bus := newBus(t, db)
	srv := apiServer(t, db)

	rc := &receiver{t: t}
	recv := httptest.NewServer(rc)
	t.Cleanup(recv.Close)

	// Created without a secret: one is generated and shown once.
	resp, body := call(t, "POST", srv.URL+"/events/webhooks", teamA, map[string]any{
		"name": "hook", "url": recv.URL, "events": []string{"sandbox.lifecycle.killed", "sandbox.lifecycle.killed"}})
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	var created cove.Webhook
	json.Unmarshal(body, &created)
	if created.ID == "" || len(created.Secret) < 32 || !slices.Equal(created.Events, []string{"sandbox.lifecycle.killed"}) {
		t.Fatalf("created %s", body)
	}
	rc.mu.Lock()
	rc.secret = created.Secret
	rc.mu.Unlock()

	t.Run("a given secret (E2B's signatureSecret) is kept", func(t *testing.T) {
		resp, body := call(t, "POST", srv.URL+"/events/webhooks", teamA, map[string]any{
			"url": "https://example.com/x", "events": []string{"sandbox.lifecycle.created"}, "signatureSecret": "mine"})
		var h cove.Webhook
		json.Unmarshal(body, &h)
		if resp.StatusCode != 201 || h.Secret != "mine" {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
		call(t, "DELETE", srv.URL+"/events/webhooks/"+h.ID, teamA, nil)
	})

	t.Run("listings never show the secret", func(t *testing.T) {
		_, body := call(t, "GET", srv.URL+"/events/webhooks", teamA, nil)
		if strings.Contains(string(body), created.Secret) || !strings.Contains(string(body), created.ID) {
			t.Errorf("list: %s", body)
		}
		_, body = call(t, "GET", srv.URL+"/events/webhooks/"+created.ID, teamA, nil)
		if strings.Contains(string(body), created.Secret) {
			t.Errorf("get: %s", body)
		}
	})

	t.Run("deliveries list attempts with status and latency", func(t *testing.T) {
		if err := bus.Emit(context.Background(), killedEvent(teamA)); err != nil {
			t.Fatal(err)
		}
		h, _ := db.GetWebhook(context.Background(), teamA, created.ID)
		waitDelivery(t, db, h)
		resp, body := call(t, "GET", srv.URL+"/events/webhooks/"+created.ID+"/deliveries", teamA, nil)
		var ds []cove.WebhookDelivery
		json.Unmarshal(body, &ds)
		if resp.StatusCode != 200 || len(ds) != 1 || ds[0].State != "delivered" || len(ds[0].Attempts) != 1 ||
			ds[0].Attempts[0].StatusCode != 200 || ds[0].Attempts[0].Attempt != 1 || ds[0].Attempts[0].LatencyMS <= 0 {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})

	t.Run("another team cannot see, list deliveries of, or delete the webhook", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", "/events/webhooks/" + created.ID},
			{"GET", "/events/webhooks/" + created.ID + "/deliveries"},
			{"DELETE", "/events/webhooks/" + created.ID},
		} {
			if resp, body := call(t, c.method, srv.URL+c.path, teamB, nil); resp.StatusCode != 404 {
				t.Errorf("%s %s as team B: %d %s", c.method, c.path, resp.StatusCode, body)
			}
		}
		_, body := call(t, "GET", srv.URL+"/events/webhooks", teamB, nil)
		if string(bytes.TrimSpace(body)) != "[]" {
			t.Errorf("team B's list: %s", body)
		}
	})

	for _, c := range []struct {
		name string
		body any
	}{
		{"an ftp URL", map[string]any{"url": "ftp://example.com/", "events": []string{"sandbox.lifecycle.killed"}}},
		{"a javascript URL", map[string]any{"url": "javascript:alert(1)", "events": []string{"sandbox.lifecycle.killed"}}},
		{"a file URL", map[string]any{"url": "file:///etc/passwd", "events": []string{"sandbox.lifecycle.killed"}}},
		{"a URL without host", map[string]any{"url": "http:///x", "events": []string{"sandbox.lifecycle.killed"}}},
		{"a relative URL", map[string]any{"url": "/hook", "events": []string{"sandbox.lifecycle.killed"}}},
		{"no URL", map[string]any{"events": []string{"sandbox.lifecycle.killed"}}},
		{"no events", map[string]any{"url": "https://example.com/"}},
		{"an unknown event", map[string]any{"url": "https://example.com/", "events": []string{"sandbox.exploded"}}},
		{"an empty secret", map[string]any{"url": "https://example.com/", "events": []string{"sandbox.lifecycle.killed"}, "secret": ""}},
		{"a huge secret", map[string]any{"url": "https://example.com/", "events": []string{"sandbox.lifecycle.killed"}, "secret": strings.Repeat("x", 300)}},
		{"malformed JSON", `{"url":`},
		{"the cloud metadata address", map[string]any{"url": "http://169.254.169.254/latest", "events": []string{"sandbox.lifecycle.killed"}}},
		{"a private address", map[string]any{"url": "http://10.0.0.7:8080/hook", "events": []string{"sandbox.lifecycle.killed"}}},
		{"an IPv6 unique-local address", map[string]any{"url": "http://[fd00::1]/hook", "events": []string{"sandbox.lifecycle.killed"}}},
	} {
		t.Run("creating with "+c.name+" is 400", func(t *testing.T) {
			resp, body := call(t, "POST", srv.URL+"/events/webhooks", teamA, c.body)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":400`) {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
		})
	}

	t.Run("delete is 204, then 404", func(t *testing.T) {
		if resp, body := call(t, "DELETE", srv.URL+"/events/webhooks/"+created.ID, teamA, nil); resp.StatusCode != 204 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if resp, _ := call(t, "DELETE", srv.URL+"/events/webhooks/"+created.ID, teamA, nil); resp.StatusCode != 404 {
			t.Errorf("second delete: %d", resp.StatusCode)
		}
		if resp, _ := call(t, "GET", srv.URL+"/events/webhooks/"+created.ID+"/deliveries", teamA, nil); resp.StatusCode != 404 {
			t.Errorf("deliveries of a deleted webhook: %d", resp.StatusCode)
		}
	})
}

func newDB(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newTeam(t testing.TB, db *sqlite.DB) string {
	t.Helper()
	team, err := db.CreateTeam(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	return team.ID
}

func newBus(t testing.TB, db store.EventStore) *events.Bus {
	t.Helper()
	b, err := events.New(context.Background(), events.Config{Store: db, AttemptTimeout: 2 * time.Second, AllowNets: loopback,
		Backoff: events.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Attempts: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// receiver is a webhook endpoint that checks every delivery's signature.
type receiver struct {
	t      testing.TB
	mu     sync.Mutex
	secret string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	secret := rc.secret
	rc.mu.Unlock()
	if r.Header.Get(events.HeaderSignature) != events.Sign(secret, body) {
		rc.t.Errorf("delivery signature %q does not match its body", r.Header.Get(events.HeaderSignature))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// waitDelivery waits until webhook h's only delivery is no longer pending.
func waitDelivery(t testing.TB, db store.EventStore, h *store.Webhook) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := db.ListDeliveries(context.Background(), h.TeamID, h.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].State != store.DeliveryPending {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("webhook %s: no finished delivery within 10 s", h.ID)
}

func killedEvent(team string) events.Event {
	sb := &store.Sandbox{ID: "isb1", TeamID: team, TemplateID: "base", CPUCount: 2, MemoryMB: 512,
		Metadata: map[string]string{"user": "ada"}, StartedAt: time.Now().Add(-90 * time.Second)}
	ev := events.ForSandbox(events.SandboxKilled, sb)
	ev.Data = events.KilledData(reason.KillTimeout, events.ExecutionOf(sb, sb.StartedAt.Add(90*time.Second)))
	ev.APIKeyID = "key_1"
	return ev
}
