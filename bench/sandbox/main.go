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
//  2. freeze/thaw: POST /pause and POST /connect on one sandbox, plus the server's own
//     cove_sandbox_transition_seconds histogram;
//  3. density: N idle sandboxes, their memory cgroups summed, MemAvailable as a cross-check;
//  4. proxy: unary envd calls (GET /health, process.Process/List) through the proxy, against
//     the same sandbox's envd dialed directly inside its netns, and a `cove envd` on the host;
//  5. breakdown: the server's create stages replayed with internal/runtime (runc create,
//     runc start, envd health wait, /init), to say where create time goes.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/cove-dev/cove/gen/process"
	"github.com/cove-dev/cove/gen/process/processconnect"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/network/nettest"
	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/template"
)

const (
	envdPort  = 49983
	netnsDir  = "/run/cove/netns" // runtime.Config's default, which cove server uses
	memcgRoot = "/sys/fs/cgroup/memory/cove"
)

type config struct {
	cove, data      string
	creates, cycles int
	idle, reqs      int
	breakdown       int
	settle          time.Duration
	asJSON          bool
}

// result is one row of the table.
type result struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Pass   *bool   `json:"pass,omitempty"` // nil: informational
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
	flag.IntVar(&c.breakdown, "breakdown", 20, "creates replayed stage by stage with internal/runtime (0: skip)")
	flag.DurationVar(&c.settle, "settle", 5*time.Second, "wait before sampling idle sandboxes' memory")
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

// startServer runs `cove server` and waits for "==> Cove is up at http://ADDR". The returned
// stop SIGTERMs it and waits (SIGKILL after 30 s); it is safe to call twice.
func (b *bench) startServer(ctx context.Context) (stop func(), err error) {
	logf, err := os.Create(b.log)
	if err != nil {
		return nil, err
	}
	// Sandboxes get networking as in production, on a reserved test pool that reaches only
	// 198.18.0.0/15: nothing the bench does leaves the machine.
	pool, release, err := nettest.ReservePool()
	if err != nil {
		logf.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	cmd := exec.Command(b.cfg.cove, append([]string{"server", "--data", b.cfg.data, "--addr", "127.0.0.1:0", "--log-level", "info"},
		covetest.NetworkArgs(pool)...)...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} // dies with us, even on a crash
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "starting %s server --data %s (log: %s) ...\n", b.cfg.cove, b.cfg.data, b.log)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start cove server: %w", err)
	}
	b.serverPid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "cove server ignored SIGTERM for 30 s: SIGKILL")
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		release()
	}
	up := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, "  server: "+line)
			if rest, ok := strings.CutPrefix(line, "==> Cove is up at "); ok {
				select {
				case up <- strings.TrimSpace(rest):
				default:
				}
			}
		}
	}()
	select {
	case b.base = <-up:
	case <-exited:
		stop()
		return nil, fmt.Errorf("cove server exited before it was up; see %s", b.log)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	case <-time.After(10 * time.Minute):
		stop()
		return nil, errors.New("cove server not up after 10 min")
	}
	key, err := os.ReadFile(filepath.Join(b.cfg.data, "initial-api-key"))
	if err != nil {
		stop()
		return nil, fmt.Errorf("api key: %w", err)
	}
	b.key = strings.TrimSpace(string(key))
	fmt.Fprintf(os.Stderr, "server up at %s in %s\n", b.base, time.Since(t0).Round(time.Millisecond))
	return stop, nil
}

// --- REST ---

func (b *bench) api(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-Key", b.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

func (b *bench) create(ctx context.Context) (string, error) {
	code, out, err := b.api(ctx, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 600})
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("create: %d %s", code, bytes.TrimSpace(out))
	}
	var r struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.SandboxID == "" {
		return "", fmt.Errorf("create: bad body %q", out)
	}
	return r.SandboxID, nil
}

