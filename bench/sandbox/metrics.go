package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

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
