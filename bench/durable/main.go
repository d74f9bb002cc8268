// Command durable benchmarks snapshot pause, restore, fork and snapshot size of `cove
// server` and prints figures beside the issue's goals. It never fails on a missed goal: it
// is a measuring tool, not a test.
//
//	go run ./bench/durable            # 64 MB and 512 MB of touched memory, 10 and 5 rounds
//	go run ./bench/durable -n 3       # fewer rounds
//
// It needs root and CRIU 4 (scripts/criu.sh). It builds cove, starts its own `cove server` on
// a free loopback port with a fresh data dir (sandboxes get 1.5 GiB of memory so 512 MB fits)
// and the shared test templates ($COVE_TEST_TEMPLATES, /var/lib/cove-test-templates by
// default), and stops it (killing its sandboxes) at the end.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

func main() {
	rounds := flag.Int("n", 10, "pause/resume rounds for 64 MB (half as many for 512 MB), and forks")
	flag.Parse()
	if err := run(*rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench/durable:", err)
		os.Exit(1)
	}
}

type server struct {
	url, key string
	cmd      *exec.Cmd
}

func start(bin, data string, lazy bool) (*server, error) {
	cmd := exec.Command(bin, "server", "--data", data, "--templates", covetest.TemplatesDir(), "--addr", "127.0.0.1:0",
		"--no-build", "--on-stop", "kill", "--sandbox-memory-mb", "1536", fmt.Sprintf("--restore-lazy=%v", lazy))
	logf, err := os.Create(filepath.Join(data, "bench-server.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "==> Cove is up at "); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			key, err := os.ReadFile(filepath.Join(data, "initial-api-key"))
			return &server{url: strings.TrimSpace(u), key: strings.TrimSpace(string(key)), cmd: cmd}, err
		}
	}
	return nil, fmt.Errorf("cove server exited before it was up (log: %s)", logf.Name())
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

func (s *server) call(method, path string, body any, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	req.Header.Set("X-API-Key", s.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return res.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if out != nil {
		return res.StatusCode, json.Unmarshal(b, out)
	}
	return res.StatusCode, nil
}

// execIn runs a shell script in the sandbox through the CLI and waits for it.
func execIn(bin string, s *server, id, script string) error {
	cmd := exec.Command(bin, "exec", id, "--", script)
	cmd.Env = append(os.Environ(), "COVE_API_URL="+s.url, "COVE_API_KEY="+s.key)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("exec %q: %w: %s", script, err, out)
	}
	return nil
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

func run(rounds int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root")
	}
	tmp, err := os.MkdirTemp("", "cove-bench-durable-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := covetest.BuildBinary(tmp)
	if err != nil {
		return err
	}
	// Each way of resuming in turn, on a server of its own: every page read before the
	// sandbox runs (the eager restore), then pages served as they are touched (lazy).
	for _, lazy := range []bool{false, true} {
		if err := runMode(bin, filepath.Join(tmp, fmt.Sprintf("data-lazy-%v", lazy)), lazy, rounds); err != nil {
			return err
		}
	}
	return nil
}

// runMode measures one server, resuming lazily or not.
func runMode(bin, data string, lazy bool, rounds int) error {
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	s, err := start(bin, data, lazy)
	if err != nil {
		return err
	}
	defer s.stop()

	mode := "eager restore (--restore-lazy=false): every page read before the sandbox runs"
	if lazy {
		mode = "lazy restore (--restore-lazy): pages served on first touch, the rest in the background"
	}
	fmt.Printf("\n== %s\n%-44s %10s %10s   %s\n", mode, "what", "p50", "p99", "goal")
	if err := zeroPages(bin, s); err != nil {
		return err
	}
	for _, mb := range []int{64, 512} {
		n := rounds
		if mb > 64 {
			n = max(1, rounds/2)
		}
		var sb struct {
			SandboxID string `json:"sandboxID"`
		}
		if _, err := s.call(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 3600}, &sb); err != nil {
			return err
		}
		// Touched memory that does not compress: random bytes held by a sleeping process.
		script := fmt.Sprintf(`nohup python3 -c 'import os,time; n=%d<<20; x=bytearray(n); [x.__setitem__(slice(i,i+(1<<20)),os.urandom(1<<20)) for i in range(0,n,1<<20)]; open("/tmp/ready","w").write("1"); time.sleep(100000)' >/dev/null 2>&1 & `+
			`for i in $(seq 600); do [ -e /tmp/ready ] && exit 0; sleep 0.1; done; exit 1`, mb)
		if err := execIn(bin, s, sb.SandboxID, script); err != nil {
			return err
		}
		var pauses, resumes, afterFirst, freezes, thaws []time.Duration
		var bytes float64
		for i := 0; i < n; i++ {
			begun := time.Now()
			if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{}, nil); err != nil {
				return err
			}
			pauses = append(pauses, time.Since(begun))
			begun = time.Now()
			if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 3600}, nil); err != nil {
				return err
			}
			resumes = append(resumes, time.Since(begun))
			// The held memory read back whole: a lazy restore's pages all arrive, intact.
			if err := execIn(bin, s, sb.SandboxID, "kill -0 $(pgrep -f bytearray) && test -e /tmp/ready"); err != nil {
				return fmt.Errorf("after resume %d: %w", i+1, err)
			}
			afterFirst = append(afterFirst, time.Since(begun))
			begun = time.Now()
			if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{"kind": "freeze"}, nil); err != nil {
				return err
			}
			freezes = append(freezes, time.Since(begun))
			begun = time.Now()
			if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 3600}, nil); err != nil {
				return err
			}
			thaws = append(thaws, time.Since(begun))
		}
		var evs []struct {
			Data map[string]any `json:"eventData"`
		}
		// The newest snapshot pause (freezes have no size), newest first.
		if _, err := s.call(http.MethodGet, "/events/sandboxes/"+sb.SandboxID+"?limit=10&type=sandbox.lifecycle.paused", nil, &evs); err == nil {
			for _, e := range evs {
				if b, ok := e.Data["snapshot_bytes"].(float64); ok && bytes == 0 {
					bytes = b
				}
			}
		}
		goal := "-"
		if mb == 64 {
			goal = "resume <= 120 ms p50 (E2B ~1 s)"
		}
		fmt.Printf("%-44s %10s %10s   %s\n", fmt.Sprintf("pause (snapshot to disk), %d MB, n=%d", mb, n), ms(pct(pauses, .5)), ms(pct(pauses, .99)), "-")
		fmt.Printf("%-44s %10s %10s   %s\n", fmt.Sprintf("resume (restore, envd answers), %d MB", mb), ms(pct(resumes, .5)), ms(pct(resumes, .99)), goal)
		fmt.Printf("%-44s %10s %10s   %s\n", fmt.Sprintf("resume and a first command, %d MB", mb), ms(pct(afterFirst, .5)), ms(pct(afterFirst, .99)), "-")
		fmt.Printf("%-44s %10s %10s   %s\n", fmt.Sprintf("pause (freeze, in RAM), %d MB", mb), ms(pct(freezes, .5)), ms(pct(freezes, .99)), "-")
		fmt.Printf("%-44s %10s %10s   %s\n", fmt.Sprintf("resume (thaw), %d MB", mb), ms(pct(thaws, .5)), ms(pct(thaws, .99)), "-")
		fmt.Printf("%-44s %10.1f MiB (%.2f x the touched memory)\n", fmt.Sprintf("snapshot on disk, %d MB touched", mb), bytes/(1<<20), bytes/float64(mb<<20))
		if mb == 64 {
			var forks []time.Duration
			for i := 0; i < rounds; i++ {
				var res []struct {
					Sandbox *struct {
						SandboxID string `json:"sandboxID"`
					} `json:"sandbox"`
				}
				begun := time.Now()
				if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/fork", map[string]any{"count": 1, "timeout": 600}, &res); err != nil {
					return err
				}
				forks = append(forks, time.Since(begun))
				for _, r := range res {
					if r.Sandbox != nil {
						_, _ = s.call(http.MethodDelete, "/sandboxes/"+r.Sandbox.SandboxID, nil, nil)
					}
				}
			}
			fmt.Printf("%-44s %10s %10s   %s\n", "fork count 1 (parent checkpointed), 64 MB", ms(pct(forks, .5)), ms(pct(forks, .99)), "-")
		}
		_, _ = s.call(http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
	}
	return nil
}

