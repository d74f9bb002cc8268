// Command envd benchmarks `cove envd` against bare process spawning and prints figures,
// targets and pass/miss. It never fails on a missed target: it is a measuring tool, not a test.
//
//	go run ./bench/envd            # full run, a couple of minutes
//	go run ./bench/envd -quick     # CI smoke run, well under 20 s
//	go run ./bench/envd -json      # the table, then the same results as JSON
//
// It builds cove (or takes -cove), starts `cove envd` on a free loopback port, waits for
// GET /health, then measures: /bin/true round trips, stdout throughput, concurrent sleepers,
// and envd's idle RSS and CPU. -only runs a subset (for profiling envd under perf or pprof).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"

	"connectrpc.com/connect"

	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

type config struct {
	cove       string
	iters      int
	bytes      int64
	conc       []int
	settle     time.Duration
	idle       time.Duration
	acceptGzip bool
	only       map[string]bool
	asJSON     bool
}

// result is one row of the table.
type result struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Pass   *bool   `json:"pass,omitempty"` // nil: informational
}

func main() {
	var c config
	var quick bool
	var conc, only string
	flag.StringVar(&c.cove, "cove", "", "cove binary to run (default: go build ./cmd/cove into a temp dir)")
	flag.IntVar(&c.iters, "n", 2000, "iterations of the /bin/true round trip (each way)")
	flag.Int64Var(&c.bytes, "bytes", 1<<30, "bytes for the stdout throughput run")
	flag.StringVar(&conc, "conc", "50,200", "comma-separated counts of concurrent `sleep 1; echo x` streams")
	flag.DurationVar(&c.settle, "settle", 3*time.Second, "pause after the runs before sampling idle RSS")
	flag.DurationVar(&c.idle, "idle", 10*time.Second, "window for idle CPU; envd drops its mappings of the binary after 10 s idle")
	flag.BoolVar(&c.acceptGzip, "accept-gzip", true, "let the client accept gzip responses (connect-go's default)")
	flag.StringVar(&only, "only", "true,busy,obs,tput,conc,idle", "phases to run")
	flag.BoolVar(&quick, "quick", false, "fast smoke run: -n 200 -bytes 256MiB -settle 1s -idle 10s")
	flag.BoolVar(&c.asJSON, "json", false, "also print the results as JSON")
	floor := flag.String("floor-server", "", "internal: serve the floor handler on this address (see floor.go)")
	flag.Parse()
	if *floor != "" {
		if err := serveFloor(*floor); err != nil {
			fmt.Fprintln(os.Stderr, "bench/envd: floor server:", err)
			os.Exit(1)
		}
		return
	}
	if quick {
		c.iters, c.bytes, c.settle, c.idle = 200, 256<<20, time.Second, 10*time.Second
	}
	for _, s := range strings.Split(conc, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			c.conc = append(c.conc, n)
		}
	}
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		c.only[strings.TrimSpace(s)] = true
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/envd:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if c.cove == "" {
		dir, err := os.MkdirTemp("", "bench-envd-")
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

	addr, err := measure.FreeAddr()
	if err != nil {
		return err
	}
	// --subreaper: envd reaps every child from SIGCHLD, as it does as a sandbox's PID 1.
	envd := exec.Command(c.cove, "envd", "--addr", addr, "--log-level", "warn", "--subreaper")
	envd.Stdout, envd.Stderr = os.Stderr, os.Stderr
	envd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with us, even on a crash
	if err := envd.Start(); err != nil {
		return fmt.Errorf("start envd: %w", err)
	}
	defer func() { _ = envd.Process.Kill(); _ = envd.Wait() }()
	pid := envd.Process.Pid
	base := "http://" + addr

	hc := &http.Client{Transport: &http.Transport{
		Protocols:           httpProtocols(),
		MaxIdleConnsPerHost: 512,
		DisableCompression:  true,
	}}
	if err := waitHealthy(ctx, hc, base, 10*time.Second); err != nil {
		return err
	}
	rssStart, err := readMemory(pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "envd pid %d on %s\n", pid, addr)

	var opts []connect.ClientOption
	if !c.acceptGzip {
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	client := processconnect.NewProcessClient(hc, base, opts...)

	var rows []result
	add := func(metric string, v float64, unit, target string, pass *bool) {
		rows = append(rows, result{metric, v, unit, target, pass})
	}
	info := func(metric string, v float64, unit string) { add(metric, v, unit, "", nil) }
	check := func(metric string, v float64, unit, target string, ok bool) { add(metric, v, unit, target, &ok) }

	if c.only["true"] {
		fmt.Fprintf(os.Stderr, "true round trips x%d ...\n", c.iters)
		rt, err := roundTrips(ctx, hc, base, client, pid, c.iters)
		if err != nil {
			return err
		}
		envdRT, bareRT, floorRT := rt.envd, rt.bare, rt.floor
		e50, e99 := measure.Pct(envdRT, 50), measure.Pct(envdRT, 99)
		b50, b99 := measure.Pct(bareRT, 50), measure.Pct(bareRT, 99)
		info("true p50 via envd", measure.Ms(e50), "ms")
		info("true p99 via envd", measure.Ms(e99), "ms")
		info("true p50 bare spawn", measure.Ms(b50), "ms")
		info("true p99 bare spawn", measure.Ms(b99), "ms")
		check("true overhead p50 (envd-bare)", measure.Ms(e50-b50), "ms", "<= 0.3 ms", e50-b50 <= 300*time.Microsecond)
		info("true ratio p50 (envd/bare)", float64(e50)/float64(b50), "x")
		f50 := measure.Pct(floorRT, 50)
		info("true overhead p50, floor: bare Go net/http + os/exec", measure.Ms(f50-b50), "ms")
		info("true overhead p50 via envd, plain HTTP client", measure.Ms(measure.Pct(rt.lean, 50)-b50), "ms")
		// envd's own CPU per round trip: steadier than wall time on a busy machine.
		info("true envd CPU per run", rt.envdCPU, "ms")
		info("true floor server CPU per run", rt.floorCPU, "ms")
	}

	if c.only["busy"] {
		fmt.Fprintf(os.Stderr, "true round trips during two gzip downloads ...\n")
		rts, rate, err := busyRoundTrips(ctx, base, client, 4*time.Second)
		if err != nil {
			return err
		}
		info("true p50 via envd during gzip downloads", measure.Ms(measure.Pct(rts, 50)), "ms")
		info("true p99 via envd during gzip downloads", measure.Ms(measure.Pct(rts, 99)), "ms")
		info("  the downloads meanwhile", rate, "MiB/s")
	}

	if c.only["obs"] {
		fmt.Fprintf(os.Stderr, "observability on vs off x%d ...\n", c.iters)
		onRT, offRT, err := observability(ctx, c, hc, client)
		if err != nil {
			return err
		}
		on50, off50 := measure.Pct(onRT, 50), measure.Pct(offRT, 50)
		info("`seq 100` p50, collection off", measure.Ms(off50), "ms")
		info("`seq 100` p50, collection on", measure.Ms(on50), "ms")
		overhead := (float64(on50)/float64(off50) - 1) * 100
		check("observability overhead p50", overhead, "%", "<= 5 %", overhead <= 5)
	}

	if c.only["tput"] {
		fmt.Fprintf(os.Stderr, "stdout throughput %d MiB ...\n", c.bytes>>20)
		// The client decodes every event with connect-go's codec, which allocates each 32 KiB
		// chunk afresh: at the runtime's default GOGC its garbage collector, not envd, sets the
		// pace on two cores. The measured run gives the client GOGC=800 (envd keeps its own
		// default); the default-GOGC run is printed beside it.
		old := debug.SetGCPercent(800)
		cpu0, _ := measure.CPUTicks(pid)
		ev, err := throughputEnvd(ctx, client, c.bytes)
		cpu1, _ := measure.CPUTicks(pid)
		debug.SetGCPercent(old)
		if err != nil {
			return err
		}
		evDefault, err := throughputEnvd(ctx, client, c.bytes)
		if err != nil {
			return err
		}
		bv, err := throughputBare(c.bytes)
		if err != nil {
			return err
		}
		check("stdout via envd (client GOGC=800)", ev, "MiB/s", ">= 1024 MiB/s", ev >= 1024)
		info("stdout via envd (client GOGC=100)", evDefault, "MiB/s")
		info("stdout bare spawn", bv, "MiB/s")
		info("stdout ratio (envd/bare)", ev/bv, "x")
		info("stdout envd CPU per GiB", float64(cpu1-cpu0)/100/(float64(c.bytes)/(1<<30)), "s")
	}

	if c.only["conc"] {
		for _, n := range c.conc {
			fmt.Fprintf(os.Stderr, "%d concurrent sleepers ...\n", n)
			wall, okCount := concurrent(ctx, client, n)
			check(fmt.Sprintf("%d x `sleep 1; echo x` wall (%d/%d ok)", n, okCount, n), wall.Seconds(), "s",
				"all ok, < 2 s", okCount == n && wall < 2*time.Second)
		}
	}

	if c.only["idle"] {
		hc.CloseIdleConnections() // idle: no client holds a connection (the first call after dials again)
		fmt.Fprintf(os.Stderr, "idle: settle %v, CPU over %v ...\n", c.settle, c.idle)
		measure.Sleep(ctx, c.settle)
		settled, err := readMemory(pid)
		if err != nil {
			return err
		}
		cpu0, err := measure.CPUTicks(pid)
		if err != nil {
			return err
		}
		t0 := time.Now()
		measure.Sleep(ctx, c.idle)
		cpu1, err := measure.CPUTicks(pid)
		if err != nil {
			return err
		}
		idleFor := time.Since(t0) + c.settle
		mem, err := readMemory(pid)
		if err != nil {
			return err
		}
		const clkTck = 100 // USER_HZ on Linux
		cpuPct := float64(cpu1-cpu0) / clkTck / time.Since(t0).Seconds() * 100
		// The first command after the idle window pays for mapping back the code it runs.
		cold, err := roundTrip(ctx, client)
		if err != nil {
			return err
		}
		warm, err := roundTrip(ctx, client)
		if err != nil {
			return err
		}
		info("envd RSS at start (before its first idle trim)", mib(rssStart.rss), "MiB")
		info(fmt.Sprintf("envd RSS %v after load", c.settle), mib(settled.rss), "MiB")
		idle := fmt.Sprintf("%.0f s idle", idleFor.Seconds())
		check("envd RSS after "+idle, mib(mem.rss), "MiB", "<= 8 MiB", mem.rss <= 8<<20)
		info("  of which anonymous (private)", mib(mem.anon), "MiB")
		info("  of which the binary and libraries (shared)", mib(mem.file), "MiB")
		info("envd PSS after "+idle, mib(mem.pss), "MiB")
		check("envd idle CPU", cpuPct, "% core", "~0 (< 0.5 %)", cpuPct < 0.5)
		info("`true` p1 via envd after "+idle, measure.Ms(cold), "ms")
		info("`true` via envd right after that", measure.Ms(warm), "ms")
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	printTable(rows)
	if c.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return nil
}

// start runs one Start stream to its end event and returns stdout and the exit code; it
// reads the stream to its end so the keep-alive connection is reused.
func start(ctx context.Context, client processconnect.ProcessClient, cmd string, args []string, onStdout func([]byte)) (int32, error) {
	noStdin := false
	stream, err := client.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: cmd, Args: args},
		Stdin:   &noStdin,
	}))
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	code, ended := int32(0), false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && onStdout != nil {
			onStdout(d.GetStdout())
		}
		if end := ev.GetEnd(); end != nil {
			code, ended = end.GetExitCode(), true
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	if !ended {
		return 0, errors.New("stream closed without an end event")
	}
	return code, nil
}

