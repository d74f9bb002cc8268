package redteam

import (
	"context"
	"errors"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// client is the SDK as team A (the victim) or B (the attacker) uses it.
func client(key string) *cove.Client { return clientAt(env.server.URL, key) }

// clientAt is the SDK of the server at base.
func clientAt(base, key string) *cove.Client {
	return cove.NewClient(cove.Config{APIURL: base, APIKey: key})
}

// sandbox creates a sandbox of key's team, killed when t ends.
func sandbox(t *testing.T, key string, opts cove.SandboxOptions) *cove.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := client(key).Create(ctx, opts)
	if err != nil {
		t.Fatalf("create a sandbox: %v", err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })
	return sb
}

// sh runs script in sb and returns its output and exit code (-1 when it could not run).
func sh(t *testing.T, sb *cove.Sandbox, script string, timeout time.Duration) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := sb.Commands.Run(ctx, script)
	var exit *cove.CommandExitError
	switch {
	case errors.As(err, &exit):
		if res == nil {
			return err.Error(), exit.ExitCode
		}
		return res.Stdout + res.Stderr, exit.ExitCode
	case err != nil:
		return err.Error(), -1
	}
	return res.Stdout + res.Stderr, 0
}
