// Command sandbox benchmarks `cove server` end to end and prints figures, targets and
// pass/miss. It never fails on a missed target: it is a measuring tool, not a test.
//
//	go run ./bench/sandbox            # full run, a few minutes (first run also builds the base template)
//	go run ./bench/sandbox -quick     # smoke run, < 60 s once the template exists
//	go run ./bench/sandbox -json      # the table, then the same results as JSON
//
// It needs root. It builds cove (or takes -cove), starts its own `cove server` on a free
// loopback port with its own data dir (-data, kept between runs so the base template is
// built once), and SIGTERMs it at the end, even on error. The server's log goes to
// <data>/bench-server.log. Phases:
//
//  1. create: POST /sandboxes -> end event of /bin/true through the proxy, sequential, each
//     sandbox killed right after (kill timed apart);
//     1b. pool: the same with a warm pool of base (-pool) refilled between creates, the ratio to
//     the cold creates, then -burst creates without waiting: misses, and the refill rate;
//  2. freeze/thaw: POST /pause and POST /connect on one sandbox, plus the server's own
//     cove_sandbox_transition_seconds histogram;
//  3. density: N idle sandboxes, their memory cgroups summed, MemAvailable as a cross-check;
//  4. proxy: unary envd calls (GET /health, process.Process/List) through the proxy, against
//     the same sandbox's envd dialed directly inside its netns, and a `cove envd` on the host;
//  5. breakdown: the server's create stages replayed with internal/sandbox/runtime (runc create,
//     runc start, envd health wait, /init), to say where create time goes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

const (
	envdPort  = 49983
	memcgRoot = "/sys/fs/cgroup/memory/cove"
)

type config struct {
	cove, data      string
	creates, cycles int
	idle, reqs      int
	breakdown       int
	pool, burst     int
	settle          time.Duration
	asJSON          bool
}

type bench struct {
	cfg       config
	base      string // http://addr of the server
	key       string
	hc        *http.Client
	proc      processconnect.ProcessClient
	log       string // server log file
	serverPid int
	rows      []result
	coldP50   time.Duration // phaseCreate's, for the pool's ratio
}

func main() {
	var c config
	var quick bool
	flag.StringVar(&c.cove, "cove", "", "cove binary to run (default: go build ./cmd/cove into a temp dir)")
	flag.StringVar(&c.data, "data", "/var/lib/cove-bench", "the server's data dir (kept between runs)")
	flag.IntVar(&c.creates, "n", 50, "sequential creates timed (create -> /bin/true end event)")
	flag.IntVar(&c.cycles, "cycles", 30, "pause/connect cycles")
	flag.IntVar(&c.idle, "idle", 20, "idle sandboxes for the density phase")
	flag.IntVar(&c.reqs, "reqs", 1000, "requests per proxy-overhead series")
	flag.IntVar(&c.breakdown, "breakdown", 20, "creates replayed stage by stage with internal/sandbox/runtime (0: skip)")
	flag.DurationVar(&c.settle, "settle", 5*time.Second, "wait before sampling idle sandboxes' memory")
	flag.IntVar(&c.pool, "pool", 4, "warm pool size of base for the pooled creates (0: skip the pool phase)")
	flag.IntVar(&c.burst, "burst", 100, "sequential creates run against the pool without waiting for its refills")
	flag.BoolVar(&quick, "quick", false, "smoke run: -n 10 -cycles 10 -idle 5 -reqs 300 -breakdown 6 -settle 2s")
	flag.BoolVar(&c.asJSON, "json", false, "also print the results as JSON")
	flag.Parse()
	if quick {
		c.creates, c.cycles, c.idle, c.reqs, c.breakdown, c.settle = 10, 10, 5, 300, 6, 2*time.Second
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sandbox:", err)
		os.Exit(1)
	}
}

func run(c config) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Geteuid() != 0 {
		return errors.New("needs root (cove server runs sandboxes with runc)")
	}
	if c.cove == "" {
		dir, err := os.MkdirTemp("", "bench-sandbox-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.cove = filepath.Join(dir, "cove")
		fmt.Fprintln(os.Stderr, "building cove ...")
		build := exec.CommandContext(ctx, "go", "build", "-o", c.cove, "github.com/cove-dev/cove/cmd/cove")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build cove: %w", err)
		}
	}
	if c.cove, err = filepath.Abs(c.cove); err != nil {
		return err
	}
	if err := os.MkdirAll(c.data, 0o700); err != nil {
		return err
	}

	b := &bench{cfg: c, log: filepath.Join(c.data, "bench-server.log")}
	b.hc = &http.Client{Transport: &http.Transport{
		Protocols: http1(), MaxIdleConnsPerHost: 64, DisableCompression: true,
	}}
	stopServer, err := b.startServer(ctx)
	if err != nil {
		return err
	}
	defer stopServer()
	b.proc = processconnect.NewProcessClient(b.hc, b.base)

	phases := []struct {
		name string
		f    func(context.Context) error
	}{
		{"create", b.phaseCreate},
		{"pool", b.phasePool},
		{"freeze/thaw", b.phaseFreeze},
		{"density", b.phaseDensity},
		{"proxy", b.phaseProxy},
		{"server metrics", b.phaseMetrics},
		{"breakdown", b.phaseBreakdown},
	}
	for _, p := range phases {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := p.f(ctx); err != nil {
			b.printTable()
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(os.Stderr, "  (%s phase took %s)\n", p.name, time.Since(t0).Round(100*time.Millisecond))
	}
	stopServer() // before reading the log, so every line is in
	b.serverLogRows()
	b.printTable()
	if c.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b.rows)
	}
	return nil
}
