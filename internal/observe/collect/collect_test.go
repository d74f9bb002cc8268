package collect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/observe/logs"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
)

type lines struct {
	mu sync.Mutex
	l  []store.LogLine
}

func (s *lines) Add(l store.LogLine) { s.mu.Lock(); s.l = append(s.l, l); s.mu.Unlock() }

const secret = "sk-live-0123456789abcdef" // an env value Cove was told is secret

func setup(t *testing.T) (*Collector, *lines, *sqlite.DB) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	team, err := db.CreateTeam(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	got := &lines{}
	c := New(Labels{SandboxID: "isb1", TeamID: team.ID, TemplateID: "base"},
		redact.New(redact.Options{Secrets: []string{secret}}), got, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return c, got, db
}

func jsonl(v ...any) string {
	var b strings.Builder
	for _, x := range v {
		j, _ := json.Marshal(x)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestCollectorLabelsRedactsAndRecords(t *testing.T) {
	c, got, db := setup(t)
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	emoji := strings.Repeat("é", 3000) // two bytes each: cuts land mid-rune unless careful
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		map[string]any{"kind": "command_start", "pid": 42, "request_id": "req-1", "user": "user", "command": "/bin/bash",
			"args": []string{"-c", "curl -H 'Authorization: Bearer abcdef0123456789' x"}, "cwd": "/home/user", "started_at": start},
		map[string]any{"kind": "output", "ts": time.Now(), "pid": 42, "stream": "stdout", "request_id": "req-1", "line": "token is " + secret},
		map[string]any{"kind": "output", "ts": time.Now(), "pid": 42, "stream": "stdout", "request_id": "req-1",
			"line": `{"level":"error","msg":"upload failed","taskId":"forged","attempt":3}`},
		map[string]any{"kind": "command_end", "pid": 42, "request_id": "req-1", "started_at": start, "ended_at": time.Now(),
			"duration_ms": 1000, "exit_code": 1, "end_cause": "exited", "stdout_bytes": 20000, "stderr_bytes": 0,
			"stdout_head": secret + emoji, "stdout_tail": emoji + secret, "head_bytes": 1001, "tail_bytes": 1001},
	)))
	c.Stderr(strings.NewReader(jsonl(map[string]any{"time": time.Now().Format(time.RFC3339Nano), "level": "WARN",
		"msg": "stream end", "request_id": "req-1", "process.pid": 42, "stream.end": "deadline"})), nil)

	t.Run("every line carries the host's labels, and no copy of the sandbox's metadata", func(t *testing.T) {
		if len(got.l) != 3 {
			t.Fatalf("%d lines stored, want 3", len(got.l))
		}
		for i, l := range got.l {
			_, copied := l.Fields["sandbox.id"]
			if l.SandboxID != "isb1" || l.TemplateID != "base" || copied || (i != 1 && l.Fields["taskId"] != nil) {
				t.Errorf("line %q labels: sandbox %q template %q fields %v", l.Message, l.SandboxID, l.TemplateID, l.Fields)
			}
		}
	})
	t.Run("a JSON output line is parsed into fields with its level", func(t *testing.T) {
		l := got.l[1]
		if l.Level != "error" || l.Fields["attempt"] != float64(3) || l.Source != store.SourceProcess || l.PID != 42 || l.RequestID != "req-1" {
			t.Errorf("parsed line: %+v", l)
		}
	})
	t.Run("envd's own lines keep their level, message, request id and pid", func(t *testing.T) {
		l := got.l[2]
		if l.Level != "warn" || l.Message != "stream end" || l.RequestID != "req-1" || l.PID != 42 || l.Fields["stream.end"] != "deadline" {
			t.Errorf("envd line: %+v", l)
		}
	})
	t.Run("no secret reaches a stored line or record", func(t *testing.T) {
		for _, l := range got.l {
			if strings.Contains(l.Message, secret) {
				t.Errorf("secret in line %q", l.Message)
			}
		}
		rec, err := db.GetCommand(context.Background(), "isb1", 42, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(append(rec.Args, rec.StdoutHead, rec.StdoutTail), " ")
		if strings.Contains(all, secret) || strings.Contains(all, "abcdef0123456789") {
			t.Errorf("secret in record: %s", all)
		}
		if rec.Redactions["exact"] < 1 {
			t.Errorf("redaction counts %v", rec.Redactions)
		}
	})
	t.Run("the record keeps a head and tail cut to size on UTF-8 boundaries", func(t *testing.T) {
		rec, _ := db.GetCommand(context.Background(), "isb1", 42, time.Time{})
		if len(rec.StdoutHead) > 1001 || len(rec.StdoutTail) > 1001 || !rec.Truncated || rec.EndCause != "exited" || *rec.ExitCode != 1 {
			t.Errorf("record: head %d tail %d truncated %v cause %q", len(rec.StdoutHead), len(rec.StdoutTail), rec.Truncated, rec.EndCause)
		}
		for _, s := range []string{rec.StdoutHead, rec.StdoutTail} {
			if !strings.HasPrefix(strings.TrimPrefix(s, "[REDACTED:exact]"), "é") && !strings.HasSuffix(s, "é") && !strings.HasSuffix(s, "]") {
				t.Errorf("cut not on a rune: %q…", s[:10])
			}
			if strings.ToValidUTF8(s, "?") != s {
				t.Error("invalid UTF-8 after the cut")
			}
		}
	})
}

func TestCommandsStillRunningAtTheKillEndAsSandboxKilled(t *testing.T) {
	c, _, db := setup(t)
	start := time.Now().UTC().Truncate(time.Microsecond)
	c.Stdout(context.Background(), strings.NewReader(jsonl(map[string]any{"kind": "command_start", "pid": 7, "request_id": "r", "user": "user",
		"command": "sleep", "args": []string{"100"}, "cwd": "/", "started_at": start})))
	c.SandboxKilled(context.Background(), "timeout", time.Now())
	rec, err := db.GetCommand(context.Background(), "isb1", 7, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.EndCause != reason.EndSandboxKilled || rec.KillReason != "timeout" || rec.EndedAt.IsZero() {
		t.Errorf("record: %+v", rec)
	}
}

type ctxKey struct{}

// seenCtx stores command records in the real store and notes the context each came with.
type seenCtx struct {
	store.CommandStore
	mu   sync.Mutex
	vals []any
}

func (s *seenCtx) UpsertCommand(ctx context.Context, cr *store.CommandRecord) error {
	s.mu.Lock()
	s.vals = append(s.vals, ctx.Value(ctxKey{}))
	s.mu.Unlock()
	return s.CommandStore.UpsertCommand(ctx, cr)
}

// collector returns a collector of a new sandbox of a new team in db.
func collector(t *testing.T, db *sqlite.DB, sandbox string, logs Logs, commands store.CommandStore) *Collector {
	t.Helper()
	team, err := db.CreateTeam(context.Background(), "team-of-"+sandbox)
	if err != nil {
		t.Fatal(err)
	}
	return New(Labels{SandboxID: sandbox, TeamID: team.ID, TemplateID: "base"}, redact.New(redact.Options{}), logs, commands,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestCommandRecordsAreStoredUnderTheCallersContext(t *testing.T) {
	_, got, db := setup(t)
	seen := &seenCtx{CommandStore: db}
	c := collector(t, db, "isb2", got, seen)
	ctx := context.WithValue(context.Background(), ctxKey{}, "the caller's")
	now := time.Now().UTC()
	c.Stdout(ctx, strings.NewReader(jsonl(
		map[string]any{"kind": "command_start", "pid": 1, "user": "user", "command": "a", "started_at": now},
		map[string]any{"kind": "command_end", "pid": 1, "started_at": now, "ended_at": now, "end_cause": "exited"},
		map[string]any{"kind": "command_start", "pid": 2, "user": "user", "command": "b", "started_at": now})))
	c.SandboxKilled(ctx, "timeout", now)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.vals) != 4 {
		t.Fatalf("%d records stored, want 4 (two starts, an end, a kill)", len(seen.vals))
	}
	for i, v := range seen.vals {
		if v != "the caller's" {
			t.Errorf("record %d stored under a context without the caller's values: %v", i, v)
		}
	}
}

func TestACancelledContextStopsTheStoreNotTheCollector(t *testing.T) {
	_, got, db := setup(t)
	c := collector(t, db, "isb3", got, &seenCtx{CommandStore: db})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Now().UTC()
	c.Stdout(ctx, strings.NewReader(jsonl(
		map[string]any{"kind": "command_start", "pid": 1, "user": "user", "command": "a", "started_at": now},
		map[string]any{"kind": "output", "ts": now, "pid": 1, "stream": "stdout", "line": "still collected"})))
	if _, err := db.GetCommand(context.Background(), "isb3", 1, time.Time{}); err == nil {
		t.Error("a record was stored under a cancelled context")
	}
	// The same lines under a live context are stored: the check above is not vacuous.
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		map[string]any{"kind": "command_start", "pid": 1, "user": "user", "command": "a", "started_at": now})))
	if _, err := db.GetCommand(context.Background(), "isb3", 1, time.Time{}); err != nil {
		t.Errorf("not stored under a live context: %v", err)
	}
	if r := c.Recent(); len(r) != 1 || !strings.Contains(r[0], "still collected") {
		t.Errorf("output after a failed store: %v", r)
	}
}

