package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

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
	cmd := exec.Command(b.cfg.cove, append([]string{"server", "--data", b.cfg.data, "--addr", "127.0.0.1:0", "--log-level", "info", "--pool-refill-per-sec", "50"},
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

func http1() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true) // HTTP/1.1 keep-alive, as the SDKs speak
	return p
}