// roundTrip times one /bin/true through envd, from the call to the end event.
func roundTrip(ctx context.Context, client processconnect.ProcessClient) (time.Duration, error) {
	noStdin := false
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}, Stdin: &noStdin}
	t0 := time.Now()
	stream, err := client.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	var took time.Duration
	for stream.Receive() {
		if stream.Msg().GetEvent().GetEnd() != nil && took == 0 {
			took = time.Since(t0)
		}
	}
	if err := stream.Err(); err != nil {
		return 0, err
	}
	if took == 0 {
		return 0, errors.New("/bin/true: no end event")
	}
	return took, nil
}

// trueRuns are the /bin/true round trips four ways (envd through connect-go's client and
// through a plain HTTP POST, bare spawn, the floor), and the servers' CPU per run in ms.
type trueRuns struct {
	envd, bare, floor, lean []time.Duration
	envdCPU, floorCPU       float64
}

// trueBlocks is how many blocks each way's runs are cut into.
const trueBlocks = 10

// roundTrips times /bin/true the four ways of trueRuns in blocks that take turns (envd,
// bare, floor, plain HTTP; then bare, floor, plain HTTP, envd; ...), so that a slow spell of
// this shared machine falls on all four alike. Runs are not interleaved one by
// one: that made the bare spawns share the machine with the tail of each envd call (its
// logging and bookkeeping after the end event), which flattered envd. Each block starts
// with a few untimed runs.
func roundTrips(ctx context.Context, hc *http.Client, base string, client processconnect.ProcessClient, envdPID, n int) (trueRuns, error) {
	var r trueRuns
	floor, floorPID, stop, err := startFloor(ctx, hc)
	if err != nil {
		return r, err
	}
	defer stop()
	ways := []struct {
		one func() (time.Duration, error)
		out *[]time.Duration
		pid int
		cpu *int64
	}{
		{func() (time.Duration, error) { return roundTrip(ctx, client) }, &r.envd, envdPID, new(int64)},
		{measure.Timed(func() error { return exec.Command("/bin/true").Run() }), &r.bare, 0, nil},
		{floor, &r.floor, floorPID, new(int64)},
		{func() (time.Duration, error) { return leanRoundTrip(ctx, hc, base) }, &r.lean, 0, nil},
	}
	per := max(n/trueBlocks, 1)
	runs := 0
	for b := range trueBlocks {
		for k := range ways {
			w := ways[(b+k)%len(ways)]
			var c0 int64
			if w.cpu != nil {
				c0, _ = measure.CPUTicks(w.pid)
			}
			ds, err := measure.Runs(per, w.one)
			if err != nil {
				return r, err
			}
			if w.cpu != nil {
				c1, _ := measure.CPUTicks(w.pid)
				*w.cpu += c1 - c0
			}
			*w.out = append(*w.out, ds...)
		}
		runs += per + measure.Warm(per)
	}
	r.envdCPU = float64(*ways[0].cpu) * 10 / float64(runs)
	r.floorCPU = float64(*ways[2].cpu) * 10 / float64(runs)
	return r, nil
}

