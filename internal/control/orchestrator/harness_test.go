package orchestrator

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/logs"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// harness is an orchestrator over the fake runtime, a real SQLite store, a real events bus
// and log ingester, and a real template store in the test's temp dir.
type harness struct {
	t         testing.TB
	o         *Orchestrator
	rt        *fakeRuntime
	db        *sqlite.DB
	templates *template.Store
	team      string
	logs      *covetest.Buffer
	dir       string
}

type option func(*Config)

func newHarness(t testing.TB, opts ...option) *harness {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	team, err := db.CreateTeam(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	templates, err := template.OpenAt(ctx, filepath.Join(dir, "templates"), db)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, rt: newFakeRuntime(), db: db, templates: templates, team: team.ID, logs: &covetest.Buffer{}, dir: dir}
	h.addTemplate("base", "root:x:0:0:root:/root:/bin/sh\n")
	logger := telemetry.NewLogger(h.logs, nil)
	bus, err := events.New(ctx, events.Config{Store: db, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ingester := logs.NewIngester(db, logs.Config{Logger: logger})
	cfg := Config{Store: db, Runtime: h.rt, Templates: templates, CoveBinary: "/proc/self/exe", LogDir: filepath.Join(dir, "logs"),
		Logger: logger, Events: bus, Logs: ingester, Commands: db, Redactor: redact.New(redact.Options{Secrets: []string{"s3cr3t-token-value"}})}
	for _, opt := range opts {
		opt(&cfg)
	}
	o, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.o = o
	t.Cleanup(func() {
		o.Shutdown(context.Background())
		o.wg.Wait()
		bus.Close()
		ingester.Close()
	})
	return h
}

// addTemplate writes a ready template called name whose rootfs has passwd.
func (h *harness) addTemplate(name, passwd string) {
	h.t.Helper()
	dir := filepath.Join(h.templates.Dir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "etc"), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		h.t.Fatal(err)
	}
	meta, _ := json.Marshal(template.Template{Name: name, CreatedAt: time.Now()})
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// ctx is a client call's context: a request id and the caller's key.
func (h *harness) ctx(requestID string) context.Context {
	ctx := telemetry.WithLogger(context.Background(), h.o.cfg.Logger)
	ctx = authz.With(ctx, authz.Caller{TeamID: h.team, KeyID: "key-1", KeyName: "ci key"})
	return telemetry.WithRequestID(ctx, requestID)
}

// create makes a running sandbox of the base template.
func (h *harness) create(req CreateRequest) *store.Sandbox {
	h.t.Helper()
	req.TeamID = h.team
	sb, err := h.o.Create(h.ctx("req-create"), req)
	if err != nil {
		h.t.Fatalf("create: %v", err)
	}
	return sb
}

// paused makes a paused sandbox.
func (h *harness) paused(req CreateRequest) *store.Sandbox {
	h.t.Helper()
	sb := h.create(req)
	if err := h.o.Pause(h.ctx("req-pause"), h.team, sb.ID); err != nil {
		h.t.Fatalf("pause: %v", err)
	}
	return sb
}

// record reads the sandbox's stored record.
func (h *harness) record(id string) *store.Sandbox {
	h.t.Helper()
	sb, err := h.db.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatalf("record of %s: %v", id, err)
	}
	return sb
}

// events lists the sandbox's stored lifecycle events, oldest first.
func (h *harness) events(id string) []*store.Event {
	h.t.Helper()
	page, err := h.db.ListEvents(context.Background(), store.EventFilter{TeamID: h.team, SandboxID: id, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	return page.Events
}

// event returns the sandbox's one event of type typ, decoding its data.
func (h *harness) event(id string, typ events.EventType) (*store.Event, map[string]any) {
	h.t.Helper()
	var found *store.Event
	for _, ev := range h.events(id) {
		if ev.Type == string(typ) {
			if found != nil {
				h.t.Fatalf("two %s events for %s", typ, id)
			}
			found = ev
		}
	}
	if found == nil {
		h.t.Fatalf("no %s event for %s; events: %v", typ, id, eventTypes(h.events(id)))
	}
	var data map[string]any
	if err := json.Unmarshal(found.Data, &data); err != nil {
		h.t.Fatalf("event data %s: %v", found.Data, err)
	}
	return found, data
}

func eventTypes(evs []*store.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// waitFor polls cond until it holds, failing after a generous deadline (the machine is
// shared: this is a bound on a hang, not a timing assertion).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting until %s\nlogs:\n%s", what, h.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitKilled waits until the kill of the sandbox has ended: its record says killed, and
// the "sandbox killed" line, the kill's last step (after the record, then the event), is
// logged.
func (h *harness) waitKilled(id string) *store.Sandbox {
	h.t.Helper()
	var sb *store.Sandbox
	h.waitFor("the kill of "+id+" is recorded and logged", func() bool {
		sb = h.record(id)
		return sb.State == store.StateKilled && len(h.logLines("sandbox killed", id)) > 0
	})
	return sb
}

// logLines returns the logged lines with message msg about sandbox id.
func (h *harness) logLines(msg, id string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(h.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m["msg"] == msg && (id == "" || m[telemetry.KeySandboxID] == id) {
			out = append(out, m)
		}
	}
	return out
}

// createHeld starts a create that the runtime holds after making the sandbox, until release
// is called; done receives the create's error.
func (h *harness) createHeld() (id string, release func(), done <-chan error) {
	gate := make(chan struct{})
	h.rt.set(func(f *fakeRuntime) { f.creating = gate })
	errc := make(chan error, 1)
	go func() { _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team}); errc <- err }()
	return <-h.rt.created, func() { close(gate) }, errc
}
