package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

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
	// The sandbox's namespace is the network manager's when the server gives sandboxes a
	// network, the runtime's pinned one when not: any of its processes' is the same.
	procs, err := os.ReadFile(filepath.Join(memcgRoot, id, "cgroup.procs"))
	if err != nil || len(strings.Fields(string(procs))) == 0 {
		return fmt.Errorf("sandbox %s's processes: %q %v", id, procs, err)
	}
	ns := filepath.Join("/proc", strings.Fields(string(procs))[0], "ns", "net")
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