func (b *bench) kill(ctx context.Context, id string) error {
	code, out, err := b.api(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
	if err != nil {
		return err
	}
	if code != http.StatusNoContent {
		return fmt.Errorf("kill %s: %d %s", id, code, bytes.TrimSpace(out))
	}
	return nil
}

// runTrue runs /bin/true in the sandbox through the proxy and returns when its end event
// arrives (the stream is then drained so the connection is reused).
func runTrue(ctx context.Context, client processconnect.ProcessClient, id string) (time.Duration, error) {
	noStdin := false
	t0 := time.Now()
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}, Stdin: &noStdin})
	if id != "" {
		sandboxHeaders(req.Header(), id)
	}
	stream, err := client.Start(ctx, req)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	var took time.Duration
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil && took == 0 {
			took = time.Since(t0)
			if end.GetExitCode() != 0 {
				return 0, fmt.Errorf("/bin/true exited %d (%s)", end.GetExitCode(), end.GetStatus())
			}
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	if took == 0 {
		return 0, errors.New("/bin/true: stream closed without an end event")
	}
	return took, nil
}

func sandboxHeaders(h http.Header, id string) {
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(envdPort))
}

// --- phases ---

func (b *bench) phaseCreate(ctx context.Context) error {
	n := b.cfg.creates
	warm := 2
	fmt.Fprintf(os.Stderr, "create -> /bin/true x%d (+%d warm-up) ...\n", n, warm)
	var total, api, first, kill []time.Duration
	for i := range n + warm {
		t0 := time.Now()
		id, err := b.create(ctx)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if _, err := runTrue(ctx, b.proc, id); err != nil {
			_ = b.kill(ctx, id)
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
		t2 := time.Now()
		if err := b.kill(ctx, id); err != nil {
			return err
		}
		t3 := time.Now()
		if i < warm {
			continue
		}
		total, api, first, kill = append(total, t2.Sub(t0)), append(api, t1.Sub(t0)), append(first, t2.Sub(t1)), append(kill, t3.Sub(t2))
	}
	p50 := measure.Pct(total, 50)
	b.check("create -> /bin/true end, p50", measure.Ms(p50), "ms", "<= 50 ms", p50 <= 50*time.Millisecond)
	b.info("create -> /bin/true end, p99", measure.Ms(measure.Pct(total, 99)), "ms")
	b.info("  of which POST /sandboxes, p50", measure.Ms(measure.Pct(api, 50)), "ms")
	b.info("  of which first /bin/true via proxy, p50", measure.Ms(measure.Pct(first, 50)), "ms")
	b.info("kill (DELETE), p50", measure.Ms(measure.Pct(kill, 50)), "ms")
	b.info("kill (DELETE), p99", measure.Ms(measure.Pct(kill, 99)), "ms")
	return nil
}

func (b *bench) phaseFreeze(ctx context.Context) error {
	n := b.cfg.cycles
	fmt.Fprintf(os.Stderr, "pause/connect x%d ...\n", n)
	id, err := b.create(ctx)
	if err != nil {
		return err
	}
	defer b.kill(context.WithoutCancel(ctx), id)
	var pause, thaw, after []time.Duration
	for range n {
		t0 := time.Now()
		code, out, err := b.api(ctx, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{})
		if err != nil {
			return err
		}
		if code != http.StatusNoContent {
			return fmt.Errorf("pause: %d %s", code, bytes.TrimSpace(out))
		}
		pause = append(pause, time.Since(t0))
		t0 = time.Now()
		code, out, err = b.api(ctx, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600})
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("connect on a paused sandbox: %d %s (want 201)", code, bytes.TrimSpace(out))
		}
		thaw = append(thaw, time.Since(t0))
		d, err := runTrue(ctx, b.proc, id)
		if err != nil {
			return fmt.Errorf("/bin/true after thaw: %w", err)
		}
		after = append(after, d)
	}
	b.info("pause (POST /pause), p50", measure.Ms(measure.Pct(pause, 50)), "ms")
	b.info("pause (POST /pause), p99", measure.Ms(measure.Pct(pause, 99)), "ms")
	b.info("thaw (POST /connect, paused), p50", measure.Ms(measure.Pct(thaw, 50)), "ms")
	b.info("thaw (POST /connect, paused), p99", measure.Ms(measure.Pct(thaw, 99)), "ms")
	b.info("first /bin/true after thaw, p50", measure.Ms(measure.Pct(after, 50)), "ms")
	return nil
}

