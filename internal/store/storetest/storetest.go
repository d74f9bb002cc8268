// Package storetest is the store conformance suite: what every engine behind internal/store
// must do, run against each (SQLite in internal/store/sqlite, PostgreSQL in
// internal/store/postgres). A behaviour only one engine has is a bug in the other.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// Engine is what the suite covers so far.
type Engine interface {
	store.Keys
	store.Sandboxes
	store.Activity
	store.Secrets
	store.ConsoleSessions
	store.EventStore
	store.LogStore
	store.CommandStore
	store.MetricStore
	store.TraceStore
	store.RetentionStore
	store.Identity
	store.PoolSizes
	store.TemplateBuilds
	store.Records
	store.SealedSets
	store.Templates
	DownsampleSamples(ctx context.Context, sandboxID string, points int) ([]store.MetricSample, error)
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
	t.Run("log lines", func(t *testing.T) { logs(t, open(t, false)) })
	t.Run("command records", func(t *testing.T) { commands(t, open(t, false)) })
	t.Run("metric samples", func(t *testing.T) { samples(t, open(t, false)) })
	t.Run("a request's trace", func(t *testing.T) { traces(t, open(t, false)) })
	t.Run("retention", func(t *testing.T) { retention(t, open(t, false)) })
	t.Run("workload identity keys and tokens", func(t *testing.T) { identity(t, open(t, false)) })
	t.Run("warm pool sizes", func(t *testing.T) { poolSizes(t, open(t, false)) })
	t.Run("template builds and their logs", func(t *testing.T) { templateBuilds(t, open(t, false)) })
	t.Run("snapshot, volume and network records", func(t *testing.T) { records(t, open(t, false)) })
	t.Run("sealed snapshot, volume and network records", func(t *testing.T) { records(t, open(t, true)) })
	t.Run("the vault's sealed sets", func(t *testing.T) { sealedSets(t, open(t, false)) })
	t.Run("templates, their tags and their layers", func(t *testing.T) { templates(t, open(t, false)) })
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
	full.AutoPauseKind, full.PauseKind, full.Node, full.Runtime = reason.PauseFilesystem, reason.PauseFilesystem, "node-a", "runsc"
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

func line(team, sandbox string, at time.Time, level, msg string) store.LogLine {
	return store.LogLine{Time: at, SandboxID: sandbox, TeamID: team, TemplateID: "base", Level: level, Source: store.SourceProcess,
		Stream: "stdout", PID: 7, Message: msg}
}

func messages(p *store.LogPage) []string {
	var out []string
	for _, l := range p.Lines {
		out = append(out, l.Message)
	}
	return out
}

func logs(t *testing.T, s Engine) {
	ctx := context.Background()
	var batch []store.LogLine
	for i := range 10 {
		l := line("team", "sb", base.Add(time.Duration(i)*time.Millisecond), []string{"debug", "info", "warn", "error"}[i%4], fmt.Sprintf("Line %d of the BUILD", i))
		if i == 3 {
			l.RequestID, l.Stream, l.PID = "req_3", "stderr", 9
			l.Fields = map[string]any{"s": "a\"b", "n": 1.5, "b": false, "z": nil, "o": map[string]any{"k": []any{1.0, "x"}}, "dotted.key": "v"}
		}
		batch = append(batch, l)
	}
	// Two of one microsecond keep their order; a line of the next day lands in its own day.
	batch = append(batch, line("team", "sb", base.Add(20*time.Millisecond), "info", "same µs first"),
		line("team", "sb", base.Add(20*time.Millisecond), "info", "same µs second"),
		line("team", "other", base, "info", "another sandbox"), line("team_b", "sb", base, "info", "another team"))
	if err := s.InsertLogs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// A batch of its own: an engine may keep a batch's lines together until all are old.
	if err := s.InsertLogs(ctx, []store.LogLine{line("team", "sb", base.Add(30*time.Hour), "info", "tomorrow")}); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertLogs(ctx, []store.LogLine{{Message: "no sandbox"}}); err == nil {
		t.Fatal("a line without sandbox and team was stored")
	}
	q := func(q store.LogQuery) *store.LogPage {
		t.Helper()
		q.TeamID = "team"
		return must[*store.LogPage](t)(s.QueryLogs(ctx, q))
	}
	all := q(store.LogQuery{SandboxID: "sb"})
	if got := messages(all); len(got) != 13 || got[10] != "same µs first" || got[11] != "same µs second" || got[12] != "tomorrow" {
		t.Fatalf("all lines: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Backward: true, Limit: 2})); !reflect.DeepEqual(got, []string{"tomorrow", "same µs second"}) {
		t.Errorf("newest first: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", MinLevel: "error"})); !reflect.DeepEqual(got, []string{"Line 3 of the BUILD", "Line 7 of the BUILD"}) {
		t.Errorf("errors: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Search: `line "OF THE build" 5`})); !reflect.DeepEqual(got, []string{"Line 5 of the BUILD"}) {
		t.Errorf("search ignoring ASCII case, with a phrase: %q", got)
	}
	if got := messages(q(store.LogQuery{Search: "another"})); !reflect.DeepEqual(got, []string{"another sandbox"}) {
		t.Errorf("every sandbox of the team, no other team's: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxIn: []string{}})); len(got) != 0 {
		t.Errorf("an empty SandboxIn keeps nothing: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", RequestID: "req_3", Stream: "stderr", PID: 9, Source: store.SourceProcess})); len(got) != 1 {
		t.Errorf("request, stream, pid, source: %q", got)
	}
	for k, v := range map[string]string{"s": "a\"b", "n": "1.5", "b": "false", "z": "null", "o": `{"k":[1,"x"]}`, "dotted.key": "v"} {
		if got := messages(q(store.LogQuery{SandboxID: "sb", Fields: map[string]string{k: v}})); len(got) != 1 {
			t.Errorf("field %s=%s matched %q", k, v, got)
		}
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Fields: map[string]string{"s": `"a\"b"`}})); len(got) != 0 {
		t.Error("a string field matched its JSON")
	}
	three := all.Lines[3]
	if !reflect.DeepEqual(three.Fields["o"], map[string]any{"k": []any{1.0, "x"}}) || three.Fields["z"] != nil || three.Level != "error" {
		t.Errorf("fields round trip: %+v", three)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Cursor: base.Add(8 * time.Millisecond), Limit: 2})); !reflect.DeepEqual(got, []string{"Line 8 of the BUILD", "Line 9 of the BUILD"}) {
		t.Errorf("a millisecond cursor, forward: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Cursor: base.Add(time.Millisecond), Backward: true})); !reflect.DeepEqual(got, []string{"Line 1 of the BUILD", "Line 0 of the BUILD"}) {
		t.Errorf("a millisecond cursor, backward: %q", got)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb", Since: base.Add(2 * time.Millisecond), Until: base.Add(4 * time.Millisecond)})); len(got) != 2 {
		t.Errorf("since and until: %q", got)
	}
	t.Run("pages continue after a position without repeats", func(t *testing.T) {
		var got []string
		var after *store.LogPosition
		for {
			p := q(store.LogQuery{SandboxID: "sb", Limit: 5, After: after})
			got = append(got, messages(p)...)
			if p.Next == nil {
				if p.Last == nil || p.First == nil {
					t.Fatal("a page without its first and last positions")
				}
				break
			}
			after = p.Next
		}
		if !reflect.DeepEqual(got, messages(all)) {
			t.Errorf("paged %q", got)
		}
	})
	if _, err := s.QueryLogs(ctx, store.LogQuery{TeamID: "team", MinLevel: "loud"}); err == nil {
		t.Error("an unknown level")
	}
	if _, err := s.QueryLogs(ctx, store.LogQuery{}); err == nil {
		t.Error("a query without a team")
	}
	n, err := s.PruneLogs(ctx, base.Add(24*time.Hour))
	if err != nil || n != 14 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if got := messages(q(store.LogQuery{SandboxID: "sb"})); !reflect.DeepEqual(got, []string{"tomorrow"}) {
		t.Errorf("after the prune: %q", got)
	}
}