func TestBinaryHeadsAndDroppedBytesInTheRecord(t *testing.T) {
	tests := []struct {
		name          string
		end           map[string]any
		wantHead      string
		wantTruncated bool
	}{
		{"a binary head is kept as base64, cut to the head size in bytes",
			map[string]any{"stdout_binary": true, "stdout_head": base64.StdEncoding.EncodeToString([]byte("\x00\x01\x02\x03\x04\x05")), "stdout_bytes": 6, "head_bytes": 4, "tail_bytes": 4},
			BinaryPrefix + base64.StdEncoding.EncodeToString([]byte("\x00\x01\x02\x03")), false},
		{"bytes dropped by a budget mark the record truncated",
			map[string]any{"stdout_head": "a\n", "stdout_bytes": 2, "head_bytes": 4096, "tail_bytes": 4096, "bytes_dropped": 100},
			"a\n", true},
		{"a whole text output is not truncated",
			map[string]any{"stdout_head": "a\n", "stdout_bytes": 2, "head_bytes": 4096, "tail_bytes": 4096},
			"a\n", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, db := setup(t)
			now := time.Now().UTC()
			end := map[string]any{"kind": "command_end", "pid": 100 + i, "started_at": now, "ended_at": now, "end_cause": "exited"}
			for k, v := range tt.end {
				end[k] = v
			}
			c.Stdout(context.Background(), strings.NewReader(jsonl(end)))
			rec, err := db.GetCommand(context.Background(), "isb1", 100+i, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if rec.StdoutHead != tt.wantHead || rec.Truncated != tt.wantTruncated {
				t.Errorf("head %q truncated %v, want %q %v", rec.StdoutHead, rec.Truncated, tt.wantHead, tt.wantTruncated)
			}
		})
	}
}

