// Command cluster benchmarks creates on a cluster of one node against a cluster of three, in
// one run, each node started with the same per-node limits, and prints creates per second and
// the create's p50/p99 side by side. It is a measuring tool, not a test: it never fails on a
// figure.
//
//	go run ./bench/cluster                 # 60 creates, 6 at a time, on each cluster
//	go run ./bench/cluster -n 120 -c 12
//
// It needs root and PostgreSQL 15 (make deps). It builds cove, starts a PostgreSQL on a temp
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
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
)

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
	url, key, data string
	cmd            *exec.Cmd
}

func (nd *node) stop() {
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	_ = nd.cmd.Wait()
	os.RemoveAll(nd.data)
}

// startNode starts `cove server --node name` on database dsn.
func startNode(bin, dsn, secret, name, key string) (*node, error) {
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
		"--cluster-secret-file", secret, "--node-max-sandboxes", "50", "--node-max-starts", "4", "--log-level", "warn")
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
			return &node{url: strings.TrimSpace(u), key: strings.TrimSpace(string(b)), data: data, cmd: cmd}, err
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
	var results []result
	for i, size := range []int{1, 3} {
		dsn, err := newDatabase(ctx, pg, fmt.Sprintf("bench%d", i))
		if err != nil {
			return err
		}
		var nodes []*node
		key := ""
		for j := range size {
			nd, err := startNode(bin, dsn, secret, fmt.Sprintf("bench%d-%c", i, 'a'+j), key)
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
	fmt.Println("drain per sandbox: not measured (cove node drain stops placement; live migration is not written)")
	return nil
}
