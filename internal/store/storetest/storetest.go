// Package storetest is the store conformance suite: what every engine behind internal/store
// must do, run against each (SQLite in internal/store/sqlite, PostgreSQL in
// internal/store/postgres). A behaviour only one engine has is a bug in the other.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/reason"
)

// Engine is what the suite covers so far.
type Engine interface {
	store.Keys
	store.Sandboxes
	store.Activity
	store.Secrets
	store.ConsoleSessions
	store.EventStore
}

// Open opens a new, empty store for one test; sealed stores seal envd tokens with a sealer.
type Open func(t *testing.T, sealed bool) Engine

// base is a fixed instant at the store's precision.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// Run runs every conformance test against the engine open makes.
func Run(t *testing.T, open Open) {
	t.Run("teams and API keys", func(t *testing.T) { keys(t, open(t, false)) })
	t.Run("sandbox records", func(t *testing.T) { sandboxes(t, open(t, false)) })
	t.Run("sandbox listings", func(t *testing.T) { listings(t, open(t, false)) })
	t.Run("sealed envd tokens", func(t *testing.T) { sealedTokens(t, open(t, true)) })
	t.Run("team secrets", func(t *testing.T) { secrets(t, open(t, false)) })
	t.Run("console sessions", func(t *testing.T) { sessions(t, open(t, false)) })
	t.Run("events and their listings", func(t *testing.T) { events(t, open(t, false)) })
	t.Run("webhooks and the delivery outbox", func(t *testing.T) { webhooks(t, open(t, true)) })
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func keys(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	if got := must[*store.Team](t)(s.GetTeam(ctx, team.ID)); got.Name != "acme" || !got.CreatedAt.Equal(team.CreatedAt) {
		t.Fatalf("get team %+v, made %+v", got, team)
	}
	if _, err := s.GetTeam(ctx, "team_absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown team: %v", err)
	}
	other := must[*store.Team](t)(s.CreateTeam(ctx, "other"))
	if ts := must[[]*store.Team](t)(s.ListTeams(ctx)); len(ts) != 2 || ts[0].ID != team.ID || ts[1].ID != other.ID {
		t.Fatalf("teams %+v", ts)
	}
	key, rec, err := s.CreateAPIKey(ctx, team.ID, "ci")
	if err != nil || !strings.HasPrefix(key, "e2b_") || len(key) != 44 || rec.TeamID != team.ID || !strings.Contains(rec.Mask, "…") {
		t.Fatalf("create key %q %+v %v", key, rec, err)
	}
	if _, _, err := s.CreateAPIKey(ctx, "team_absent", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("key of an unknown team: %v", err)
	}
	k, tm, err := s.Authenticate(ctx, key)
	if err != nil || k.ID != rec.ID || tm.ID != team.ID || k.LastUsed == nil {
		t.Fatalf("authenticate: %+v %+v %v", k, tm, err)
	}
	if _, _, err := s.Authenticate(ctx, "e2b_"+strings.Repeat("0", 40)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	if err := s.RevokeAPIKey(ctx, other.ID, rec.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team revoked the key: %v", err)
	}
	for range 2 { // a second revoke does nothing
		if err := s.RevokeAPIKey(ctx, team.ID, rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Authenticate(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a revoked key authenticates: %v", err)
	}
	ks := must[[]*store.APIKey](t)(s.ListAPIKeys(ctx, team.ID))
	if len(ks) != 1 || ks[0].RevokedAt == nil || ks[0].LastUsed == nil {
		t.Fatalf("keys %+v", ks)
	}
	if _, err := s.ListAPIKeys(ctx, "team_absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("keys of an unknown team: %v", err)
	}
}

func sandbox(team, id string, started time.Time, state store.SandboxState, md map[string]string) *store.Sandbox {
	return &store.Sandbox{ID: id, TeamID: team, TemplateID: "base", State: state, Metadata: md, CPUCount: 2, MemoryMB: 512,
		StartedAt: started, EndAt: started.Add(5 * time.Minute), UpdatedAt: started}
}

func sandboxes(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	paused := base.Add(time.Minute)
	full := &store.Sandbox{ID: "sb_full", TeamID: team.ID, TemplateID: "tpl_1", Alias: "python", State: store.StatePaused,
		Metadata: map[string]string{"taskId": "t-1", "a.b[\"c\"]": "x"}, EnvVarNames: []string{"A", "B"}, CPUCount: 4, MemoryMB: 2048,
		DiskSizeMB: 5120, EnvdVersion: "0.2.0", EnvdAccessToken: "ea_token", Secure: true, AutoPause: true, AutoResume: true,
		AllowInternet: true, StartedAt: base, EndAt: base.Add(time.Hour), PausedAt: &paused, KillReason: reason.KillReason(""),
		CreatedBy: "req_1", UpdatedAt: paused}
	if err := s.InsertSandbox(ctx, full); err != nil {
		t.Fatal(err)
	}
	if got := must[*store.Sandbox](t)(s.GetSandbox(ctx, "sb_full")); !reflect.DeepEqual(got, full) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, full)
	}
	empty := sandbox(team.ID, "sb_empty", base, store.StateRunning, map[string]string{})
	empty.EnvVarNames = []string{}
	if err := s.InsertSandbox(ctx, empty); err != nil {
		t.Fatal(err)
	}
	if got := must[*store.Sandbox](t)(s.GetSandbox(ctx, "sb_empty")); got.Metadata == nil || got.EnvVarNames == nil {
		t.Fatal("empty metadata or env var names came back nil")
	}
	if err := s.InsertSandbox(ctx, full); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second insert: %v", err)
	}
	if err := s.InsertSandbox(ctx, sandbox("team_absent", "sb_x", base, store.StateRunning, nil)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a sandbox of an unknown team: %v", err)
	}
	if err := s.InsertSandbox(ctx, sandbox(team.ID, "sb_bad", base, "exploded", nil)); err == nil {
		t.Fatal("an unknown state was stored")
	}
	killed := base.Add(2 * time.Minute)
	full.State, full.KilledAt, full.KillReason, full.KillRequestID, full.KillAPIKeyID = store.StateKilled, &killed, reason.KillReason("timeout"), "system", ""
	if err := s.UpdateSandbox(ctx, full); err != nil {
		t.Fatal(err)
	}
	if got := must[*store.Sandbox](t)(s.GetSandbox(ctx, "sb_full")); !reflect.DeepEqual(got, full) {
		t.Fatalf("after update:\n got %+v\nwant %+v", got, full)
	}
	if err := s.UpdateSandbox(ctx, sandbox(team.ID, "sb_absent", base, store.StateRunning, nil)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of an unknown sandbox: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "sb_absent"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get of an unknown sandbox: %v", err)
	}
	live := must[[]*store.Sandbox](t)(s.LiveSandboxes(ctx))
	if len(live) != 1 || live[0].ID != "sb_empty" {
		t.Fatalf("live %d", len(live))
	}
	spans := must[[]store.Span](t)(s.SandboxSpans(ctx, team.ID, base.Add(-time.Hour), base.Add(time.Hour)))
	if len(spans) != 2 || !spans[0].Started.Equal(base) {
		t.Fatalf("spans %+v", spans)
	}
	if spans := must[[]store.Span](t)(s.SandboxSpans(ctx, team.ID, base.Add(3*time.Minute), base.Add(time.Hour))); len(spans) != 1 {
		t.Fatalf("a sandbox killed before the window is in it: %+v", spans)
	}
}

