package cove

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// NotifyExit returns a context that ends, with a cause matching ErrCallerExit, when the
// program receives SIGINT or SIGTERM, or when stop is called. Streams running under it
// then log cancel.cause=caller_exit, not a generic cancel. Call stop (defer it in main)
// to release the signals.
func NotifyExit(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("%w: received %s", ErrCallerExit, sig))
		case <-quit:
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(quit)
			cancel(ErrCallerExit)
		})
	}
	return ctx, stop
}
