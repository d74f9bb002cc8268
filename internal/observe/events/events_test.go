package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

func openDB(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newDB(t testing.TB) *sqlite.DB {
	return openDB(t, filepath.Join(t.TempDir(), "cove.db"))
}

func newTeam(t testing.TB, db *sqlite.DB) string {
	t.Helper()
	team, err := db.CreateTeam(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	return team.ID
}

// loopback is the operator's allow option the tests' receivers on 127.0.0.1 need.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// deliverKilled emits a killed event to one webhook at url on a new store and bus that
// allow allow, and returns the finished delivery.
func deliverKilled(t *testing.T, url, secret string, allow []netip.Prefix) *store.Delivery {
	t.Helper()
	db := newDB(t)
	team := newTeam(t, db)
	h := addWebhook(t, db, team, url, secret, SandboxKilled)
	b, err := New(context.Background(), Config{Store: db, Backoff: fastBackoff, AttemptTimeout: 2 * time.Second, AllowNets: allow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Emit(context.Background(), killedEvent(team)); err != nil {
		t.Fatal(err)
	}
	return waitDelivery(t, db, h)
}

// fastBackoff keeps retry tests quick.
var fastBackoff = Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Attempts: 8}

func newBus(t testing.TB, db store.EventStore) *Bus {
	t.Helper()
	b, err := New(context.Background(), Config{Store: db, Backoff: fastBackoff, AttemptTimeout: 2 * time.Second, AllowNets: loopback})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func addWebhook(t testing.TB, db store.EventStore, team, url, secret string, types ...EventType) *store.Webhook {
	t.Helper()
	h := &store.Webhook{ID: newID("wh_"), TeamID: team, URL: url, Secret: secret, CreatedAt: time.Now().UTC()}
	for _, ty := range types {
		h.Events = append(h.Events, string(ty))
	}
	if err := db.InsertWebhook(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return h
}

// receiver is a webhook endpoint that checks every delivery's signature and answers with
// the next of its statuses (200 once they run out).
type receiver struct {
	t        testing.TB
	secret   string
	mu       sync.Mutex
	statuses []int
	got      []delivery
}

type delivery struct {
	header http.Header
	body   []byte
	event  wireEvent
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get(HeaderSignatureVersion) != "v1" || r.Header.Get(HeaderSignature) != Sign(rc.secret, body) {
		rc.t.Errorf("delivery signature %q (version %q) does not match its body",
			r.Header.Get(HeaderSignature), r.Header.Get(HeaderSignatureVersion))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev wireEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		rc.t.Errorf("delivery body: %v", err)
	}
	rc.mu.Lock()
	rc.got = append(rc.got, delivery{header: r.Header.Clone(), body: body, event: ev})
	status := http.StatusOK
	if len(rc.statuses) > 0 {
		status, rc.statuses = rc.statuses[0], rc.statuses[1:]
	}
	rc.mu.Unlock()
	w.WriteHeader(status)
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

// waitDelivery waits until webhook h's only delivery is no longer pending, and returns it.
func waitDelivery(t testing.TB, db store.EventStore, h *store.Webhook) *store.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := db.ListDeliveries(context.Background(), h.TeamID, h.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && ds[0].State != store.DeliveryPending {
			return ds[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("webhook %s: no finished delivery within 10 s", h.ID)
	return nil
}

func killedEvent(team string) Event {
	sb := &store.Sandbox{ID: "isb1", TeamID: team, TemplateID: "base", CPUCount: 2, MemoryMB: 512,
		Metadata: map[string]string{"user": "ada"}, StartedAt: time.Now().Add(-90 * time.Second)}
	ev := ForSandbox(SandboxKilled, sb)
	ev.Data = KilledData(reason.KillTimeout, ExecutionOf(sb, sb.StartedAt.Add(90*time.Second)))
	ev.APIKeyID = "key_1"
	return ev
}

func TestSignMatchesOpenSSL(t *testing.T) {
	t.Parallel()
	// printf '%s' "$secret$body" | openssl dgst -sha256 -binary | base64, then "=" cut.
	for _, c := range []struct{ secret, body, want string }{
		{"whsec_test", `{"id":"evt_1","type":"sandbox.lifecycle.killed"}`, "CtNZp04oc+9+420noBBWTmp1DZkbzczii0VflHgXg1s"},
		{"k", `{}`, "B8uaCyvnt1dnwQP103CzZs/DBy1nxZKk+2/NFAjTaTQ"},
	} {
		if got := Sign(c.secret, []byte(c.body)); got != c.want {
			t.Errorf("Sign(%q, %q) = %q, want %q", c.secret, c.body, got, c.want)
		}
		if !Verify(c.secret, []byte(c.body), c.want) || Verify(c.secret+"x", []byte(c.body), c.want) {
			t.Errorf("Verify disagrees with Sign for %q", c.body)
		}
	}
}

func TestEventTypesParseTheirOwnNames(t *testing.T) {
	t.Parallel()
	for _, ty := range EventTypes {
		got, err := ParseEventType(ty.String())
		if err != nil || got != ty {
			t.Errorf("ParseEventType(%q) = %q, %v", ty, got, err)
		}
	}
	for _, s := range []string{"", "sandbox.lifecycle.exploded", "created"} {
		if _, err := ParseEventType(s); err == nil {
			t.Errorf("ParseEventType(%q) accepted", s)
		}
	}
	if EventType("").String() == "" {
		t.Error(`EventType("").String() is ""`)
	}
}

func TestBackoffDoublesUpToMax(t *testing.T) {
	t.Parallel()
	b := Backoff{}.withDefaults()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", i+1, got, w*time.Second)
		}
	}
	if got := (Backoff{Initial: time.Second, Max: 3 * time.Second}).Delay(5); got != 3*time.Second {
		t.Errorf("capped Delay = %v", got)
	}
}

func TestDelivery(t *testing.T) {
	t.Parallel()

	t.Run("a killed event reaches a subscribed webhook signed, with its request id and data", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		team := newTeam(t, db)
		rc := &receiver{t: t, secret: "s3cret"}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		h := addWebhook(t, db, team, srv.URL, rc.secret, SandboxKilled)
		other := addWebhook(t, db, team, srv.URL, rc.secret, SandboxCreated)
		bus := newBus(t, db)

		ctx := context.Background()
		if err := bus.Emit(ctx, killedEvent(team)); err != nil {
			t.Fatal(err)
		}
		d := waitDelivery(t, db, h)
		if d.State != store.DeliveryDelivered || len(d.History) != 1 || d.History[0].StatusCode != 200 {
			t.Fatalf("delivery %+v, attempts %+v", d, d.History)
		}
		got := rc.deliveries()
		if len(got) != 1 {
			t.Fatalf("receiver got %d deliveries, want 1", len(got))
		}
		if got[0].header.Get(HeaderWebhookID) != h.ID || got[0].header.Get(HeaderDeliveryID) != d.ID {
			t.Errorf("headers %v, want webhook %s delivery %s", got[0].header, h.ID, d.ID)
		}
		ev := got[0].event
		if ev.Type != string(SandboxKilled) || ev.SandboxID != "isb1" || ev.SandboxTeamID != team ||
			ev.SandboxTemplateID != "base" || ev.RequestID != SystemRequestID || ev.SandboxMetadata["user"] != "ada" ||
			ev.APIKeyID != "key_1" || ev.ID == "" || ev.Timestamp.IsZero() {
			t.Errorf("event %+v", ev)
		}
		var data struct {
			KillReason string `json:"kill_reason"`
			Execution  struct {
				StartedAt     time.Time `json:"started_at"`
				VCPUCount     int       `json:"vcpu_count"`
				MemoryMB      int       `json:"memory_mb"`
				ExecutionTime int64     `json:"execution_time"`
			} `json:"execution"`
		}
		if err := json.Unmarshal(ev.EventData, &data); err != nil {
			t.Fatal(err)
		}
		if data.KillReason != "timeout" || data.Execution.VCPUCount != 2 || data.Execution.MemoryMB != 512 ||
			data.Execution.ExecutionTime != 90000 || data.Execution.StartedAt.IsZero() {
			t.Errorf("eventData %s", ev.EventData)
		}
		if ds, _ := db.ListDeliveries(ctx, team, other.ID, 10); len(ds) != 0 {
			t.Errorf("a webhook not subscribed to killed got %d deliveries", len(ds))
		}
	})

	t.Run("a receiver failing twice with 500 gets three attempts, the last delivered", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		team := newTeam(t, db)
		rc := &receiver{t: t, secret: "s", statuses: []int{500, 500, 200}}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		h := addWebhook(t, db, team, srv.URL, rc.secret, SandboxKilled)
		bus := newBus(t, db)
		if err := bus.Emit(context.Background(), killedEvent(team)); err != nil {
			t.Fatal(err)
		}
		d := waitDelivery(t, db, h)
		if d.State != store.DeliveryDelivered || d.Attempts != 3 || len(d.History) != 3 {
			t.Fatalf("delivery %+v with %d attempts recorded", d, len(d.History))
		}
		for i, a := range d.History[:2] {
			if a.Attempt != i+1 || a.StatusCode != 500 || a.ErrorClass != ErrorHTTPStatus || a.NextRetryAt == nil {
				t.Errorf("attempt %d: %+v", i+1, a)
			}
		}
		if last := d.History[2]; last.StatusCode != 200 || last.ErrorClass != "" || last.NextRetryAt != nil {
			t.Errorf("last attempt %+v", last)
		}
		got := rc.deliveries()
		if len(got) != 3 || got[0].event.ID != got[2].event.ID ||
			got[0].header.Get(HeaderDeliveryID) != got[2].header.Get(HeaderDeliveryID) {
			t.Fatalf("retries did not resend the same delivery: %d received", len(got))
		}
		for i, g := range got {
			st, err := VerifyDelivery(rc.secret, g.body, g.header.Get(HeaderSignature), time.Minute, time.Now())
			if err != nil || st.Attempt != i+1 || st.DeliveryID != d.ID {
				t.Errorf("attempt %d: stamp %+v, %v", i+1, st, err)
			}
		}
	})

	t.Run("a delivery replayed later is refused by its signed stamp, and a forged stamp breaks the signature", func(t *testing.T) {
		t.Parallel()
		rc := &receiver{t: t, secret: "s"}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		deliverKilled(t, srv.URL, rc.secret, loopback)
		g := rc.deliveries()[0]
		sig := g.header.Get(HeaderSignature)
		if _, err := VerifyDelivery(rc.secret, g.body, sig, 5*time.Minute, time.Now()); err != nil {
			t.Fatalf("fresh delivery refused: %v", err)
		}
		if _, err := VerifyDelivery(rc.secret, g.body, sig, 5*time.Minute, time.Now().Add(time.Hour)); !errors.Is(err, ErrStale) {
			t.Errorf("replayed an hour later: %v, want ErrStale", err)
		}
		var m map[string]any
		_ = json.Unmarshal(g.body, &m)
		m["delivery"].(map[string]any)["sentAt"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		forged, _ := json.Marshal(m)
		if _, err := VerifyDelivery(rc.secret, forged, sig, 5*time.Minute, time.Now().Add(time.Hour)); !errors.Is(err, ErrBadSignature) {
			t.Errorf("forged stamp: %v, want ErrBadSignature", err)
		}
	})

	t.Run("a 400 is not retried", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		team := newTeam(t, db)
		rc := &receiver{t: t, secret: "s", statuses: []int{400}}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		h := addWebhook(t, db, team, srv.URL, rc.secret, SandboxKilled)
		bus := newBus(t, db)
		if err := bus.Emit(context.Background(), killedEvent(team)); err != nil {
			t.Fatal(err)
		}
		d := waitDelivery(t, db, h)
		if d.State != store.DeliveryFailed || len(d.History) != 1 || d.History[0].NextRetryAt != nil {
			t.Fatalf("delivery %+v, attempts %d", d, len(d.History))
		}
	})

	t.Run("attempts stop after Backoff.Attempts and name the error class", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		team := newTeam(t, db)
		h := addWebhook(t, db, team, "http://"+deadAddr(t), "s", SandboxKilled)
		b, err := New(context.Background(), Config{Store: db, AllowNets: loopback,
			Backoff: Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		if err := b.Emit(context.Background(), killedEvent(team)); err != nil {
			t.Fatal(err)
		}
		d := waitDelivery(t, db, h)
		if d.State != store.DeliveryFailed || len(d.History) != 3 {
			t.Fatalf("delivery %+v, %d attempts", d, len(d.History))
		}
		for _, a := range d.History {
			if a.ErrorClass != ErrorConnect || a.StatusCode != 0 {
				t.Errorf("attempt %+v, want class connect", a)
			}
		}
	})
}

// deadAddr returns a loopback address nothing listens on, for now.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestOutboxSurvivesRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	ctx := context.Background()
	addr := deadAddr(t)

	db1 := openDB(t, path)
	team := newTeam(t, db1)
	h := addWebhook(t, db1, team, "http://"+addr, "s", SandboxKilled)
	bus1, err := New(ctx, Config{Store: db1, AllowNets: loopback, Backoff: Backoff{Initial: 200 * time.Millisecond, Attempts: 8}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus1.Emit(ctx, killedEvent(team)); err != nil {
		t.Fatal(err)
	}
	// Wait for a failed first attempt, then stop the "server".
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds, err := db1.ListDeliveries(ctx, team, h.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && len(ds[0].History) >= 1 {
			if ds[0].State != store.DeliveryPending || ds[0].History[0].ErrorClass != ErrorConnect {
				t.Fatalf("after a refused connection: %+v %+v", ds[0], ds[0].History[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no first attempt within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	bus1.Close()
	db1.Close()

	// The receiver comes up on the address the webhook names; a new server resumes.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address %s taken meanwhile: %v", addr, err)
	}
	rc := &receiver{t: t, secret: "s"}
	srv := httptest.NewUnstartedServer(rc)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)

	db2 := openDB(t, path)
	newBus(t, db2)
	d := waitDelivery(t, db2, h)
	if d.State != store.DeliveryDelivered || len(rc.deliveries()) != 1 {
		t.Fatalf("after restart: %+v, %d received", d, len(rc.deliveries()))
	}
	if last := d.History[len(d.History)-1]; last.StatusCode != 200 {
		t.Errorf("last attempt %+v", last)
	}
}

func TestCloseInterruptsAnAttemptWithoutCountingIt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	team := newTeam(t, db)
	var hits atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	h := addWebhook(t, db, team, srv.URL, "s", SandboxKilled)
	bus, err := New(context.Background(), Config{Store: db, Backoff: fastBackoff, AllowNets: loopback})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Emit(context.Background(), killedEvent(team)); err != nil {
		t.Fatal(err)
	}
	for hits.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	bus.Close()
	ds, err := db.ListDeliveries(context.Background(), team, h.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].State != store.DeliveryPending || len(ds[0].History) != 0 {
		t.Fatalf("after Close: %+v", ds[0])
	}
	if at, ok, err := db.NextDeliveryAt(context.Background()); err != nil || !ok || time.Until(at) > time.Second {
		t.Errorf("interrupted delivery not claimable again soon: %v %v %v", at, ok, err)
	}
}

func TestEmitRejectsIncompleteEvents(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	bus := newBus(t, db)
	for name, ev := range map[string]Event{
		"unknown type": {Type: "sandbox.lifecycle.exploded", SandboxID: "s", TeamID: "t"},
		"no sandbox":   {Type: SandboxCreated, TeamID: "t"},
		"no team":      {Type: SandboxCreated, SandboxID: "s"},
	} {
		if err := bus.Emit(context.Background(), ev); err == nil {
			t.Errorf("%s: Emit accepted %+v", name, ev)
		}
	}
}

// Not parallel: it reads the process-wide attempt counters.
func TestAttemptsAreCountedByOutcome(t *testing.T) {
	before := map[string]float64{}
	outcomes := []string{telemetry.WebhookDelivered, telemetry.WebhookRetry, telemetry.WebhookFailed}
	for _, o := range outcomes {
		before[o] = attempts(t, o)
	}
	db := newDB(t)
	team := newTeam(t, db)
	failing := httptest.NewServer(&receiver{t: t, secret: "s", statuses: []int{503, 400}})
	t.Cleanup(failing.Close)
	ok := httptest.NewServer(&receiver{t: t, secret: "s"})
	t.Cleanup(ok.Close)
	hf := addWebhook(t, db, team, failing.URL, "s", SandboxKilled)
	ho := addWebhook(t, db, team, ok.URL, "s", SandboxKilled)
	bus := newBus(t, db)
	if err := bus.Emit(context.Background(), killedEvent(team)); err != nil {
		t.Fatal(err)
	}
	waitDelivery(t, db, hf)
	waitDelivery(t, db, ho)
	for o, want := range map[string]float64{telemetry.WebhookDelivered: 1, telemetry.WebhookRetry: 1, telemetry.WebhookFailed: 1} {
		if got := attempts(t, o) - before[o]; got != want {
			t.Errorf("outcome %s counted %v times, want %v", o, got, want)
		}
	}
}

// attempts reads the webhook attempt counter of outcome.
func attempts(t *testing.T, outcome string) float64 {
	t.Helper()
	var m dto.Metric
	if err := telemetry.WebhookAttempts.WithLabelValues(outcome).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
func TestEveryEventTypeHasItsPayloadRegistered(t *testing.T) {
	t.Parallel()
	built := map[EventType]any{
		SandboxKilled:  KilledData(reason.KillOOM, Execution{}),
		SandboxPaused:  PausedData(Execution{}),
		SandboxUpdated: UpdatedData(time.Now(), time.Minute),
		SandboxOOM:     OOMData(2),
	}
	for _, ty := range EventTypes {
		t.Run(ty.String()+" decodes into the SDK's payload type", func(t *testing.T) {
			v, err := cove.EventDataFor(ty.String())
			if err != nil {
				t.Fatal(err)
			}
			if b, ok := built[ty]; ok && fmt.Sprintf("%T", b) != fmt.Sprintf("%T", v) {
				t.Errorf("the server builds %T, the SDK decodes %T", b, v)
			}
		})
	}
	if _, err := cove.EventDataFor("sandbox.lifecycle.exploded"); err == nil {
		t.Error("an unknown type has a payload")
	}
}

func TestEmitRefusesAPayloadOfAnotherType(t *testing.T) {
	t.Parallel()
	bus := newBus(t, newDB(t))
	ctx := context.Background()
	for i, ty := range EventTypes {
		own, err := cove.EventDataFor(ty.String())
		if err != nil {
			t.Fatal(err)
		}
		other, _ := cove.EventDataFor(EventTypes[(i+1)%len(EventTypes)].String())
		tests := []struct {
			name string
			data any
			ok   bool
		}{
			{"its own payload is emitted", own, true},
			{"its own payload by value is emitted", reflect.ValueOf(own).Elem().Interface(), true},
			{"no payload is emitted as {}", nil, true},
			{"another type's payload is refused", other, false},
			{"a map is refused", map[string]any{"count": 1}, false},
		}
		for _, tt := range tests {
			t.Run(ty.String()+": "+tt.name, func(t *testing.T) {
				err := bus.Emit(ctx, Event{Type: ty, SandboxID: "sb1", TeamID: "team1", Data: tt.data})
				if (err == nil) != tt.ok {
					t.Errorf("Emit with %T: %v, want ok %t", tt.data, err, tt.ok)
				}
			})
		}
	}
}
