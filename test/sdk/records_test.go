package cove_test

import (
	"context"
	"errors"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// TestRecordsOfACallReadBackThroughTheSDK reads a command's record, its request's trace and
// the sandbox's lifecycle events in the SDK's types, which the server emits.
func TestRecordsOfACallReadBackThroughTheSDK(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)
	id := cove.NewRequestID()
	res, err := sb.Commands.Run(cove.WithRequestID(ctx, id), "echo recorded; exit 3")
	var exit *cove.CommandExitError
	if !errors.As(err, &exit) || exit.ExitCode != 3 {
		t.Fatalf("run: %+v %v", res, err)
	}
	var rec *cove.CommandRecord
	waitUntil(t, "the command's record is closed", func() bool {
		rec, err = c.Command(ctx, sb.ID, int(exit.PID))
		return err == nil && rec.EndedAt != nil
	})
	if rec.RequestID != id || rec.ExitCode == nil || *rec.ExitCode != 3 || rec.StdoutHead != "recorded\n" || rec.EndCause != "exited" {
		t.Errorf("record %+v", rec)
	}
	page, err := c.Commands(ctx, sb.ID, "")
	if err != nil || len(page.Commands) == 0 || page.Commands[0].PID != int(exit.PID) {
		t.Errorf("commands %+v %v", page, err)
	}
	tr, err := c.Trace(ctx, id)
	if err != nil || tr.RequestID != id || len(tr.Entries) < 2 {
		t.Fatalf("trace %+v %v", tr, err)
	}
	waitUntil(t, "the command's output line is stored", func() bool {
		page, err := c.Logs(ctx, sb.ID, cove.LogQuery{RequestID: id, Search: "recorded"})
		return err == nil && len(page.Logs) == 1 && page.Logs[0].Message == "recorded" && page.Logs[0].Fields["source"] == "process"
	})
	evs, err := c.Events(ctx, sb.ID, cove.EventOptions{Types: []string{cove.EventSandboxCreated}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %+v %v", evs, err)
	}
	data, err := evs[0].Data()
	if d, ok := data.(*cove.CreatedEventData); err != nil || !ok || !d.Secure || d.TimeoutSeconds != 300 {
		t.Errorf("created event data %#v %v", data, err)
	}
	if _, err := c.Command(ctx, sb.ID, 999999); !errors.Is(err, cove.ErrNotFound) {
		t.Errorf("an unknown pid: %v, want ErrNotFound", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestWebhooksThroughTheSDK(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	ctx := ctxFor(t, time.Minute)
	secret := "whsec_sdk-test"
	// A name for loopback: accepted at create (names resolve at delivery), and every delivery
	// is refused there by the server's address guard, so nothing is sent anywhere.
	h, err := c.AddWebhook(ctx, cove.WebhookRequest{Name: "sdk", URL: "http://localhost:9/hook", Events: []string{cove.EventSandboxKilled}, Secret: &secret})
	if err != nil || h.ID == "" || h.Secret != secret || !h.Enabled {
		t.Fatalf("add: %+v %v", h, err)
	}
	t.Cleanup(func() { _ = c.RemoveWebhook(context.Background(), h.ID) })
	list, err := c.Webhooks(ctx)
	found := false
	for _, w := range list {
		if w.ID == h.ID {
			found = w.Secret == "" && w.URL == h.URL
		}
	}
	if err != nil || !found {
		t.Errorf("list %+v %v: the webhook is missing or shows its secret", list, err)
	}
	if ds, err := c.WebhookDeliveries(ctx, h.ID); err != nil || len(ds) != 0 {
		t.Errorf("deliveries %+v %v", ds, err)
	}
	if err := c.RemoveWebhook(ctx, h.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WebhookDeliveries(ctx, h.ID); !errors.Is(err, cove.ErrNotFound) {
		t.Errorf("deliveries of a removed webhook: %v, want ErrNotFound", err)
	}
	var apiErr *cove.Error
	if _, err := c.AddWebhook(ctx, cove.WebhookRequest{URL: "ftp://x", Events: []string{cove.EventSandboxKilled}}); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("a bad URL: %v, want a 400", err)
	}
}
