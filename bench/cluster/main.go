// Command cluster benchmarks creates on a cluster of one node against a cluster of three, in
// one run, each node started with the same per-node limits, and prints creates per second and
// the create's p50/p99 side by side. It is a measuring tool, not a test: it never fails on a
// figure.
//
//	go run ./bench/cluster                 # 60 creates, 6 at a time, on each cluster
//	go run ./bench/cluster -n 120 -c 12
//
// It needs root, PostgreSQL 15 and versitygw (make deps; a directory stands in for the object
// store, saying so, without versitygw). It also drains a node holding one sandbox with 64 MB
// touched, -drains times, and prints how long the live migration took. It builds cove, starts a PostgreSQL on a temp
// dir, and per cluster one database and its nodes (`cove server --node`, loopback ports, no
// sandbox network, the shared test templates), and stops them all (killing their sandboxes).
// Every create goes through the first node, which places it; each sandbox is killed after.
// On one host the nodes share its CPUs: three nodes measure the cost of placement and
// forwarding, not three hosts' capacity.
package main

import (
	"bufio"
	"bytes"
	"context"
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
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/blob/blobtest"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
)

var rounds = flag.Int("drains", 5, "drains of a node holding one sandbox with 64 MB touched")

func main() {
	n := flag.Int("n", 60, "creates on each cluster")
	c := flag.Int("c", 6, "creates under way at once")
	flag.Parse()
	if err := run(*n, *c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster:", err)
		os.Exit(1)
	}
}

type node struct {
	url, key, data, node string
	cmd                  *exec.Cmd
}

func (nd *node) stop() {
	if nd.cmd.ProcessState == nil {
		_ = nd.cmd.Process.Signal(syscall.SIGTERM)
		_ = nd.cmd.Wait()
	}
	os.RemoveAll(nd.data)
	// The host-wide names the node derived from its name (its sandboxes are gone by now).
	for _, d := range []string{"/run/cove/" + nd.node + "/runc", "/run/cove/" + nd.node + "/runsc", "/run/cove/" + nd.node + "/netns", "/run/cove/" + nd.node} {
		_ = os.Remove(d)
	}
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/cove-" + nd.node)
	for _, p := range parents {
		_ = os.Remove(p)
	}
}

// startNode starts `cove server --node name` on database dsn.
func startNode(bin, dsn, secret, name, key string, extra ...string) (*node, error) {
	data, err := os.MkdirTemp("", "cove-bench-cluster-")
	if err != nil {
		return nil, err
	}
	if key != "" {
		if err := os.WriteFile(filepath.Join(data, "initial-api-key"), []byte(key+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	addr, err := measure.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server", "--data", data, "--templates", covetest.TemplatesDir(), "--addr", addr, "--no-build",
		"--on-stop", "kill", "--network=false", "--state", dsn, "--node", name, "--advertise", "http://"+addr,
		"--cluster-secret-file", secret, "--node-max-sandboxes", "50", "--node-max-starts", "4", "--log-level", "info", "--node-lease", "1s")
	cmd.Args = append(cmd.Args, extra...)
	logf, err := os.Create(filepath.Join(data, "server.log"))
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
			b, err := os.ReadFile(filepath.Join(data, "initial-api-key"))
			return &node{url: strings.TrimSpace(u), key: strings.TrimSpace(string(b)), data: data, node: name, cmd: cmd}, err
		}
	}
	return nil, fmt.Errorf("node %s exited before it was up (log: %s)", name, logf.Name())
}

// newDatabase makes database name on pg and returns its DSN.
func newDatabase(ctx context.Context, pg *pgtest.Server, name string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return pg.DSN(name), nil
}

type result struct {
	nodes   int
	perSec  float64
	lat     []time.Duration
	spread  map[string]int
	refused int
}

// load makes n creates, c at a time, through api, killing each sandbox after.
func load(api, key string, n, c int) (result, error) {
	r := result{spread: map[string]int{}}
	var mu sync.Mutex
	var firstErr error
	jobs := make(chan int)
	var wg sync.WaitGroup
	begun := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t0 := time.Now()
				status, body, err := call(http.MethodPost, api+"/sandboxes", key, `{"templateID":"base","timeout":120}`)
				d := time.Since(t0)
				mu.Lock()
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
				case status == http.StatusTooManyRequests:
					r.refused++
				case status != http.StatusCreated && firstErr == nil:
					firstErr = fmt.Errorf("create: %d %s", status, body)
				}
				mu.Unlock()
				if status != http.StatusCreated {
					continue
				}
				var sb struct {
					SandboxID string `json:"sandboxID"`
					ClientID  string `json:"clientID"`
				}
				_ = json.Unmarshal(body, &sb)
				mu.Lock()
				r.lat = append(r.lat, d)
				r.spread[sb.ClientID]++
				mu.Unlock()
				_, _, _ = call(http.MethodDelete, api+"/sandboxes/"+sb.SandboxID, key, "")
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	r.perSec = float64(len(r.lat)) / time.Since(begun).Seconds()
	slices.Sort(r.lat)
	return r, firstErr
}

