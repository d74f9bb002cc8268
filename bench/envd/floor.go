package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

// The floor: the least a Go HTTP/1.1 server can do for the same round trip, to read envd's
// overhead against. It reads the request, starts /bin/true with os/exec and a stdout pipe,
// flushes a start line, drains the pipe, waits, and writes an end line: no Connect, no
// protobuf, no logging, no middleware. It runs as this program started again with
// -floor-server.

// serveFloor serves the floor handler on addr until the process is killed.
func serveFloor(addr string) error {
	srv := &http.Server{Addr: addr, Protocols: httpProtocols(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		cmd := exec.Command("/bin/true")
		out, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "start %d\n", cmd.Process.Pid)
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, out)
		err = cmd.Wait()
		fmt.Fprintf(w, "end %v\n", err)
	})}
	return srv.ListenAndServe()
}

// startFloor starts the floor server and returns one timed round trip through it (with the
// client envd's round trips use), its pid, and a stop function.
func startFloor(ctx context.Context, hc *http.Client) (one func() (time.Duration, error), pid int, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, nil, err
	}
	addr, err := measure.FreeAddr()
	if err != nil {
		return nil, 0, nil, err
	}
	srv := exec.Command(self, "-floor-server", addr)
	srv.Stderr = os.Stderr
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		return nil, 0, nil, fmt.Errorf("start floor server: %w", err)
	}
	stop = func() { _ = srv.Process.Kill(); _ = srv.Wait() }
	url := "http://" + addr + "/"
	one = func() (time.Duration, error) {
		t0 := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("x"))
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(t0)
		if err == nil && !strings.Contains(string(body), "end <nil>") {
			err = fmt.Errorf("floor server: %q", body)
		}
		return took, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := one(); err == nil {
			return one, srv.Process.Pid, stop, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, 0, nil, errors.Join(errors.New("floor server did not answer"), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
