package server

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// processGauges reads the server's open fds and goroutines from its /metrics.
func processGauges(t *testing.T, s *covetest.Server) (fds, goroutines float64) {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "process_open_fds":
			fds, _ = strconv.ParseFloat(value, 64)
		case "go_goroutines":
			goroutines, _ = strconv.ParseFloat(value, 64)
		}
	}
	return fds, goroutines
}

func TestCreatingAndKillingSandboxesLeavesNoFdOrGoroutine(t *testing.T) {
	if testing.Short() {
		t.Skip("creates and kills 200 sandboxes")
	}
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	cycle := func(n int) {
		for range n {
			id := c.create(nil)
			if code, out, _ := c.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
				t.Fatalf("kill %s: %d %v", id, code, out)
			}
		}
	}
	// Warm up: pools, idle connections and lazily started goroutines settle first.
	cycle(5)
	// The slack is far below one per sandbox: a leak of one fd or goroutine per sandbox
	// shows as 200.
	const slack = 30
	settled := func(fds0, g0 float64) (float64, float64, bool) {
		fds, g := processGauges(t, s)
		return fds, g, fds <= fds0+slack && g <= g0+slack
	}
	fds0, g0 := processGauges(t, s)
	cycle(200)
	var fds, g float64
	ok := false
	for deadline := time.Now().Add(60 * time.Second); !ok; time.Sleep(250 * time.Millisecond) {
		if fds, g, ok = settled(fds0, g0); !ok && time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after 200 sandboxes: open fds %v → %v, goroutines %v → %v", fds0, fds, g0, g)
	if !ok {
		t.Errorf("after creating and killing 200 sandboxes the server holds %v fds (was %v) and %v goroutines (was %v)", fds, fds0, g, g0)
	}
}