func ids(p *store.SandboxPage) []string {
	var out []string
	for _, sb := range p.Sandboxes {
		out = append(out, sb.ID)
	}
	return out
}

func listings(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	other := must[*store.Team](t)(s.CreateTeam(ctx, "other"))
	for i := range 7 {
		state := store.StateRunning
		if i == 5 {
			state = store.StateKilled
		}
		if i == 6 {
			state = store.StatePaused
		}
		sb := sandbox(team.ID, fmt.Sprintf("sb%d", i), base.Add(time.Duration(i)*time.Second), state, map[string]string{"n": fmt.Sprint(i % 2), "dot.key": "v"})
		if i == 3 {
			sb.Alias, sb.TemplateID = "python", "tpl_py"
		}
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	// Two of one microsecond: the id orders them.
	for _, id := range []string{"sbB", "sbA"} {
		if err := s.InsertSandbox(ctx, sandbox(other.ID, id, base, store.StateRunning, nil)); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f store.SandboxFilter) *store.SandboxPage {
		t.Helper()
		return must[*store.SandboxPage](t)(s.ListSandboxes(ctx, f))
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID})); !reflect.DeepEqual(got, []string{"sb6", "sb4", "sb3", "sb2", "sb1", "sb0"}) {
		t.Errorf("live, newest first: %v", got)
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID, Order: store.OrderAsc, States: []store.SandboxState{store.StateKilled, store.StatePaused}})); !reflect.DeepEqual(got, []string{"sb5", "sb6"}) {
		t.Errorf("killed and paused, oldest first: %v", got)
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID, Metadata: map[string]string{"n": "1", "dot.key": "v"}})); !reflect.DeepEqual(got, []string{"sb3", "sb1"}) {
		t.Errorf("metadata filter: %v", got)
	}
	if got := list(store.SandboxFilter{TeamID: team.ID, Metadata: map[string]string{"n": "1", "dot.key": "w"}}); len(got.Sandboxes) != 0 || got.Total != 0 {
		t.Errorf("a pair that does not match matched: %v", ids(got))
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID, Template: "python"})); !reflect.DeepEqual(got, []string{"sb3"}) {
		t.Errorf("template by alias: %v", got)
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID, Template: "tpl_py"})); !reflect.DeepEqual(got, []string{"sb3"}) {
		t.Errorf("template by id: %v", got)
	}
	if got := ids(list(store.SandboxFilter{TeamID: team.ID, StartedAfter: base.Add(3 * time.Second)})); !reflect.DeepEqual(got, []string{"sb6", "sb4", "sb3"}) {
		t.Errorf("started after: %v", got)
	}
	if got := ids(list(store.SandboxFilter{TeamID: other.ID, Order: store.OrderAsc})); !reflect.DeepEqual(got, []string{"sbA", "sbB"}) {
		t.Errorf("ties by id: %v", got)
	}
	t.Run("pages follow a cursor and count the whole filter", func(t *testing.T) {
		var got []string
		next := ""
		for pages := 0; ; pages++ {
			p := list(store.SandboxFilter{TeamID: team.ID, Limit: 4, Next: next})
			if want := min(pages, 1) + 6; p.Total != want { // sb_new counts from the second page on
				t.Fatalf("page %d: total %d, want %d", pages, p.Total, want)
			}
			got = append(got, ids(p)...)
			if p.Next == "" {
				break
			}
			if pages == 0 {
				// A sandbox made between two pages is not seen on the next (it is newer).
				if err := s.InsertSandbox(ctx, sandbox(team.ID, "sb_new", base.Add(time.Hour), store.StateRunning, nil)); err != nil {
					t.Fatal(err)
				}
			}
			next = p.Next
		}
		if !reflect.DeepEqual(got, []string{"sb6", "sb4", "sb3", "sb2", "sb1", "sb0"}) {
			t.Fatalf("pages: %v", got)
		}
	})
	t.Run("a forged or crossed token is invalid", func(t *testing.T) {
		for _, tok := range []string{"garbage", store.SandboxCursor{Order: store.OrderAsc, StartedAt: base, ID: "sb1"}.String()} {
			if _, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: team.ID, Next: tok}); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("token %q: %v", tok, err)
			}
		}
		if _, err := s.ListSandboxes(ctx, store.SandboxFilter{Order: "sideways"}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("unknown order: %v", err)
		}
	})
}

