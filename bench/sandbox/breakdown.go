package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

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
	dir := filepath.Join(b.cfg.data, "templates")
	if env := os.Getenv("COVE_TEMPLATES"); env != "" {
		dir = env // the server's store too (cove server reads $COVE_TEMPLATES)
	}
	// The template records of a scratch store: the trees' manifests make them (adoption).
	db, err := sqlite.Open(ctx, filepath.Join(b.cfg.data, "bench-breakdown", "templates.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	ts, err := template.OpenAt(ctx, dir, db)
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
