package envd_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/guest/envd"
)

// gate is a writer that blocks until opened, like a FIFO nobody reads.
type gate struct {
	open    chan struct{}
	entered chan struct{} // closed at the first write: the writer is stuck from then on
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

func TestHostLog(t *testing.T) {
	t.Run("writes never wait on a host that does not read, and the gap is announced", func(t *testing.T) {
		g := &gate{open: make(chan struct{}), entered: make(chan struct{})}
		h := envd.NewHostLog(g, 4)
		// The first line gets the writer stuck; only then is the count of drops the test's
		// own (the writer resets it as it announces a gap, which it cannot do while stuck).
		_, _ = h.Write([]byte("first\n"))
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the host log never wrote its first line")
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 100; i++ {
				_, _ = h.Write([]byte("line\n"))
			}
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("writes blocked on a writer that does not read")
		}
		if h.Dropped() < 90 {
			t.Errorf("dropped %d of 100 lines with a queue of 4 and a stuck writer, want at least 90", h.Dropped())
		}
		close(g.open)
		// The queue may still be full the moment the host comes back: write until one lands.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(g.String(), "after"); time.Sleep(5 * time.Millisecond) {
			_, _ = h.Write([]byte("after\n"))
			if time.Now().After(deadline) {
				t.Fatalf("the line written after the host came back never arrived: %q", g.String())
			}
		}
		if !strings.Contains(g.String(), `"msg":"envd log lines dropped"`) {
			t.Errorf("no notice of the dropped lines in %q", g.String())
		}
	})
}