func (b *bench) phaseDensity(ctx context.Context) error {
	n := b.cfg.idle
	fmt.Fprintf(os.Stderr, "density: %d idle sandboxes, settle %v ...\n", n, b.cfg.settle)
	avail0, err := memAvailable()
	if err != nil {
		return err
	}
	serverRSS0 := vmRSS(b.serverPid)
	var ids []string
	killAll := func() {
		for _, id := range ids {
			_ = b.kill(context.WithoutCancel(ctx), id)
		}
		ids = nil
	}
	defer killAll()
	for range n {
		id, err := b.create(ctx)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	measure.Sleep(ctx, b.cfg.settle)
	avail1, err := memAvailable()
	if err != nil {
		return err
	}
	serverRSS1 := vmRSS(b.serverPid)
	var usage, rss, cache, kmem, pss uint64
	procs := 0
	for _, id := range ids {
		for _, pid := range cgroupPids(filepath.Join(memcgRoot, id)) {
			if kv, err := readKV(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
				pss += kv["Pss:"] << 10
				procs++
			}
		}
		dir := filepath.Join(memcgRoot, id)
		u, err := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return err
		}
		if k, err := readUint(filepath.Join(dir, "memory.kmem.usage_in_bytes")); err == nil {
			kmem += k
		}
		st, err := readKV(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return err
		}
		usage, rss, cache = usage+u, rss+st["total_rss"], cache+st["total_cache"]
	}
	per := func(total uint64) float64 { return float64(total) / float64(n) }
	perGiB := func(total uint64) float64 { return float64(1<<30) / per(total) }
	b.info("idle sandbox memcg usage, mean", mib(per(usage)), "MiB")
	b.info("idle sandbox memcg total_rss, mean", mib(per(rss)), "MiB")
	b.info("idle sandbox memcg total_cache, mean", mib(per(cache)), "MiB")
	b.info("idle sandbox memcg kmem usage, mean", mib(per(kmem)), "MiB")
	b.info(fmt.Sprintf("idle sandbox PSS of its processes, mean (%d procs)", procs), mib(per(pss)), "MiB")
	b.info("idle sandboxes per GiB (PSS)", perGiB(pss), "/GiB")
	if serverRSS1 > serverRSS0 {
		b.info("cove server RSS growth per idle sandbox", mib(per(serverRSS1-serverRSS0)), "MiB")
	}
	b.info("idle sandboxes per GiB (memcg usage)", perGiB(usage), "/GiB")
	b.info("idle sandboxes per GiB (RSS only)", perGiB(rss), "/GiB")
	if avail0 > avail1 {
		drop := avail0 - avail1
		b.info("host MemAvailable drop per sandbox (noisy on a shared host)", mib(per(drop)), "MiB")
		b.info("idle sandboxes per GiB (MemAvailable)", perGiB(drop), "/GiB")
	} else {
		b.info("host MemAvailable drop per sandbox (grew: noise)", -mib(float64(avail1-avail0)/float64(n)), "MiB")
	}
	killAll()
	measure.Sleep(ctx, time.Second)
	if avail2, err := memAvailable(); err == nil && avail2 > avail1 {
		b.info("host MemAvailable regained per sandbox killed", mib(per(avail2-avail1)), "MiB")
	}
	return nil
}