func TestSecretsInBinaryHeadsAndTailsAreRedacted(t *testing.T) {
	c, _, db := setup(t)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	head := "\x00\x01key " + secret + "\x00 AKIAABCDEFGHIJKLMNOP\xff"
	tail := "\xfe" + secret[3:] + "\x00" + secret
	now := time.Now().UTC()
	c.Stdout(context.Background(), strings.NewReader(jsonl(map[string]any{"kind": "command_end", "pid": 7, "started_at": now, "ended_at": now,
		"end_cause": "exited", "stdout_binary": true, "stdout_head": b64(head), "stdout_tail": b64(tail), "stdout_bytes": 1 << 20,
		"head_bytes": 4096, "tail_bytes": 4096})))
	rec, err := db.GetCommand(context.Background(), "isb1", 7, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, got, want string }{
		{"head", rec.StdoutHead, b64("\x00\x01key [REDACTED:exact]\x00 [REDACTED:aws_key]\xff")},
		{"tail", rec.StdoutTail, b64("\xfe" + secret[3:] + "\x00[REDACTED:exact]")},
	} {
		got, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(tt.got, BinaryPrefix))
		if err != nil || !strings.HasPrefix(tt.got, BinaryPrefix) {
			t.Fatalf("%s %q: not %s base64: %v", tt.name, tt.got, BinaryPrefix, err)
		}
		if want, _ := base64.StdEncoding.DecodeString(tt.want); string(got) != string(want) {
			t.Errorf("%s decodes to %q, want %q", tt.name, got, want)
		}
	}
	if rec.Redactions["exact"] != 2 || rec.Redactions["aws_key"] != 1 {
		t.Errorf("redactions %v, want 2 exact and 1 aws_key", rec.Redactions)
	}
}

func TestDropsInACommandRecordReachTheIngester(t *testing.T) {
	_, _, db := setup(t)
	in := logs.NewIngester(db, logs.Config{FlushInterval: time.Hour})
	t.Cleanup(func() { _ = in.Close() })
	c := collector(t, db, "isb4", in, db)
	now := time.Now().UTC()
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		map[string]any{"kind": "command_end", "pid": 1, "started_at": now, "ended_at": now, "end_cause": "exited", "lines_dropped": 700, "bytes_dropped": 5000},
		map[string]any{"kind": "command_end", "pid": 2, "started_at": now, "ended_at": now, "end_cause": "exited", "lines_dropped": 20})))
	if got := in.Dropped("isb4"); got != 720 {
		t.Errorf("the ingester counts %d lines dropped in the sandbox, want 720", got)
	}
}