func call(method, url, key, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

func run(n, c int) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "cove-bench-cluster-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := covetest.BuildBinary(tmp)
	if err != nil {
		return err
	}
	secret := filepath.Join(tmp, "secret")
	if err := os.WriteFile(secret, []byte("bench-cluster-secret-of-at-least-32-bytes"), 0o600); err != nil {
		return err
	}
	pg, err := pgtest.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer pg.Stop()
	objects, objectsKind, stopObjects, err := startObjects(tmp)
	if err != nil {
		return err
	}
	defer stopObjects()
	var results []result
	var drains drainTimes
	for i, size := range []int{1, 3} {
		dsn, err := newDatabase(ctx, pg, fmt.Sprintf("bench%d", i))
		if err != nil {
			return err
		}
		var nodes []*node
		key := ""
		for j := range size {
			nd, err := startNode(bin, dsn, secret, fmt.Sprintf("bench%d-%c", i, 'a'+j), key, "--objects", objects)
			if err != nil {
				return err
			}
			defer nd.stop()
			nodes = append(nodes, nd)
			key = nd.key
		}
		// A few creates first, so neither cluster's first ones pay for cold caches.
		if _, err := load(nodes[0].url, key, 4, 2); err != nil {
			return err
		}
		r, err := load(nodes[0].url, key, n, c)
		if err != nil {
			return err
		}
		r.nodes = size
		results = append(results, r)
		if size > 1 {
			if drains, err = drain(bin, nodes, *rounds); err != nil {
				return err
			}
		}
		for _, nd := range nodes {
			nd.stop()
		}
	}
	fmt.Printf("creates through the first node: %d, %d at a time; each node --node-max-starts 4 --node-max-sandboxes 50, one host (%s)\n",
		n, c, time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("%-8s %12s %10s %10s %8s  %s\n", "nodes", "creates/s", "p50 ms", "p99 ms", "429s", "placed")
	for _, r := range results {
		fmt.Printf("%-8d %12.1f %10.1f %10.1f %8d  %v\n", r.nodes, r.perSec, measure.Ms(measure.Pct(r.lat, 50)), measure.Ms(measure.Pct(r.lat, 99)), r.refused, r.spread)
	}
	one, three := results[0], results[1]
	fmt.Printf("ratio three/one: creates/s %.2f, p50 %.2f, p99 %.2f\n", three.perSec/one.perSec,
		measure.Ms(measure.Pct(three.lat, 50))/measure.Ms(measure.Pct(one.lat, 50)), measure.Ms(measure.Pct(three.lat, 99))/measure.Ms(measure.Pct(one.lat, 99)))
	if len(drains.wall) > 0 {
		fmt.Printf("drain of a node holding one sandbox with 64 MB touched (%d rounds, objects in %s): until it runs on another node p50 %.0f ms (p99 %.0f); the move itself (checkpoint, upload, hand-over, download, restore) p50 %.0f ms (p99 %.0f)\n",
			len(drains.wall), objectsKind, measure.Ms(measure.Pct(drains.wall, 50)), measure.Ms(measure.Pct(drains.wall, 99)), measure.Ms(measure.Pct(drains.move, 50)), measure.Ms(measure.Pct(drains.move, 99)))
	}
	return nil
}

// startObjects starts the pinned versitygw (make deps) as the object store, or falls back to
// a directory when it is not built, saying which.
func startObjects(tmp string) (addr, kind string, stop func(), err error) {
	bin, err := blobtest.Binary()
	if err != nil {
		return "file://" + filepath.Join(tmp, "objects"), "a directory (no versitygw built)", func() {}, os.MkdirAll(filepath.Join(tmp, "objects"), 0o700)
	}
	root := filepath.Join(tmp, "s3")
	if err := os.MkdirAll(filepath.Join(root, "bench"), 0o700); err != nil {
		return "", "", nil, err
	}
	listen, err := measure.FreeAddr()
	if err != nil {
		return "", "", nil, err
	}
	cmd := exec.Command(bin, "--access", "bench", "--secret", "bench-secret-0123456789", "--port", listen, "posix", root)
	if err := cmd.Start(); err != nil {
		return "", "", nil, err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", "bench")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret-0123456789")
	os.Setenv("AWS_REGION", "us-east-1")
	time.Sleep(500 * time.Millisecond)
	return fmt.Sprintf("s3://bench?endpoint=http://%s&region=us-east-1", listen), "versitygw (S3)", func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

type drainTimes struct{ wall, move []time.Duration }

// drain measures, rounds times, a drain of the node holding one sandbox with 64 MB of
// random bytes touched: until the sandbox runs on another node, and the move as that node
// logged it.
func drain(bin string, nodes []*node, rounds int) (drainTimes, error) {
	var out drainTimes
	a := nodes[0]
	token, err := os.ReadFile(filepath.Join(a.data, "admin-token"))
	if err != nil {
		return out, err
	}
	admin := strings.TrimSpace(string(token))
	for range rounds {
		status, body, err := call(http.MethodPost, a.url+"/sandboxes", a.key, `{"templateID":"base","timeout":600}`)
		if err != nil || status != http.StatusCreated {
			return out, fmt.Errorf("create: %d %s %v", status, body, err)
		}
		var sb struct {
			SandboxID string `json:"sandboxID"`
			ClientID  string `json:"clientID"`
		}
		_ = json.Unmarshal(body, &sb)
		script := `nohup python3 -c 'import os,time; n=64<<20; x=bytearray(n); [x.__setitem__(slice(i,i+(1<<20)),os.urandom(1<<20)) for i in range(0,n,1<<20)]; open("/tmp/ready","w").write("1"); time.sleep(100000)' >/dev/null 2>&1 & ` +
			`for i in $(seq 600); do [ -e /tmp/ready ] && exit 0; sleep 0.1; done; exit 1`
		cmd := exec.Command(bin, "exec", sb.SandboxID, "--", script)
		cmd.Env = append(os.Environ(), "COVE_API_URL="+a.url, "COVE_API_KEY="+a.key)
		if b, err := cmd.CombinedOutput(); err != nil {
			return out, fmt.Errorf("touch 64 MB: %w: %s", err, b)
		}
		var from *node
		for _, nd := range nodes {
			if strings.HasSuffix(sb.ClientID, nd.name()) {
				from = nd
			}
		}
		begun := time.Now()
		if err := adminCall(a.url, admin, "/admin/nodes/"+sb.ClientID+"/drain"); err != nil {
			return out, err
		}
		for {
			status, body, err := call(http.MethodGet, a.url+"/sandboxes/"+sb.SandboxID, a.key, "")
			var info struct {
				ClientID string `json:"clientID"`
				State    string `json:"state"`
			}
			_ = json.Unmarshal(body, &info)
			if err == nil && status == http.StatusOK && info.ClientID != sb.ClientID && info.State == "running" {
				break
			}
			if time.Since(begun) > time.Minute {
				return out, fmt.Errorf("%s not moved off %s in a minute", sb.SandboxID, sb.ClientID)
			}
			time.Sleep(20 * time.Millisecond)
		}
		out.wall = append(out.wall, time.Since(begun))
		if from != nil {
			// The moving node logs the move once the other has it running: a moment after.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if d, ok := movedIn(from, sb.SandboxID); ok {
					out.move = append(out.move, d)
					break
				}
			}
		}
		if err := adminCall(a.url, admin, "/admin/nodes/"+sb.ClientID+"/activate"); err != nil {
			return out, err
		}
		_, _, _ = call(http.MethodDelete, a.url+"/sandboxes/"+sb.SandboxID, a.key, "")
	}
	slices.Sort(out.wall)
	slices.Sort(out.move)
	return out, nil
}

// name is the node's --node, read from its data dir's log.
func (nd *node) name() string { return nd.node }

// movedIn reads how long the move of id took from the node's log.
func movedIn(nd *node, id string) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(nd.data, "server.log"))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, `"msg":"sandbox moved to another node"`) || !strings.Contains(line, id) {
			continue
		}
		var l struct {
			DurationMS float64 `json:"duration_ms"`
		}
		if json.Unmarshal([]byte(line), &l) == nil {
			return time.Duration(l.DurationMS * float64(time.Millisecond)), true
		}
	}
	return 0, false
}

func adminCall(api, token, path string) error {
	req, err := http.NewRequest(http.MethodPost, api+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Admin-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("%s: %s %s", path, res.Status, b)
	}
	return nil
}