func commands(t *testing.T, s Engine) {
	ctx := context.Background()
	start := &store.CommandRecord{SandboxID: "sb", TeamID: "team", TemplateID: "base", PID: 42, Tag: "build", RequestID: "req_start",
		User: "user", Command: "/bin/bash", Args: []string{"-c", "make"}, Cwd: "/home/user", StartedAt: base}
	if err := s.UpsertCommand(ctx, start); err != nil {
		t.Fatal(err)
	}
	got := must[*store.CommandRecord](t)(s.GetCommand(ctx, "sb", 42, base))
	if got.EndCause != "" || !got.EndedAt.IsZero() || got.ExitCode != nil || !reflect.DeepEqual(got.Args, start.Args) {
		t.Fatalf("a running record: %+v", got)
	}
	code := 2
	end := &store.CommandRecord{SandboxID: "sb", PID: 42, StartedAt: base, EndedAt: base.Add(1500 * time.Millisecond), ExitCode: &code,
		EndCause: reason.EndExited, StdoutBytes: 10, StdoutHead: "out", Truncated: true, Redactions: map[string]int{"api_key": 1}}
	if err := s.UpsertCommand(ctx, end); err != nil {
		t.Fatal(err)
	}
	got = must[*store.CommandRecord](t)(s.GetCommand(ctx, "sb", 42, time.Time{}))
	if got.Command != "/bin/bash" || got.Tag != "build" || *got.ExitCode != 2 || got.Duration != 1500*time.Millisecond ||
		got.EndCause != reason.EndExited || !got.Truncated || got.Redactions["api_key"] != 1 || got.StdoutHead != "out" {
		t.Fatalf("merged record: %+v", got)
	}
	for i := range 5 { // pid 7 again and again: the start time tells them apart
		if err := s.UpsertCommand(ctx, &store.CommandRecord{SandboxID: "sb", TeamID: "team", PID: 7, RequestID: "req_7", StartedAt: base.Add(time.Duration(i+1) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := must[*store.CommandRecord](t)(s.GetCommand(ctx, "sb", 7, time.Time{})); !got.StartedAt.Equal(base.Add(5 * time.Second)) {
		t.Fatalf("latest of a pid: %v", got.StartedAt)
	}
	var seen []int
	cursor := ""
	for {
		p := must[*store.CommandPage](t)(s.ListCommands(ctx, "sb", 4, cursor))
		for _, c := range p.Commands {
			seen = append(seen, c.PID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if !reflect.DeepEqual(seen, []int{7, 7, 7, 7, 7, 42}) {
		t.Errorf("newest first, paged: %v", seen)
	}
	if _, err := s.ListCommands(ctx, "sb", 0, "garbage"); !errors.Is(err, store.ErrBadCursor) {
		t.Errorf("a forged cursor: %v", err)
	}
	if n := must[int64](t)(s.CloseOpenCommands(ctx, "sb", base.Add(10*time.Second), "timeout")); n != 5 {
		t.Errorf("closed %d open records", n)
	}
	if got := must[*store.CommandRecord](t)(s.GetCommand(ctx, "sb", 7, base.Add(time.Second))); got.EndCause != reason.EndSandboxKilled ||
		got.KillReason != "timeout" || got.Duration != 9*time.Second {
		t.Errorf("a closed record: %+v", got)
	}
	if n := must[int64](t)(s.PruneCommands(ctx, base.Add(5*time.Second))); n != 1 {
		t.Errorf("pruned %d records that ended before", n)
	}
	if _, err := s.GetCommand(ctx, "sb", 42, base); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a pruned record: %v", err)
	}
	if err := s.UpsertCommand(ctx, &store.CommandRecord{SandboxID: "sb", PID: 1, StartedAt: base, EndCause: "exploded"}); err == nil {
		t.Error("an unknown end cause was stored")
	}
}

func samples(t *testing.T, s Engine) {
	ctx := context.Background()
	var in []store.MetricSample
	for i := range 10 {
		in = append(in, store.MetricSample{SandboxID: "sb", TeamID: "team", Time: base.Add(time.Duration(i*5) * time.Second), CPUCount: 2,
			CPUUsedPct: float64(i * 10), MemUsed: uint64(i) << 20, MemTotal: 512 << 20, NetRxBytes: uint64(i * 100), DiskTotal: math.MaxUint64})
	}
	in = append(in, store.MetricSample{SandboxID: "sb2", TeamID: "team", Time: base, MemUsed: 1})
	if err := s.InsertSamples(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSamples(ctx, []store.MetricSample{{SandboxID: "sb", TeamID: "team", Time: base, MemUsed: 99}}); err != nil {
		t.Fatal(err)
	}
	got := must[[]store.MetricSample](t)(s.QuerySamples(ctx, "sb", base, base.Add(10*time.Second)))
	if len(got) != 3 || got[0].MemUsed != 99 || got[2].NetRxBytes != 200 || got[1].DiskTotal != math.MaxInt64 {
		t.Fatalf("a window, the replaced sample first: %+v", got)
	}
	if all := must[[]store.MetricSample](t)(s.QuerySamples(ctx, "sb", time.Time{}, time.Time{})); len(all) != 10 {
		t.Fatalf("unbounded: %d", len(all))
	}
	latest := must[[]store.MetricSample](t)(s.LatestSamples(ctx, "team", []string{"sb", "sb2", "sb_none"}))
	if len(latest) != 2 {
		t.Fatalf("latest: %+v", latest)
	}
	for _, l := range latest {
		if l.SandboxID == "sb" && !l.Time.Equal(base.Add(45*time.Second)) {
			t.Errorf("latest of sb at %v", l.Time)
		}
	}
	if other := must[[]store.MetricSample](t)(s.LatestSamples(ctx, "team_b", []string{"sb"})); len(other) != 0 {
		t.Error("another team reads the samples")
	}
	down := must[[]store.MetricSample](t)(s.DownsampleSamples(ctx, "sb", 5))
	if len(down) != 5 || down[0].CPUUsedPct != 5 || down[4].MemUsed != 9<<20 {
		t.Fatalf("downsampled: %+v", down)
	}
	if err := s.PruneSamples(ctx, base.Add(40*time.Second)); err != nil {
		t.Fatal(err)
	}
	if left := must[[]store.MetricSample](t)(s.QuerySamples(ctx, "sb", time.Time{}, time.Time{})); len(left) != 2 {
		t.Fatalf("after the prune: %d", len(left))
	}
}

func traces(t *testing.T, s Engine) {
	ctx := context.Background()
	l := line("team", "sb", base, "info", "traced")
	l.RequestID = "req_t"
	if err := s.InsertLogs(ctx, []store.LogLine{l, line("team", "sb", base, "info", "not traced")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertEvent(ctx, event("team", "sb", "ev_t", "sandbox.lifecycle.killed", base)); err != nil {
		t.Fatal(err)
	}
	e := event("team", "sb", "ev_t2", "sandbox.lifecycle.created", base)
	e.RequestID = "req_t"
	if _, err := s.InsertEvent(ctx, e); err != nil {
		t.Fatal(err)
	}
	for i, c := range []*store.CommandRecord{{RequestID: "req_t"}, {SignalRequestID: "req_t"}, {RequestID: "req_other"}} {
		c.SandboxID, c.TeamID, c.PID, c.StartedAt = "sb", "team", i+1, base
		if err := s.UpsertCommand(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if got := must[[]store.LogLine](t)(s.TraceLogs(ctx, "team", "req_t", 0)); len(got) != 1 || got[0].Message != "traced" {
		t.Errorf("trace logs %+v", got)
	}
	if got := must[[]*store.Event](t)(s.TraceEvents(ctx, "team", "req_t", 0)); len(got) != 1 || got[0].ID != "ev_t2" {
		t.Errorf("trace events %+v", got)
	}
	if got := must[[]*store.CommandRecord](t)(s.TraceCommands(ctx, "team", "req_t", 0)); len(got) != 2 {
		t.Errorf("trace commands %d", len(got))
	}
	if got := must[[]store.LogLine](t)(s.TraceLogs(ctx, "team_b", "req_t", 0)); len(got) != 0 {
		t.Error("another team traces the request")
	}
}

func retention(t *testing.T, s Engine) {
	ctx := context.Background()
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	if err := s.InsertWebhook(ctx, &store.Webhook{ID: "wh", TeamID: team.ID, Events: []string{"sandbox.lifecycle.killed"}, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	old := base.Add(-72 * time.Hour)
	for i := range 6 {
		typ := "sandbox.lifecycle.created"
		if i == 0 {
			typ = "sandbox.lifecycle.killed" // its delivery stays pending: the event stays
		}
		if _, err := s.InsertEvent(ctx, event(team.ID, "sb", fmt.Sprintf("ev%d", i), typ, old.Add(time.Duration(i)*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.InsertEvent(ctx, event(team.ID, "sb", "ev_new", "sandbox.lifecycle.created", base)); err != nil {
		t.Fatal(err)
	}
	var lines []store.LogLine
	for i := range 30 {
		lines = append(lines, line(team.ID, "sb", old.Add(time.Duration(i)*time.Minute), "info", "old"))
	}
	if err := s.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertLogs(ctx, []store.LogLine{line(team.ID, "sb", base, "info", "new")}); err != nil {
		t.Fatal(err)
	}
	u := must[store.Usage](t)(s.Usage(ctx, store.DatasetEvents, true))
	if u.Rows != 7 || !u.Oldest.Equal(old) || u.Bytes <= 0 {
		t.Fatalf("events usage %+v", u)
	}
	if u := must[store.Usage](t)(s.Usage(ctx, store.DatasetLogs, false)); u.Rows != 31 {
		t.Fatalf("log usage %+v", u)
	}
	var pruned int64
	for {
		n := must[int64](t)(s.PruneBefore(ctx, store.DatasetEvents, base.Add(-time.Hour), 2))
		pruned += n
		if n < 2 {
			break
		}
	}
	if pruned != 5 {
		t.Errorf("pruned %d events; want 5 (the pending one and the new one stay)", pruned)
	}
	page := must[*store.EventPage](t)(s.ListEvents(ctx, store.EventFilter{TeamID: team.ID}))
	if got := eventIDs(page); !reflect.DeepEqual(got, []string{"ev0", "ev_new"}) {
		t.Errorf("events left %v", got)
	}
	pruned = 0
	for {
		n := must[int64](t)(s.PruneBefore(ctx, store.DatasetLogs, base.Add(-time.Hour), 100))
		pruned += n
		if n < 100 {
			break
		}
	}
	if pruned != 30 {
		t.Errorf("pruned %d lines", pruned)
	}
	for i := range 5 {
		if err := s.InsertSamples(ctx, []store.MetricSample{{SandboxID: "sb", TeamID: team.ID, Time: base.Add(time.Duration(i) * time.Second)}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := must[int64](t)(s.PruneOverCap(ctx, store.DatasetSamples, 2, 10)); n != 3 {
		t.Errorf("over the cap, pruned %d samples", n)
	}
	left := must[[]store.MetricSample](t)(s.QuerySamples(ctx, "sb", time.Time{}, time.Time{}))
	if len(left) != 2 || !left[0].Time.Equal(base.Add(3*time.Second)) {
		t.Errorf("the oldest go first: %+v", left)
	}
	if _, err := s.Usage(ctx, "nonsense", false); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("an unknown dataset: %v", err)
	}
}

func identity(t *testing.T, s Engine) {
	ctx := context.Background()
	for i, id := range []string{"k1", "k2"} {
		if err := s.InsertSigningKey(ctx, &store.SigningKey{ID: id, Algorithm: "ES256", Sealed: []byte("sealed-" + id), CreatedAt: base.Add(time.Duration(i) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InsertSigningKey(ctx, &store.SigningKey{ID: "k1", Algorithm: "ES256", Sealed: []byte("x"), CreatedAt: base.Add(3 * time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a key id twice: %v", err)
	}
	keys := must[[]*store.SigningKey](t)(s.SigningKeys(ctx))
	if len(keys) != 2 || keys[0].ID != "k2" || keys[0].RetiredAt != nil || keys[1].RetiredAt == nil || !keys[1].RetiredAt.Equal(base.Add(time.Hour)) ||
		string(keys[1].Sealed) != "sealed-k1" {
		t.Fatalf("keys %+v", keys)
	}
	if err := s.DeleteSigningKeys(ctx, base.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if keys := must[[]*store.SigningKey](t)(s.SigningKeys(ctx)); len(keys) != 1 || keys[0].ID != "k2" {
		t.Fatalf("after deleting the retired: %+v", keys)
	}
	team := must[*store.Team](t)(s.CreateTeam(ctx, "acme"))
	for _, id := range []string{"sb_live", "sb_dead"} {
		sb := sandbox(team.ID, id, base, store.StateRunning, nil)
		if id == "sb_dead" {
			sb.State = store.StateKilled
		}
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIdentityTokens(ctx, id, []store.IdentityToken{{Name: "web", Audience: "a", TokenType: "JWT-SVID"}, {Name: "aws", Audience: "sts", TokenType: "JWT-SVID"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutIdentityTokens(ctx, "sb_live", []store.IdentityToken{{Name: "web", Audience: "b", TokenType: "JWT-SVID"}}); err != nil {
		t.Fatal(err)
	}
	if got := must[[]store.IdentityToken](t)(s.IdentityTokens(ctx, "sb_live")); len(got) != 1 || got[0].Audience != "b" || got[0].SandboxID != "sb_live" {
		t.Fatalf("a put replaces: %+v", got)
	}
	if got := must[[]store.IdentityToken](t)(s.IdentityTokens(ctx, "sb_dead")); len(got) != 2 || got[0].Name != "aws" {
		t.Fatalf("by name: %+v", got)
	}
	if tok := must[*store.IdentityToken](t)(s.GetIdentityToken(ctx, "sb_live", "web")); tok.Audience != "b" {
		t.Fatalf("get %+v", tok)
	}
	if _, err := s.GetIdentityToken(ctx, "sb_live", "aws"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unregistered name: %v", err)
	}
	if ids := must[[]string](t)(s.DeleteKilledIdentityTokens(ctx)); !reflect.DeepEqual(ids, []string{"sb_dead"}) {
		t.Fatalf("forgot %v", ids)
	}
	if err := s.DeleteIdentityTokens(ctx, "sb_live"); err != nil {
		t.Fatal(err)
	}
	if got := must[[]store.IdentityToken](t)(s.IdentityTokens(ctx, "sb_live")); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}

func poolSizes(t *testing.T, db Engine) {
	ctx := context.Background()
	if got, err := db.PoolSizes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("a new store's pool sizes: %v %v", got, err)
	}
	for _, set := range []struct {
		name string
		size int
	}{{"base", 3}, {"python", 1}, {"base", 0}} {
		if err := db.SetPoolSize(ctx, set.name, set.size); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := db.PoolSizes(ctx); err != nil || len(got) != 2 || got["base"] != 0 || got["python"] != 1 {
		t.Errorf("pool sizes %v %v; want base 0 (the last word), python 1", got, err)
	}
	for _, bad := range []struct {
		name string
		size int
	}{{"", 1}, {"base", -1}} {
		if err := db.SetPoolSize(ctx, bad.name, bad.size); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("SetPoolSize(%q, %d): %v, want invalid", bad.name, bad.size, err)
		}
	}
}