func (b *bench) phaseProxy(ctx context.Context) error {
	n := b.cfg.reqs
	fmt.Fprintf(os.Stderr, "proxy overhead: %d x GET /health and process.Process/List, three ways ...\n", n)
	id, err := b.create(ctx)
	if err != nil {
		return err
	}
	defer b.kill(context.WithoutCancel(ctx), id)

	// Direct: the same sandbox's envd over a connection dialed inside its netns, as the
	// server's proxy does, minus the proxy.
	ns := filepath.Join(netnsDir, id)
	direct := &http.Client{Transport: &http.Transport{
		Protocols: http1(), MaxIdleConnsPerHost: 4, DisableCompression: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return runtime.DialNetns(ctx, ns, network, fmt.Sprintf("127.0.0.1:%d", envdPort))
		},
	}}
	// Host: a `cove envd` on the host's loopback.
	addr, err := measure.FreeAddr()
	if err != nil {
		return err
	}
	envd := exec.Command(b.cfg.cove, "envd", "--addr", addr, "--log-level", "warn")
	envd.Stdout, envd.Stderr = os.Stderr, os.Stderr
	envd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := envd.Start(); err != nil {
		return fmt.Errorf("start host envd: %w", err)
	}
	defer func() { _ = envd.Process.Signal(syscall.SIGTERM); _ = envd.Wait() }()
	host := &http.Client{Transport: &http.Transport{Protocols: http1(), MaxIdleConnsPerHost: 4, DisableCompression: true}}
	hostBase := "http://" + addr
	if err := waitHealthy(ctx, host, hostBase+"/health", 10*time.Second); err != nil {
		return fmt.Errorf("host envd: %w", err)
	}

	type way struct {
		name   string
		hc     *http.Client
		base   string
		header bool
	}
	ways := []way{
		{"proxy", b.hc, b.base, true},
		{"direct (netns)", direct, "http://envd", false},
		{"host envd", host, hostBase, false},
	}
	health := map[string][2]time.Duration{}
	list := map[string][2]time.Duration{}
	for _, w := range ways {
		get := func() error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/health", nil)
			if w.header {
				sandboxHeaders(req.Header, id)
			}
			res, err := w.hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusNoContent {
				return fmt.Errorf("%s GET /health: %s", w.name, res.Status)
			}
			return nil
		}
		pc := processconnect.NewProcessClient(w.hc, w.base)
		lst := func() error {
			req := connect.NewRequest(&pb.ListRequest{})
			if w.header {
				sandboxHeaders(req.Header(), id)
			}
			_, err := pc.List(ctx, req)
			return err
		}
		for _, s := range []struct {
			f   func() error
			out map[string][2]time.Duration
		}{{get, health}, {lst, list}} {
			ds, err := measure.Runs(n, measure.Timed(s.f))
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			s.out[w.name] = [2]time.Duration{measure.Pct(ds, 50), measure.Pct(ds, 99)}
		}
	}
	for _, s := range []struct {
		what string
		m    map[string][2]time.Duration
	}{{"GET /health", health}, {"Process/List", list}} {
		for _, w := range ways {
			b.info(fmt.Sprintf("%s %s, p50", s.what, w.name), measure.Ms(s.m[w.name][0]), "ms")
			b.info(fmt.Sprintf("%s %s, p99", s.what, w.name), measure.Ms(s.m[w.name][1]), "ms")
		}
		p, d, h := s.m["proxy"], s.m["direct (netns)"], s.m["host envd"]
		b.info(fmt.Sprintf("%s proxy overhead p50 (vs direct)", s.what), measure.Ms(p[0]-d[0]), "ms")
		b.info(fmt.Sprintf("%s proxy overhead p99 (vs direct)", s.what), measure.Ms(p[1]-d[1]), "ms")
		b.info(fmt.Sprintf("%s proxy overhead p50 (vs host envd)", s.what), measure.Ms(p[0]-h[0]), "ms")
	}
	return nil
}

