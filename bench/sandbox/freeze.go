package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

func (b *bench) phaseFreeze(ctx context.Context) error {
	n := b.cfg.cycles
	fmt.Fprintf(os.Stderr, "pause/connect x%d ...\n", n)
	id, err := b.create(ctx)
	if err != nil {
		return err
	}
	defer b.kill(context.WithoutCancel(ctx), id)
	var pause, thaw, after []time.Duration
	for range n {
		t0 := time.Now()
		code, out, err := b.api(ctx, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{})
		if err != nil {
			return err
		}
		if code != http.StatusNoContent {
			return fmt.Errorf("pause: %d %s", code, bytes.TrimSpace(out))
		}
		pause = append(pause, time.Since(t0))
		t0 = time.Now()
		code, out, err = b.api(ctx, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 600})
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("connect on a paused sandbox: %d %s (want 201)", code, bytes.TrimSpace(out))
		}
		thaw = append(thaw, time.Since(t0))
		d, err := runTrue(ctx, b.proc, id)
		if err != nil {
			return fmt.Errorf("/bin/true after thaw: %w", err)
		}
		after = append(after, d)
	}
	b.info("pause (POST /pause), p50", measure.Ms(measure.Pct(pause, 50)), "ms")
	b.info("pause (POST /pause), p99", measure.Ms(measure.Pct(pause, 99)), "ms")
	b.info("thaw (POST /connect, paused), p50", measure.Ms(measure.Pct(thaw, 50)), "ms")
	b.info("thaw (POST /connect, paused), p99", measure.Ms(measure.Pct(thaw, 99)), "ms")
	b.info("first /bin/true after thaw, p50", measure.Ms(measure.Pct(after, 50)), "ms")
	return nil
}
