// Package measure holds the few helpers Cove's benchmark programs share, so that every
// program computes its percentiles the same way.
package measure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pct returns the p-th percentile of ds (nearest rank); 0 for none.
func Pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// FreeAddr returns a loopback address with a port free at the moment of the call.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Warm is how many untimed runs go before n timed ones: a tenth, at least 20.
func Warm(n int) int { return max(n/10, 20) }

// Runs calls one Warm(n)+n times and returns what the last n returned; it stops at the first
// error.
func Runs(n int, one func() (time.Duration, error)) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := range Warm(n) + n {
		d, err := one()
		if err != nil {
			return nil, err
		}
		if i >= Warm(n) {
			ds = append(ds, d)
		}
	}
	return ds, nil
}

// Timed makes f a run for Runs, timed from call to return.
func Timed(f func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		t0 := time.Now()
		err := f()
		return time.Since(t0), err
	}
}

// CPUTicks reads utime+stime (clock ticks) from /proc/PID/stat.
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that ends comm: state(3) ... utime(14) stime(15).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	return u + s, errors.Join(err1, err2)
}