// phaseMetrics reads the server's own histograms: everything this bench did so far.
func (b *bench) phaseMetrics(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/metrics", nil)
	res, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	hs, err := parseHistograms(res.Body)
	if err != nil {
		return err
	}
	for _, k := range []struct{ key, label string }{
		{`cove_sandbox_create_seconds`, "server create (to envd ready)"},
		{`cove_sandbox_transition_seconds{transition="pause"}`, "server pause"},
		{`cove_sandbox_transition_seconds{transition="resume"}`, "server resume"},
		{`cove_sandbox_transition_seconds{transition="kill"}`, "server kill"},
	} {
		h := hs[k.key]
		if h == nil || h.count == 0 {
			continue
		}
		b.info(fmt.Sprintf("%s, mean (n=%d)", k.label, int(h.count)), h.sum/h.count*1000, "ms")
		b.info(fmt.Sprintf("%s, p50 (buckets)", k.label), h.quantile(0.5)*1000, "ms")
	}
	return nil
}

// serverLogRows reads duration_ms of the server's "sandbox created" lines.
func (b *bench) serverLogRows() {
	f, err := os.Open(b.log)
	if err != nil {
		return
	}
	defer f.Close()
	var ds []time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg      string  `json:"msg"`
			Duration float64 `json:"duration_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "sandbox created" {
			ds = append(ds, time.Duration(l.Duration*float64(time.Millisecond)))
		}
	}
	if len(ds) > 0 {
		b.info(fmt.Sprintf("server log `sandbox created` duration_ms, p50 (n=%d)", len(ds)), measure.Ms(measure.Pct(ds, 50)), "ms")
		b.info("server log `sandbox created` duration_ms, p99", measure.Ms(measure.Pct(ds, 99)), "ms")
	}
}

// phaseBreakdown replays the server's create path (orchestrator.Create) stage by stage with
// the same runtime, spec and health-wait loop, and times each stage.
func (b *bench) phaseBreakdown(ctx context.Context) error {
	n := b.cfg.breakdown
	if n <= 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "breakdown: %d creates stage by stage ...\n", n)
	rt, err := runtime.NewRunc(ctx, runtime.Config{DataDir: filepath.Join(b.cfg.data, "bench-breakdown")})
	if err != nil {
		return err
	}
	ts, err := template.Open(b.cfg.data, rt)
	if err != nil {
		return err
	}
	tmpl, err := ts.Get("base")
	if err != nil {
		return err
	}
	stages := []string{"runtime.Create (overlay, netns, runc create)", "runtime.Start (runc start)",
		"envd health wait (server's loop)", "  of which health polls", "POST /init", "total", "runtime.Destroy",
		"envd ready after runc start (0.2 ms polls)",
		"bare fork+exec `runc --version`", "bare fork+exec `cove envd --help`",
		"overlay mkdir+mount (replica)", "netns create+lo up (replica)"}
	times := map[string][]time.Duration{}
	for i := range n + 1 {
		id := fmt.Sprintf("bench%d%d", time.Now().UnixNano()%1e9, i)
		t := map[string]time.Duration{}
		t0 := time.Now()
		rsb, err := rt.Create(ctx, runtime.Spec{
			ID: id, Rootfs: tmpl.Rootfs,
			Args:   []string{"/.cove/cove", "envd", "--addr", fmt.Sprintf("0.0.0.0:%d", envdPort)},
			Env:    []string{"COVE_SANDBOX_ID=" + id},
			Limits: runtime.Limits{MemoryBytes: 512 << 20, CPUs: 2, PIDs: 1024},
			Binds:  []runtime.Bind{{Source: b.cfg.cove, Target: "/.cove/cove", ReadOnly: true}},
		})
		if err != nil {
			return err
		}
		go io.Copy(io.Discard, rsb.Stdout)
		go io.Copy(io.Discard, rsb.Stderr)
		t1 := time.Now()
		t[stages[0]] = t1.Sub(t0)
		err = func() error {
			if err := rt.Start(ctx, id); err != nil {
				return err
			}
			t2 := time.Now()
			t[stages[1]] = t2.Sub(t1)
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return rt.Dial(ctx, id, network, fmt.Sprintf("127.0.0.1:%d", envdPort))
			}}}
			defer hc.CloseIdleConnections()
			if i%2 == 1 { // odd iterations: how soon envd really answers
				if err := tightHealthLoop(ctx, hc, 10*time.Second); err != nil {
					return err
				}
				t[stages[7]] = time.Since(t2)
				return nil
			}
			polls, err := serverHealthLoop(ctx, hc, 10*time.Second)
			if err != nil {
				return err
			}
			t3 := time.Now()
			t[stages[2]], t[stages[3]] = t3.Sub(t2), time.Duration(polls)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd/init", strings.NewReader(`{"envVars":{}}`))
			req.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(req)
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNoContent {
				return fmt.Errorf("/init: %s", res.Status)
			}
			t[stages[4]], t[stages[5]] = time.Since(t3), time.Since(t0)
			return nil
		}()
		t4 := time.Now()
		if derr := rt.Destroy(context.WithoutCancel(ctx), id); derr != nil && err == nil {
			err = derr
		}
		t[stages[6]] = time.Since(t4)
		if err != nil {
			return err
		}
		t5 := time.Now()
		_ = exec.Command("runc", "--version").Run()
		t[stages[8]] = time.Since(t5)
		t5 = time.Now()
		_ = exec.Command(b.cfg.cove, "envd", "--help").Run()
		t[stages[9]] = time.Since(t5)
		if t[stages[10]], t[stages[11]], err = replicaMounts(filepath.Join(b.cfg.data, "bench-breakdown"), tmpl.Rootfs, id); err != nil {
			return err
		}
		if i == 0 {
			continue // warm-up
		}
		for k, v := range t {
			times[k] = append(times[k], v)
		}
	}
	for _, s := range stages {
		if len(times[s]) == 0 {
			continue
		}
		if s == stages[3] {
			b.info("breakdown: "+s+", p50", float64(measure.Pct(times[s], 50)), "polls")
			continue
		}
		b.info("breakdown: "+s+", p50", measure.Ms(measure.Pct(times[s], 50)), "ms")
	}
	return nil
}

// serverHealthLoop is orchestrator.waitHealthy: GET /health with a doubling delay from 1 ms,
// capped at 50 ms. It returns how many polls it took.
func serverHealthLoop(ctx context.Context, c *http.Client, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	polls := 0
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		polls++
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return polls, nil
			}
		}
		select {
		case <-ctx.Done():
			return polls, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// tightHealthLoop polls GET /health every 0.2 ms: when envd is really ready.
func tightHealthLoop(ctx context.Context, c *http.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Microsecond):
		}
	}
}

// replicaMounts times what runtime.Create does before runc: the overlay (three mkdirs and
// the mount) and the pinned netns with lo up, then undoes both.
func replicaMounts(parent, lower, id string) (overlay, netns time.Duration, err error) {
	dir := filepath.Join(parent, "replica-"+id)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, 0, err
	}
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "rootfs")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, 0, err
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV,
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)); err != nil {
		return 0, 0, err
	}
	overlay = time.Since(t0)
	_ = unix.Unmount(merged, unix.MNT_DETACH)

	path := filepath.Join(dir, "netns")
	t0 = time.Now()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return 0, 0, err
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
		if err == nil {
			err = loUp()
		}
		if serr := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, serr) // the thread stays locked and dies with this goroutine
			return
		}
		goruntime.UnlockOSThread()
		errc <- err
	}()
	err = <-errc
	netns = time.Since(t0)
	_ = unix.Unmount(path, unix.MNT_DETACH)
	return overlay, netns, err
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// --- helpers ---

func (b *bench) add(metric string, v float64, unit, target string, pass *bool) {
	b.rows = append(b.rows, result{metric, v, unit, target, pass})
}
func (b *bench) info(metric string, v float64, unit string) { b.add(metric, v, unit, "", nil) }
func (b *bench) check(metric string, v float64, unit, target string, ok bool) {
	b.add(metric, v, unit, target, &ok)
}

func (b *bench) printTable() {
	w := 0
	for _, r := range b.rows {
		w = max(w, len(r.Metric))
	}
	fmt.Printf("%-*s  %15s  %-10s  %s\n", w, "metric", "value", "target", "result")
	for _, r := range b.rows {
		verdict := "info"
		if r.Pass != nil {
			verdict = map[bool]string{true: "pass", false: "MISS"}[*r.Pass]
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Printf("%-*s  %15s  %-10s  %s\n", w, r.Metric, fmt.Sprintf("%.3f %s", r.Value, r.Unit), target, verdict)
	}
}

func waitHealthy(ctx context.Context, hc *http.Client, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := hc.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after %v (last: %v)", url, limit, err)
		}
		measure.Sleep(ctx, 10*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// histogram is one Prometheus histogram series from the text format.
type histogram struct {
	sum, count float64
	buckets    [][2]float64 // (le, cumulative count), ascending
}

// quantile interpolates linearly inside the bucket holding q, as histogram_quantile does.
func (h *histogram) quantile(q float64) float64 {
	rank := q * h.count
	prevLE, prevN := 0.0, 0.0
	for _, bk := range h.buckets {
		if bk[1] >= rank {
			if math.IsInf(bk[0], 1) {
				return prevLE
			}
			if bk[1] == prevN {
				return bk[0]
			}
			return prevLE + (bk[0]-prevLE)*(rank-prevN)/(bk[1]-prevN)
		}
		prevLE, prevN = bk[0], bk[1]
	}
	return prevLE
}

// parseHistograms reads the text exposition format into series keyed by name{labels but le}.
func parseHistograms(r io.Reader) (map[string]*histogram, error) {
	hs := map[string]*histogram{}
	get := func(k string) *histogram {
		if hs[k] == nil {
			hs[k] = &histogram{}
		}
		return hs[k]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], strings.Trim(name[i:], "{}")
		}
		var le string
		var keep []string
		for _, l := range strings.Split(labels, ",") {
			if l == "" {
				continue
			}
			if after, ok := strings.CutPrefix(l, "le="); ok {
				le = strings.Trim(after, `"`)
				continue
			}
			keep = append(keep, l)
		}
		key := func(base string) string {
			if len(keep) == 0 {
				return base
			}
			return base + "{" + strings.Join(keep, ",") + "}"
		}
		switch {
		case strings.HasSuffix(name, "_bucket"):
			f, err := strconv.ParseFloat(le, 64)
			if le == "+Inf" {
				f, err = math.Inf(1), nil
			}
			if err == nil {
				h := get(key(strings.TrimSuffix(name, "_bucket")))
				h.buckets = append(h.buckets, [2]float64{f, v})
			}
		case strings.HasSuffix(name, "_sum"):
			get(key(strings.TrimSuffix(name, "_sum"))).sum = v
		case strings.HasSuffix(name, "_count"):
			get(key(strings.TrimSuffix(name, "_count"))).count = v
		}
	}
	for _, h := range hs {
		slices.SortFunc(h.buckets, func(a, b [2]float64) int { return cmpF(a[0], b[0]) })
	}
	return hs, sc.Err()
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// vmRSS is a process's resident set in bytes, 0 if unknown.
func vmRSS(pid int) uint64 {
	kv, err := readKV(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return kv["VmRSS:"] << 10
}

func cgroupPids(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func memAvailable() (uint64, error) {
	kv, err := readKV("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v, ok := kv["MemAvailable:"]
	if !ok {
		return 0, errors.New("no MemAvailable in /proc/meminfo")
	}
	return v << 10, nil // kB
}

// readKV reads "key value [unit]" lines (memory.stat, /proc/meminfo).
func readKV(file string) (map[string]uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	kv := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			kv[f[0]] = v
		}
	}
	return kv, nil
}

func readUint(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func mib(b float64) float64 { return b / (1 << 20) }

func http1() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true) // HTTP/1.1 keep-alive, as the SDKs speak
	return p
}
