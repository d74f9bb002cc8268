package cove_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// logBuffer is a concurrency-safe buffer of JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the parsed lines whose msg is msg and whose request_id is id.
func (b *logBuffer) lines(msg, id string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return parseLines(b.buf.Bytes(), msg, id)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func parseLines(data []byte, msg, id string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m["msg"] == msg && (id == "" || m["request_id"] == id) {
			out = append(out, m)
		}
	}
	return out
}

// newClient returns a client of the test server whose log lines go to the returned
// buffer (and to t.Log when the test fails).
func newClient(t testing.TB, cfg cove.Config) (*cove.Client, *logBuffer) {
	t.Helper()
	needServer(t)
	logs := &logBuffer{}
	cfg.APIURL, cfg.SandboxURL = server.URL, server.URL
	if cfg.APIKey == "" {
		cfg.APIKey = server.APIKey
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("SDK log:\n%s", logs)
		}
	})
	return cove.NewClient(cfg), logs
}

// newSandbox makes a sandbox from the base template and kills it when the test ends.
func newSandbox(t testing.TB, c *cove.Client, opts cove.SandboxOptions) *cove.Sandbox {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sb.Kill(ctx)
	})
	return sb
}

// envdLines waits up to 10 s for envd's log of sandboxID to have want lines with msg and
// request id id, and returns what it found.
func envdLines(t testing.TB, sandboxID, msg, id string, want int) []map[string]any {
	t.Helper()
	path := filepath.Join(server.DataDir, "logs", sandboxID+".log")
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatalf("read envd's log: %v", err)
		}
		lines := parseLines(data, msg, id)
		if len(lines) >= want || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// envdLog returns the lines of envd's log that carry request id id, for failure messages.
func envdLog(sandboxID, id string) string {
	data, _ := os.ReadFile(filepath.Join(server.DataDir, "logs", sandboxID+".log"))
	var out []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, id) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
