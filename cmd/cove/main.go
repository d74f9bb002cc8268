// Command cove is Cove's one binary: `cove server` on the host, `cove envd` inside each
// sandbox, and the CLI verbs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cove:", err)
		os.Exit(1)
	}
}