func TestACommandsEnvSecretsAreMaskedLikeTheSandboxes(t *testing.T) {
	c, got, db := setup(t)
	const cmdSecret = "cmd-only-secret-5f3a9c"
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		map[string]any{"kind": "command_start", "pid": 7, "request_id": "req-2", "user": "user", "command": "/bin/bash",
			"args": []string{"-c", "echo " + cmdSecret}, "cwd": "/", "started_at": start, "secrets": []string{cmdSecret}},
		map[string]any{"kind": "output", "ts": time.Now(), "pid": 7, "stream": "stdout", "request_id": "req-2", "line": "got " + cmdSecret},
		map[string]any{"kind": "command_end", "pid": 7, "request_id": "req-2", "started_at": start, "ended_at": time.Now(),
			"duration_ms": 1000, "exit_code": 0, "end_cause": "exited", "stdout_bytes": 30, "stdout_head": "got " + cmdSecret + "\n"},
		map[string]any{"kind": "output", "ts": time.Now(), "pid": 8, "stream": "stdout", "line": "later " + cmdSecret},
	)))
	rec, err := db.GetCommand(context.Background(), "isb1", 7, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]string{
		"the record's args": strings.Join(rec.Args, " "), "the record's head": rec.StdoutHead,
		"the post-mortem's recent lines": strings.Join(c.Recent(), "\n"),
	}
	for _, l := range got.l {
		places["log line "+l.Message] = l.Message
	}
	for where, s := range places {
		t.Run("it is masked in "+where, func(t *testing.T) {
			if strings.Contains(s, cmdSecret) || !strings.Contains(s, "[REDACTED:exact]") {
				t.Errorf("%q", s)
			}
		})
	}
	t.Run("a sandbox adds at most maxCommandSecrets values", func(t *testing.T) {
		many := make([]string, maxCommandSecrets+10)
		for i := range many {
			many[i] = "bulk-secret-" + strings.Repeat("x", i)
		}
		before := c.redactor.Len()
		c.addSecrets(many)
		if added := c.redactor.Len() - before; added > maxCommandSecrets {
			t.Errorf("%d secrets added", added)
		}
	})
}

func TestParsedFieldsNamedLikeSecretsAreMasked(t *testing.T) {
	c, got, _ := setup(t)
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		map[string]any{"kind": "output", "ts": time.Now(), "pid": 7, "stream": "stdout",
			"line": `{"msg":"login","token":"abc123plain","user":"ann","db":{"password":"hunter2","port":5432,"pin_code":4711},"apiKeys":["k1","k2"],"note":"key is ` + secret + `"}`},
	)))
	c.Stderr(strings.NewReader(jsonl(map[string]any{"time": time.Now().Format(time.RFC3339Nano), "level": "INFO",
		"msg": "envd line", "client_secret": "s3cr3t-value"})), nil)
	if len(got.l) != 2 {
		t.Fatalf("%d lines stored, want 2", len(got.l))
	}
	fields, _ := json.Marshal([]map[string]any{got.l[0].Fields, got.l[1].Fields})
	for _, leak := range []string{"abc123plain", "hunter2", "k1", "k2", secret, "s3cr3t-value"} {
		t.Run("the value "+leak+" is not in the stored fields", func(t *testing.T) {
			if strings.Contains(string(fields), leak) {
				t.Errorf("stored fields hold %q: %s", leak, fields)
			}
		})
	}
	t.Run("fields not named like secrets are kept", func(t *testing.T) {
		f := got.l[0].Fields
		db, _ := f["db"].(map[string]any)
		if f["user"] != "ann" || db["port"] != float64(5432) || f["token"] != "[REDACTED:key_value]" {
			t.Errorf("fields %v", f)
		}
	})
}

func TestEnvdsOOMKillRecordReachesTheHook(t *testing.T) {
	c, ls, _ := setup(t)
	var got []envdapi.OOMKill
	c.OnOOM = func(_ context.Context, k envdapi.OOMKill) { got = append(got, k) }
	c.Stdout(context.Background(), strings.NewReader(jsonl(
		envdapi.OOMKill{Kind: envdapi.KindOOMKill, PID: 42, Comm: "python3", RSSBytes: 300 << 20, UsedBytes: 512 << 20, LimitBytes: 512 << 20, Kills: 2})))
	if len(got) != 1 || got[0].PID != 42 || got[0].Comm != "python3" || got[0].Kills != 2 {
		t.Fatalf("the hook heard %+v, want the one kill of pid 42 (python3), the second", got)
	}
	ls.mu.Lock()
	n := len(ls.l)
	ls.mu.Unlock()
	if n != 0 {
		t.Errorf("the record was also kept as %d log line(s): it is envd's record, not the sandbox's output", n)
	}
}
