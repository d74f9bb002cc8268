// Command errgroup shows cancellation by a sibling, the errgroup pattern written with
// context.WithCancelCause and a sync.WaitGroup: three commands run side by side, one
// fails, and its failure cancels the others' context with a cause. The SDK logs one
// "stream cancelled" line per cancelled stream, with cancel.cause=sibling_cancel and the
// cause as cancel.detail; envd logs client_cancel under the same request ids. A cancel
// ends streams, not processes: the sleeps run on until the sandbox is killed.
//
//	COVE_API_URL=http://127.0.0.1:3000 COVE_API_KEY=... go run ./examples/errgroup
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx := context.Background()
	sb, err := cove.NewClient(cove.Config{Logger: log}).Create(ctx, cove.SandboxOptions{Timeout: 5 * time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "errgroup:", err)
		os.Exit(1)
	}
	defer sb.Kill(ctx)

	err = runAll(ctx, sb, []string{"sleep 30", "sleep 30", "sleep 0.5; echo broken >&2; exit 3"})
	fmt.Println("first error:", err)
	var exit *cove.CommandExitError
	if !errors.As(err, &exit) {
		os.Exit(1)
	}
}

// runAll runs the commands side by side; the first to fail cancels the others, and its
// error is the result, as errgroup.WithContext does.
func runAll(ctx context.Context, sb *cove.Sandbox, cmds []string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, c := range cmds {
		wg.Go(func() {
			if _, err := sb.Commands.Run(ctx, c, cove.Timeout(time.Minute)); err != nil {
				once.Do(func() {
					first = err
					cancel(fmt.Errorf("sibling %q failed: %w", c, err))
				})
			}
		})
	}
	wg.Wait()
	return first
}
