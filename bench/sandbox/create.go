package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
)

func (b *bench) phaseCreate(ctx context.Context) error {
	n := b.cfg.creates
	warm := 2
	fmt.Fprintf(os.Stderr, "create -> /bin/true x%d (+%d warm-up) ...\n", n, warm)
	var total, api, first, kill []time.Duration
	for i := range n + warm {
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
		t3 := time.Now()
		if i < warm {
			continue
		}
		total, api, first, kill = append(total, t2.Sub(t0)), append(api, t1.Sub(t0)), append(first, t2.Sub(t1)), append(kill, t3.Sub(t2))
	}
	p50 := measure.Pct(total, 50)
	b.coldP50 = p50
	b.check("create -> /bin/true end, p50", measure.Ms(p50), "ms", "<= 50 ms", p50 <= 50*time.Millisecond)
	b.info("create -> /bin/true end, p99", measure.Ms(measure.Pct(total, 99)), "ms")
	b.info("  of which POST /sandboxes, p50", measure.Ms(measure.Pct(api, 50)), "ms")
	b.info("  of which first /bin/true via proxy, p50", measure.Ms(measure.Pct(first, 50)), "ms")
	b.info("kill (DELETE), p50", measure.Ms(measure.Pct(kill, 50)), "ms")
	b.info("kill (DELETE), p99", measure.Ms(measure.Pct(kill, 99)), "ms")
	return nil
}