// observability times a command that writes 100 lines through a second envd that collects
// (output lines and command records on its stdout, read here as the host would) against the
// first, which does not; calls alternate so the machine's noise falls on both alike.
func observability(ctx context.Context, c config, hc *http.Client, off processconnect.ProcessClient) (on, offRT []time.Duration, err error) {
	addr, err := measure.FreeAddr()
	if err != nil {
		return nil, nil, err
	}
	envd := exec.Command(c.cove, "envd", "--addr", addr, "--log-level", "warn", "--subreaper", "--collect", "on")
	envd.Stderr = os.Stderr
	envd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := envd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := envd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start collecting envd: %w", err)
	}
	defer func() { _ = envd.Process.Kill(); _ = envd.Wait() }()
	go func() { _, _ = io.Copy(io.Discard, out) }() // the host's side of the pipe
	if err := waitHealthy(ctx, hc, "http://"+addr, 10*time.Second); err != nil {
		return nil, nil, err
	}
	onClient := processconnect.NewProcessClient(hc, "http://"+addr)
	one := func(cl processconnect.ProcessClient) (time.Duration, error) {
		t0 := time.Now()
		if _, err := start(ctx, cl, "/usr/bin/seq", []string{"100"}, nil); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	for i := range c.iters + measure.Warm(c.iters) {
		a, err := one(onClient)
		if err != nil {
			return nil, nil, err
		}
		b, err := one(off)
		if err != nil {
			return nil, nil, err
		}
		if i >= measure.Warm(c.iters) {
			on, offRT = append(on, a), append(offRT, b)
		}
	}
	return on, offRT, nil
}

