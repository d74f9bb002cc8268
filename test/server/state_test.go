package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestServerOnPostgres runs a whole `cove server --state postgres://…` on a real PostgreSQL:
// sandboxes, their commands, logs and events, and a webhook, all kept in the database (no
// SQLite file appears in the data dir), the secrets among them sealed with the data dir's
// vault key; a restart on the same database and data dir finds every record, adopts the
// running sandbox and opens the sealed secrets again.
func TestServerOnPostgres(t *testing.T) {
	covetest.Skip(t)
	pg := pgtest.StartFor(t) // skips, saying why, without PostgreSQL 15's binaries or root
	dsn := pg.NewDatabase(t)
	// The test server trusts loopback, so any password is accepted: it is here to be seen
	// never to reach the logs.
	const password = "pg-state-hunter2"
	withPassword := strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:"+password+"@", 1)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep", // the restart below adopts
		Args: []string{"--state", withPassword, "--webhook-allow-net", "127.0.0.0/8"}}) // the receiver is on the loopback
	ctx := context.Background()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	rcv := &receiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	secret := "pg-state-webhook-secret"
	wh, err := c.AddWebhook(ctx, cove.WebhookRequest{Name: "pg", URL: hook.URL, Events: []string{cove.EventSandboxKilled}, Secret: &secret})
	if err != nil {
		t.Fatalf("add webhook: %v", err)
	}

	killed, err := c.Create(ctx, cove.SandboxOptions{Metadata: map[string]string{"task": "pg-killed"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, s.Logs())
	}
	if res, err := killed.Commands.Run(ctx, "echo from-postgres"); err != nil || res.Stdout != "from-postgres\n" {
		t.Fatalf("run: %+v %v", res, err)
	}
	live, err := c.Create(ctx, cove.SandboxOptions{Metadata: map[string]string{"task": "pg-live"}, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Kill(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("cove apikey with the server's --state makes a key the server takes", func(t *testing.T) {
		out, err := exec.Command(covetest.Binary(t), "apikey", "create", "from-cli", "--data", s.DataDir, "--state", withPassword).Output()
		if err != nil {
			t.Fatalf("cove apikey create: %v", err)
		}
		key, _, _ := strings.Cut(string(out), "\n")
		if ids := listed(t, cove.NewClient(cove.Config{APIURL: s.URL, APIKey: key})); !slices.Contains(ids, live.ID) {
			t.Errorf("the CLI's key %q lists %v, not the team's %s", key, ids, live.ID)
		}
		if _, err := os.Stat(filepath.Join(s.DataDir, "cove.db")); !os.IsNotExist(err) {
			t.Errorf("the CLI made a cove.db beside a server on PostgreSQL: %v", err)
		}
	})
	t.Run("the running sandbox is listed", func(t *testing.T) {
		ids := listed(t, c)
		if !slices.Contains(ids, live.ID) || slices.Contains(ids, killed.ID) {
			t.Errorf("listed %v; want %s and not the killed %s", ids, live.ID, killed.ID)
		}
	})
	t.Run("the records live in PostgreSQL, not in a SQLite file", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(s.DataDir, "cove.db")); !os.IsNotExist(err) {
			t.Errorf("the data dir has a cove.db: %v", err)
		}
		if n := count(t, dsn, `SELECT count(*) FROM sandboxes WHERE id IN ($1, $2)`, killed.ID, live.ID); n != 2 {
			t.Errorf("%d of the two sandboxes in the database", n)
		}
	})
	t.Run("the envd token and the webhook secret are sealed in the database", func(t *testing.T) {
		if !live.Secure {
			t.Fatal("the sandbox has no envd token to seal")
		}
		for _, q := range []struct{ query, id string }{
			{`SELECT envd_access_token FROM sandboxes WHERE id = $1`, live.ID},
			{`SELECT secret FROM webhooks WHERE id = $1`, wh.ID},
		} {
			stored := column(t, dsn, q.query, q.id)
			if !strings.HasPrefix(stored, store.SealedPrefix) || strings.Contains(stored, secret) {
				t.Errorf("%s of %s is kept as %q", q.query, q.id, stored)
			}
		}
	})
	t.Run("the DSN's password is never logged", func(t *testing.T) {
		if strings.Contains(s.Logs(), password) {
			t.Errorf("the server's output has the password")
		}
		if !strings.Contains(s.Logs(), "state in PostgreSQL at postgres://postgres:xxxxx@") {
			t.Errorf("the server does not say where its state is:\n%.2000s", s.Logs())
		}
	})

	s.Stop()
	s.Restart()
	c = cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	t.Run("after a restart the killed sandbox's events, commands and logs are there", func(t *testing.T) {
		evs, err := c.Events(ctx, killed.ID, cove.EventOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if !slices.Contains(types, cove.EventSandboxCreated) || !slices.Contains(types, cove.EventSandboxKilled) {
			t.Errorf("events %v", types)
		}
		page, err := c.Commands(ctx, killed.ID, "")
		if err != nil || len(page.Commands) == 0 || !strings.Contains(page.Commands[0].Command+" "+strings.Join(page.Commands[0].Args, " "), "echo from-postgres") {
			t.Errorf("commands %+v %v", page, err)
		}
		logs, err := c.Logs(ctx, killed.ID, cove.LogQuery{})
		if err != nil || len(logs.Logs) == 0 {
			t.Errorf("logs %+v %v", logs, err)
		}
	})
	// Connect hands out the token the store unsealed; envd, started before the restart,
	// answers only to the one it was given.
	t.Run("after a restart the running sandbox is adopted and answers to its unsealed token", func(t *testing.T) {
		if ids := listed(t, c); !slices.Contains(ids, live.ID) {
			t.Fatalf("listed %v; want %s", ids, live.ID)
		}
		again, err := c.Connect(ctx, live.ID, 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := again.Commands.Run(ctx, "echo adopted"); err != nil || res.Stdout != "adopted\n" {
			t.Errorf("run: %+v %v", res, err)
		}
	})
	t.Run("after a restart the webhook's sealed secret still signs deliveries", func(t *testing.T) {
		if err := c.Kill(ctx, live.ID); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if signedKill(rcv, live.ID, secret) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no delivery of %s's kill signed with the webhook's secret", live.ID)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// signedKill reports whether rcv was sent the kill of sandbox id signed with secret.
func signedKill(rcv *receiver, id, secret string) bool {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for i, b := range rcv.bodies {
		if strings.Contains(string(b), id) && strings.Contains(string(b), cove.EventSandboxKilled) && rcv.sigs[i] == events.Sign(secret, b) {
			return true
		}
	}
	return false
}

// listed lists the running sandboxes' ids.
func listed(t *testing.T, c *cove.Client) []string {
	t.Helper()
	var ids []string
	for info, err := range c.List(context.Background(), cove.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.SandboxID)
	}
	return ids
}

// column reads one text value straight from the database, past the store.
func column(t *testing.T, dsn, query string, args ...any) string {
	t.Helper()
	var v string
	queryRow(t, dsn, query, args, &v)
	return v
}

func count(t *testing.T, dsn, query string, args ...any) int {
	t.Helper()
	var n int
	queryRow(t, dsn, query, args, &n)
	return n
}

func queryRow(t *testing.T, dsn, query string, args []any, dest any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, query, args...).Scan(dest); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