// zeroPages prints what a snapshot of 64 MB of touched zero pages takes on disk: they are
// holes (internal/sandbox/runtime/sparse.go), so next to nothing, where they took 64 MB before.
func zeroPages(bin string, s *server) error {
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if _, err := s.call(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 600}, &sb); err != nil {
		return err
	}
	defer func() { _, _ = s.call(http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil) }()
	script := `nohup python3 -c 'import time; n=64<<20; x=bytearray(n); x[::4096]=bytes(len(x[::4096])); open("/tmp/ready","w").write("1"); time.sleep(100000)' >/dev/null 2>&1 & ` +
		`for i in $(seq 600); do [ -e /tmp/ready ] && exit 0; sleep 0.1; done; exit 1`
	if err := execIn(bin, s, sb.SandboxID, script); err != nil {
		return err
	}
	if _, err := s.call(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", map[string]any{}, nil); err != nil {
		return err
	}
	var evs []struct {
		Data map[string]any `json:"eventData"`
	}
	if _, err := s.call(http.MethodGet, "/events/sandboxes/"+sb.SandboxID+"?limit=1&type=sandbox.lifecycle.paused", nil, &evs); err != nil || len(evs) == 0 {
		return fmt.Errorf("the paused event: %v", err)
	}
	b, _ := evs[0].Data["snapshot_bytes"].(float64)
	fmt.Printf("%-44s %10.1f MiB (%.2f x the touched memory; zero pages are holes)\n", "snapshot on disk, 64 MB touched zeros", b/(1<<20), b/float64(64<<20))
	return nil
}