func headArgs(n int64) []string { return []string{"-c", strconv.FormatInt(n, 10), "/dev/zero"} }

func throughputEnvd(ctx context.Context, client processconnect.ProcessClient, n int64) (float64, error) {
	var got int64
	t0 := time.Now()
	code, err := start(ctx, client, "head", headArgs(n), func(b []byte) { got += int64(len(b)) })
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if code != 0 || got != n {
		return 0, fmt.Errorf("head via envd: exit %d, %d of %d bytes", code, got, n)
	}
	return float64(n) / (1 << 20) / took.Seconds(), nil
}

// throughputBare reads head's stdout pipe in 32 KiB reads, the size of envd's data events.
func throughputBare(n int64) (float64, error) {
	t0 := time.Now()
	cmd := exec.Command("head", headArgs(n)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	got, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, out, make([]byte, 32<<10))
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	took := time.Since(t0)
	if err != nil || got != n {
		return 0, fmt.Errorf("head bare: %v, %d of %d bytes", err, got, n)
	}
	return float64(n) / (1 << 20) / took.Seconds(), nil
}

// concurrent starts n `sleep 1; echo x` streams at once and returns the wall time until all
// ended and how many printed exactly "x\n" and exited 0.
func concurrent(ctx context.Context, client processconnect.ProcessClient, n int) (time.Duration, int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	t0 := time.Now()
	for range n {
		wg.Go(func() {
			var out []byte
			code, err := start(ctx, client, "/bin/bash", []string{"-c", "sleep 1; echo x"}, func(b []byte) { out = append(out, b...) })
			if err != nil || code != 0 || string(out) != "x\n" {
				fmt.Fprintf(os.Stderr, "  sleeper: err=%v exit=%d out=%q\n", err, code, out)
				return
			}
			mu.Lock()
			ok++
			mu.Unlock()
		})
	}
	wg.Wait()
	return time.Since(t0), ok
}