func sealedTokens(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	sb := sandbox(team.ID, "sb_sealed", base, store.StateRunning, nil)
	sb.EnvdAccessToken = "ea_sealed_token_value"
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got := must[*store.Sandbox](t)(s.GetSandbox(ctx, sb.ID)); got.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("token %q", got.EnvdAccessToken)
	}
	live := must[[]*store.Sandbox](t)(s.LiveSandboxes(ctx))
	if len(live) != 1 || live[0].EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("live %+v", live)
	}
}

func secrets(t *testing.T, s Engine) {
	ctx := context.Background()
	rec := &store.Secret{ID: "sec_1", TeamID: "team_a", Name: "deploy", CurrentVersion: 1, Metadata: map[string]string{"env": "ci"}, CreatedAt: base, UpdatedAt: base}
	if err := s.InsertSecret(ctx, rec, []byte("sealed-1")); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSecret(ctx, &store.Secret{ID: "sec_2", TeamID: "team_a", Name: "deploy", CurrentVersion: 1, CreatedAt: base, UpdatedAt: base}, []byte("x")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second name in a team: %v", err)
	}
	if err := s.InsertSecret(ctx, &store.Secret{ID: "sec_3", TeamID: "team_b", Name: "deploy", CurrentVersion: 1, CreatedAt: base, UpdatedAt: base}, []byte("b")); err != nil {
		t.Fatalf("the same name in another team: %v", err)
	}
	for _, ref := range []string{"sec_1", "deploy"} {
		got, err := s.GetSecret(ctx, "team_a", ref)
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("get %s: %+v %v", ref, got, err)
		}
	}
	if _, err := s.GetSecret(ctx, "team_b", "sec_1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team's secret by id: %v", err)
	}
	rec.CurrentVersion, rec.UpdatedAt, rec.Metadata = 2, base.Add(time.Minute), map[string]string{"env": "prod"}
	if err := s.AddSecretVersion(ctx, rec, []byte("sealed-2")); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSecretVersion(ctx, rec, []byte("again")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a version twice: %v", err)
	}
	if err := s.AddSecretVersion(ctx, &store.Secret{ID: "sec_1", TeamID: "team_b", CurrentVersion: 3}, []byte("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a version from another team: %v", err)
	}
	id, v, sealed, err := s.SecretValue(ctx, "team_a", "deploy")
	if err != nil || id != "sec_1" || v != 2 || string(sealed) != "sealed-2" {
		t.Fatalf("value %s %d %q %v", id, v, sealed, err)
	}
	for _, n := range []string{"b", "C", "a"} {
		if err := s.InsertSecret(ctx, &store.Secret{ID: "sec_" + n, TeamID: "team_p", Name: n, CurrentVersion: 1, CreatedAt: base, UpdatedAt: base}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, r := range must[[]*store.Secret](t)(s.ListSecrets(ctx, "team_p", "", 0)) {
		names = append(names, r.Name)
	}
	if !reflect.DeepEqual(names, []string{"C", "a", "b"}) {
		t.Fatalf("names by byte order: %v", names)
	}
	if page := must[[]*store.Secret](t)(s.ListSecrets(ctx, "team_p", "C", 1)); len(page) != 1 || page[0].Name != "a" {
		t.Fatalf("page after C: %+v", page)
	}
	if err := s.DeleteSecret(ctx, "team_a", "sec_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, "team_a", "sec_1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, _, _, err := s.SecretValue(ctx, "team_a", "deploy"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("value of a deleted secret: %v", err)
	}
}

func sessions(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	_, key, err := s.CreateAPIKey(ctx, team.ID, "console")
	if err != nil {
		t.Fatal(err)
	}
	now := base
	mk := func(hash, teamID, keyID string, expires time.Time) *store.ConsoleSession {
		sess := &store.ConsoleSession{TokenHash: hash, TeamID: teamID, TeamName: "acme", KeyID: keyID, CSRF: "csrf-" + hash,
			CreatedAt: now, Expires: expires}
		if err := s.InsertConsoleSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		return sess
	}
	live := mk("h_live", team.ID, key.ID, now.Add(time.Hour))
	mk("h_old", team.ID, key.ID, now.Add(-time.Minute))
	mk("h_admin", "", "admin", now.Add(time.Hour))
	if got, err := s.GetConsoleSession(ctx, "h_live", now); err != nil || !reflect.DeepEqual(got, live) {
		t.Fatalf("live session %+v %v", got, err)
	}
	if _, err := s.GetConsoleSession(ctx, "h_old", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired session: %v", err)
	}
	if err := s.InsertConsoleSession(ctx, &store.ConsoleSession{TokenHash: "h"}); err == nil {
		t.Fatal("a session without key and csrf was stored")
	}
	if err := s.RevokeAPIKey(ctx, team.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetConsoleSession(ctx, "h_live", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("session of a revoked key: %v", err)
	}
	if _, err := s.GetConsoleSession(ctx, "h_admin", now); err != nil {
		t.Fatalf("admin session: %v", err)
	}
	if err := s.PruneConsoleSessions(ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConsoleSessionsOfKey(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetConsoleSession(ctx, "h_admin", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted admin session: %v", err)
	}
	if err := s.DeleteConsoleSession(ctx, "h_unknown"); err != nil {
		t.Fatalf("deleting an unknown session: %v", err)
	}
}

func event(team, sandbox, id, typ string, at time.Time) *store.Event {
	return &store.Event{ID: id, Type: typ, Timestamp: at, TeamID: team, SandboxID: sandbox, TemplateID: "base",
		Metadata: map[string]string{"taskId": "t"}, RequestID: "req_" + id, Data: json.RawMessage(`{"kill_reason":"request"}`)}
}

func eventIDs(p *store.EventPage) []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.ID)
	}
	return out
}

func events(t *testing.T, s Engine) {
	ctx := context.Background()
	// Events of three days: day partitions, where an engine has them, are made as they come.
	for i := range 6 {
		typ := "sandbox.lifecycle.created"
		if i%2 == 1 {
			typ = "sandbox.lifecycle.killed"
		}
		sb := "sb_a"
		if i >= 4 {
			sb = "sb_b"
		}
		if _, err := s.InsertEvent(ctx, event("team_a", sb, fmt.Sprintf("ev%d", i), typ, base.Add(time.Duration(i)*12*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.InsertEvent(ctx, event("team_b", "sb_x", "ev_b", "sandbox.lifecycle.created", base)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertEvent(ctx, event("team_a", "sb_a", "ev0", "sandbox.lifecycle.created", base.Add(72*time.Hour))); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an id twice, on another day: %v", err)
	}
	if _, err := s.InsertEvent(ctx, &store.Event{ID: "ev_bad", Type: "t", TeamID: "team_a", Timestamp: base, Data: json.RawMessage(`[1]`)}); err == nil {
		t.Fatal("an event whose data is no object was stored")
	}
	list := func(f store.EventFilter) *store.EventPage {
		t.Helper()
		return must[*store.EventPage](t)(s.ListEvents(ctx, f))
	}
	if got := eventIDs(list(store.EventFilter{TeamID: "team_a"})); !reflect.DeepEqual(got, []string{"ev0", "ev1", "ev2", "ev3", "ev4", "ev5"}) {
		t.Errorf("oldest first: %v", got)
	}
	if got := eventIDs(list(store.EventFilter{TeamID: "team_a", Desc: true, SandboxID: "sb_a", Types: []string{"sandbox.lifecycle.killed"}})); !reflect.DeepEqual(got, []string{"ev3", "ev1"}) {
		t.Errorf("a sandbox's kills, newest first: %v", got)
	}
	if got := eventIDs(list(store.EventFilter{TeamID: "team_a", Since: base.Add(12 * time.Hour), Until: base.Add(48 * time.Hour)})); !reflect.DeepEqual(got, []string{"ev1", "ev2", "ev3"}) {
		t.Errorf("a window: %v", got)
	}
	p := list(store.EventFilter{TeamID: "team_a", Limit: 4})
	if !p.More || len(p.Events) != 4 {
		t.Fatalf("first page: %v more %v", eventIDs(p), p.More)
	}
	last := p.Events[3]
	p = list(store.EventFilter{TeamID: "team_a", Limit: 4, After: &store.EventPosition{Timestamp: last.Timestamp, ID: last.ID}})
	if got := eventIDs(p); p.More || !reflect.DeepEqual(got, []string{"ev4", "ev5"}) {
		t.Errorf("second page: %v more %v", got, p.More)
	}
	got := list(store.EventFilter{TeamID: "team_b"}).Events
	if len(got) != 1 || got[0].Metadata["taskId"] != "t" || got[0].RequestID != "req_ev_b" || !got[0].Timestamp.Equal(base) ||
		!strings.Contains(string(got[0].Data), `"kill_reason"`) {
		t.Errorf("round trip: %+v", got)
	}
	if _, err := s.ListEvents(ctx, store.EventFilter{}); err == nil {
		t.Error("a listing without a team")
	}
}

func webhooks(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	hook := &store.Webhook{ID: "wh_1", TeamID: team.ID, Name: "ci", URL: "http://198.18.0.1/hook", Events: []string{"sandbox.lifecycle.killed"},
		Secret: "whsec_signing", CreatedAt: base}
	if err := s.InsertWebhook(ctx, hook); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertWebhook(ctx, hook); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a webhook twice: %v", err)
	}
	if err := s.InsertWebhook(ctx, &store.Webhook{ID: "wh_x", TeamID: "team_absent", Events: []string{}, CreatedAt: base}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a webhook of an unknown team: %v", err)
	}
	if got := must[*store.Webhook](t)(s.GetWebhook(ctx, team.ID, "wh_1")); !reflect.DeepEqual(got, hook) {
		t.Fatalf("round trip %+v", got)
	}
	if _, err := s.GetWebhook(ctx, "team_other", "wh_1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team's webhook: %v", err)
	}
	if ws := must[[]*store.Webhook](t)(s.ListWebhooks(ctx, team.ID)); len(ws) != 1 || ws[0].Secret != "whsec_signing" {
		t.Fatalf("list %+v", ws)
	}
	n := must[int](t)(s.InsertEvent(ctx, event(team.ID, "sb", "ev_k", "sandbox.lifecycle.killed", base)))
	if n != 1 {
		t.Fatalf("a subscribed event queued %d deliveries", n)
	}
	if n := must[int](t)(s.InsertEvent(ctx, event(team.ID, "sb", "ev_c", "sandbox.lifecycle.created", base))); n != 0 {
		t.Fatalf("an unsubscribed event queued %d deliveries", n)
	}
	at, ok, err := s.NextDeliveryAt(ctx)
	if err != nil || !ok || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("next delivery %v %v %v", at, ok, err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	due := must[[]*store.DueDelivery](t)(s.ClaimDeliveries(ctx, now.Add(time.Second), now.Add(time.Minute), 10))
	if len(due) != 1 || due[0].Event.ID != "ev_k" || due[0].Webhook.Secret != "whsec_signing" || due[0].Delivery.EventType != "sandbox.lifecycle.killed" {
		t.Fatalf("claimed %+v", due)
	}
	if again := must[[]*store.DueDelivery](t)(s.ClaimDeliveries(ctx, now.Add(time.Second), now.Add(time.Minute), 10)); len(again) != 0 {
		t.Fatalf("a leased delivery was claimed twice")
	}
	if err := s.ReleaseLeases(ctx); err != nil {
		t.Fatal(err)
	}
	due = must[[]*store.DueDelivery](t)(s.ClaimDeliveries(ctx, now.Add(time.Second), now.Add(time.Minute), 10))
	if len(due) != 1 {
		t.Fatalf("a released delivery is not claimable: %d", len(due))
	}
	retry := now.Add(time.Hour)
	a := &store.DeliveryAttempt{DeliveryID: due[0].Delivery.ID, Attempt: 1, StartedAt: now, StatusCode: 503, Latency: 1500 * time.Microsecond,
		ErrorClass: "http_status", Error: "503", NextRetryAt: &retry}
	if err := s.RecordAttempt(ctx, a, store.DeliveryPending); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAttempt(ctx, a, store.DeliveryPending); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an attempt twice: %v", err)
	}
	if at, ok, _ := s.NextDeliveryAt(ctx); !ok || !at.Equal(retry) {
		t.Fatalf("next delivery after a retry %v", at)
	}
	if err := s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: due[0].Delivery.ID, Attempt: 2, StartedAt: now, StatusCode: 200}, store.DeliveryDelivered); err != nil {
		t.Fatal(err)
	}
	ds := must[[]*store.Delivery](t)(s.ListDeliveries(ctx, team.ID, "wh_1", 0))
	if len(ds) != 1 || ds[0].State != store.DeliveryDelivered || ds[0].Attempts != 2 || len(ds[0].History) != 2 ||
		ds[0].History[0].Latency != 1500*time.Microsecond || ds[0].History[0].NextRetryAt == nil || !ds[0].History[0].NextRetryAt.Equal(retry) {
		t.Fatalf("deliveries %+v", ds)
	}
	if _, ok, _ := s.NextDeliveryAt(ctx); ok {
		t.Fatal("a delivered delivery is still due")
	}
	if err := s.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: "dlv_absent", Attempt: 1}, store.DeliveryFailed); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an attempt of an unknown delivery: %v", err)
	}
	if err := s.DeleteWebhook(ctx, team.ID, "wh_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListDeliveries(ctx, team.ID, "wh_1", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deliveries of a deleted webhook: %v", err)
	}
	if err := s.DeleteWebhook(ctx, team.ID, "wh_1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
}
