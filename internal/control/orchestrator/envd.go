package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// This file: the host side of the envd handshake: its command line, client, health wait and /init.

// envdCommand is the command line of sb's envd: the server's args, then sb's budget.
func (o *Orchestrator) envdCommand(sb *store.Sandbox) []string {
	args := append([]string{"/.cove/cove", "envd", "--addr", fmt.Sprintf("0.0.0.0:%d", EnvdPort)}, o.cfg.EnvdArgs...)
	return append(args, o.cfg.CollectBudgets.For(o.cfg.Collect, sb.TeamID, sb.TemplateID).Args()...)
}

// envdClient reaches envd inside the sandbox's network namespace.
func (o *Orchestrator) envdClient(id string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return o.cfg.Runtime.Dial(ctx, id, network, fmt.Sprintf("127.0.0.1:%d", EnvdPort))
		},
		MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second,
	}}
}

func waitHealthy(ctx context.Context, c *http.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	begun := time.Now()
	for {
		// envd is usually up within 10 ms of start: poll every millisecond at first, so its
		// readiness is noticed at once, then back off.
		delay := time.Millisecond
		if time.Since(begun) > 50*time.Millisecond {
			delay = 10 * time.Millisecond
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
			err = fmt.Errorf("health answered %s", res.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

func postInit(ctx context.Context, c *http.Client, body envdapi.Init) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd"+envdapi.InitPath, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if id := telemetry.RequestID(ctx); id != "" {
		req.Header.Set(telemetry.HeaderRequestID, id)
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return fmt.Errorf("init answered %s: %s", res.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
