package envd

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// HostLog is envd's log output when it runs as a sandbox's init: a FIFO the host reads, and
// no host reads it while the server restarts. Its writes never wait: each line queues for
// one writer goroutine and, once the queue is full (the FIFO full, nobody reading), is
// dropped and counted; the next line that gets through follows one that says how many were
// dropped, so a gap in envd's log is never silent.
type HostLog struct {
	queue   chan []byte
	dropped atomic.Uint64
}

// NewHostLog starts writing to w, keeping up to lines lines queued.
func NewHostLog(w io.Writer, lines int) *HostLog {
	h := &HostLog{queue: make(chan []byte, max(lines, 1))}
	go h.run(w)
	return h
}

// Write queues p (one log line); it never blocks and never fails.
func (h *HostLog) Write(p []byte) (int, error) {
	select {
	case h.queue <- append([]byte(nil), p...):
	default:
		h.dropped.Add(1)
	}
	return len(p), nil
}

// Dropped is how many lines were dropped since the last notice.
func (h *HostLog) Dropped() uint64 { return h.dropped.Load() }

func (h *HostLog) run(w io.Writer) {
	for line := range h.queue {
		if n := h.dropped.Swap(0); n > 0 {
			notice, _ := json.Marshal(map[string]any{slog.TimeKey: time.Now().UTC().Format(time.RFC3339Nano), slog.LevelKey: "WARN",
				slog.MessageKey: "envd log lines dropped", telemetry.KeyService: "envd", telemetry.KeyLogDropped: n,
				telemetry.KeyDetail: "the host did not read envd's log (a server restart?)"})
			_, _ = w.Write(append(notice, '\n'))
		}
		if _, err := w.Write(line); err != nil {
			h.dropped.Add(1) // a broken pipe: announced with the next line that gets through
		}
	}
}

// HoldHostPipes keeps a read end of envd's stdout and stderr (pipes the host reads) open
// inside the sandbox, so that while no server reads them (it restarts) a write waits in the
// pipe's buffer instead of failing, and a restarted server can open them again through
// /proc. A write that fails all the same (a broken pipe) must not kill envd: SIGPIPE is
// caught, so writes to fd 1 and 2 return EPIPE, which the sink and HostLog count as drops.
// Call it once, as the sandbox's init.
func HoldHostPipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	for _, fd := range []int{1, 2} {
		link := fmt.Sprintf("/proc/self/fd/%d", fd)
		if target, err := os.Readlink(link); err != nil || !strings.HasPrefix(target, "pipe:[") {
			continue
		}
		if f, err := os.OpenFile(link, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			held = append(held, f) // never read, never closed
		}
	}
}

var held []*os.File
