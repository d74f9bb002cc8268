package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

// phasePool sizes a warm pool of base and times create -> /bin/true end with a pooled
// sandbox ready for each create (the pool refilled between creates), against the cold
// creates of phaseCreate, in the same run; then runs -burst sequential creates without
// waiting and counts the pool's hits and misses and the boots that refilled it.
func (b *bench) phasePool(ctx context.Context) error {
	size, n := b.cfg.pool, b.cfg.creates
	if size <= 0 {
		return nil
	}
	token, err := os.ReadFile(filepath.Join(b.cfg.data, "admin-token"))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	admin := strings.TrimSpace(string(token))
	setPool := func(n int) error {
		code, out, err := b.adminAPI(ctx, admin, http.MethodPut, "/admin/templates/base/pool", map[string]any{"size": n})
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("size the pool: %d %s", code, bytes.TrimSpace(out))
		}
		return err
	}
	ready := func() (int, error) {
		code, out, err := b.adminAPI(ctx, admin, http.MethodGet, "/admin/pools", nil)
		if err != nil || code != http.StatusOK {
			return 0, fmt.Errorf("pools: %d %v", code, err)
		}
		var ps []struct {
			Template string `json:"template"`
			Ready    int    `json:"ready"`
		}
		if err := json.Unmarshal(out, &ps); err != nil {
			return 0, err
		}
		for _, p := range ps {
			if p.Template == "base" {
				return p.Ready, nil
			}
		}
		return 0, nil
	}
	waitFull := func() error {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r, err := ready()
			if err != nil || r >= size {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool holds %d of %d after 2 min; see %s", r, size, b.log)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := setPool(size); err != nil {
		return err
	}
	defer func() { _ = setPool(0) }()
	fmt.Fprintf(os.Stderr, "pooled create -> /bin/true x%d (pool of %d, refilled between creates) ...\n", n, size)
	var total, api []time.Duration
	for i := range n + 2 {
		if err := waitFull(); err != nil {
			return err
		}
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
		if i >= 2 {
			total, api = append(total, t2.Sub(t0)), append(api, t1.Sub(t0))
		}
	}
	p50 := measure.Pct(total, 50)
	b.check("pooled create -> /bin/true end, p50", measure.Ms(p50), "ms", "<= 15 ms", p50 <= 15*time.Millisecond)
	b.info("pooled create -> /bin/true end, p99", measure.Ms(measure.Pct(total, 99)), "ms")
	b.info("  of which POST /sandboxes (the claim), p50", measure.Ms(measure.Pct(api, 50)), "ms")
	if b.coldP50 > 0 {
		b.info("cold p50 / pooled p50 (same run)", float64(b.coldP50)/float64(p50), "x")
	}

	burst := b.cfg.burst
	fmt.Fprintf(os.Stderr, "%d sequential creates with a pool of %d, not waiting for refills ...\n", burst, size)
	if err := waitFull(); err != nil {
		return err
	}
	before, err := b.poolCounters(ctx, admin)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for range burst {
		id, err := b.create(ctx)
		if err != nil {
			return err
		}
		if _, err := runTrue(ctx, b.proc, id); err != nil {
			_ = b.kill(ctx, id)
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
		if err := b.kill(ctx, id); err != nil {
			return err
		}
	}
	elapsed := time.Since(t0)
	after, err := b.poolCounters(ctx, admin)
	if err != nil {
		return err
	}
	misses := after["miss"] - before["miss"]
	b.check(fmt.Sprintf("%d sequential creates: pool misses", burst), misses, "creates", "0", misses == 0)
	b.info(fmt.Sprintf("%d sequential creates: pool hits", burst), after["hit"]-before["hit"], "creates")
	b.info("refill rate sustained (boots during the run)", (after["boots"]-before["boots"])/elapsed.Seconds(), "sandboxes/s")
	b.info("creates served a second in that run", float64(burst)/elapsed.Seconds(), "creates/s")
	return nil
}

// poolCounters reads base's pool counters from /metrics: hit, miss and boots.
func (b *bench) poolCounters(ctx context.Context, admin string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/metrics", nil)
	req.Header.Set("X-Admin-Token", admin)
	res, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `template="base"`) {
			continue
		}
		var key string
		switch {
		case strings.HasPrefix(line, "cove_pool_claims_total{") && strings.Contains(line, `result="hit"`):
			key = "hit"
		case strings.HasPrefix(line, "cove_pool_claims_total{") && strings.Contains(line, `result="miss"`):
			key = "miss"
		case strings.HasPrefix(line, "cove_pool_boots_total{") && strings.Contains(line, `result="ok"`):
			key = "boots"
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[key] = v
		}
	}
	return out, sc.Err()
}

func (b *bench) adminAPI(ctx context.Context, token, method, path string, body any) (int, []byte, error) {
	var rd *bytes.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-Admin-Token", token)
	req.Header.Set("Content-Type", "application/json")
	res, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(res.Body)
	return res.StatusCode, buf.Bytes(), err
}
