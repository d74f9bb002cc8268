package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// busyRoundTrips times /bin/true round trips through envd while two gzip downloads of an
// incompressible file run through its /files endpoint: envd's own CPU-bound work must not
// hold up a command. It returns the round trips and the downloads' rate in MiB/s.
func busyRoundTrips(ctx context.Context, base string, client processconnect.ProcessClient, window time.Duration) ([]time.Duration, float64, error) {
	f, err := os.CreateTemp("", "bench-envd-busy-")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(f.Name())
	if _, err := io.CopyN(f, rand.Reader, 64<<20); err != nil {
		f.Close()
		return nil, 0, err
	}
	if err := f.Close(); err != nil {
		return nil, 0, err
	}

	dctx, stop := context.WithCancel(ctx)
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var moved int64
	dl := &http.Client{Transport: &http.Transport{Protocols: httpProtocols(), DisableCompression: true}}
	for range 2 {
		wg.Go(func() {
			for dctx.Err() == nil {
				req, err := http.NewRequestWithContext(dctx, http.MethodGet, base+"/files?path="+url.QueryEscape(f.Name()), nil)
				if err != nil {
					return
				}
				req.Header.Set("Accept-Encoding", "gzip") // envd compresses: CPU-bound work
				resp, err := dl.Do(req)
				if err != nil {
					return
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				moved += n
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // the downloads are under way

	var rts []time.Duration
	var rtErr error
	for end := time.Now().Add(window); time.Now().Before(end); {
		d, err := roundTrip(ctx, client)
		if err != nil {
			rtErr = err
			break
		}
		rts = append(rts, d)
	}
	stop()
	wg.Wait()
	took := time.Since(t0)
	if rtErr != nil {
		return nil, 0, rtErr
	}
	if moved == 0 {
		return nil, 0, fmt.Errorf("the downloads moved nothing")
	}
	return rts, float64(moved) / (1 << 20) / took.Seconds(), nil
}
