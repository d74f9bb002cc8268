package covetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// LineLogger writes each complete line it is given to t.Log as it arrives, prefixed: a
// child process's output (node's test runner, say) read live in the test log.
type LineLogger struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    bytes.Buffer
}

// NewLineLogger returns a LineLogger for t.
func NewLineLogger(t testing.TB, prefix string) *LineLogger {
	return &LineLogger{t: t, prefix: prefix}
}

func (l *LineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if errors.Is(err, io.EOF) {
			l.buf.WriteString(line) // incomplete: kept for the next write
			return len(p), nil
		}
		l.t.Log(l.prefix + strings.TrimRight(line, "\r\n"))
	}
}

// Flush logs a final line that had no newline.
func (l *LineLogger) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rest := l.buf.String(); rest != "" {
		l.t.Log(l.prefix + rest)
		l.buf.Reset()
	}
}

// RunNode runs `node --test FILE` in the directory compat (test/compat, which holds the
// pinned npm e2b SDK) with env added, its output logged live, and fails t if it fails. It
// skips t when node or the SDK is missing.
func RunNode(t *testing.T, compat, file string, env ...string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found on PATH: install Node.js 20+, then run scripts/deps.sh")
	}
	if compat, err = filepath.Abs(compat); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(compat, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("the e2b npm SDK is not installed in test/compat: run scripts/deps.sh (or npm ci there)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	if deadline, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-10*time.Second))
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", file)
	cmd.Dir = compat
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	cmd.WaitDelay = 5 * time.Second
	out := NewLineLogger(t, "node: ")
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test %s: %v (the SDK scenarios above name what failed)", file, err)
	}
}
