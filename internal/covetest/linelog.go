package covetest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
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