func printTable(rows []result) {
	w := 0
	for _, r := range rows {
		w = max(w, len(r.Metric))
	}
	fmt.Printf("%-*s  %15s  %-16s  %s\n", w, "metric", "value", "target", "result")
	for _, r := range rows {
		verdict := "info"
		if r.Pass != nil {
			verdict = map[bool]string{true: "pass", false: "MISS"}[*r.Pass]
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		fmt.Printf("%-*s  %15s  %-16s  %s\n", w, r.Metric, fmt.Sprintf("%.3f %s", r.Value, r.Unit), target, verdict)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func httpProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true) // HTTP/1.1 keep-alive, as the brief asks
	return p
}

func waitHealthy(ctx context.Context, hc *http.Client, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("envd not healthy (GET /health != 204) after %v", limit)
}

// memory is a process's resident memory, in bytes.
type memory struct {
	rss, anon, file, pss int64
}

// readMemory reads VmRSS, RssAnon and RssFile from /proc/PID/status and Pss from
// /proc/PID/smaps_rollup (0 where the kernel has none).
func readMemory(pid int) (memory, error) {
	var m memory
	fields := map[string]*int64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file, "Pss:": &m.pss}
	for _, file := range []string{"status", "smaps_rollup"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			if file == "status" {
				return m, err
			}
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			f := strings.Fields(sc.Text()) // "VmRSS:", "17756", "kB"
			if len(f) < 2 {
				continue
			}
			if p, ok := fields[f[0]]; ok && *p == 0 {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					*p = kb << 10
				}
			}
		}
		f.Close()
	}
	if m.rss == 0 {
		return m, errors.New("no VmRSS in /proc status")
	}
	return m, nil
}
