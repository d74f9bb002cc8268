package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// drain prunes in batches until a call deletes fewer than asked, as retention does.
func drain(t *testing.T, prune func(batch int) (int64, error)) int64 {
	t.Helper()
	var total int64
	for {
		n, err := prune(7)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n < 7 {
			return total
		}
	}
}

func TestRetentionPrunesEveryDatasetByAgeAndCapInBatches(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	team := newTeam(t, db, "t")
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	if err := db.InsertWebhook(ctx, &store.Webhook{ID: "wh1", TeamID: team.ID, URL: "http://receiver.test/", Secret: "s",
		Events: []string{"sandbox.lifecycle.killed"}, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	var lines []store.LogLine
	var samples []store.MetricSample
	for i := range 30 {
		if _, err := db.InsertEvent(ctx, &store.Event{ID: fmt.Sprintf("ev%02d", i), Type: "sandbox.lifecycle.killed", Timestamp: at(i),
			TeamID: team.ID, SandboxID: "isb", TemplateID: "base", RequestID: "r", Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, store.MetricSample{SandboxID: "isb", TeamID: team.ID, Time: at(i)})
		end := at(i)
		if err := db.UpsertCommand(ctx, &store.CommandRecord{SandboxID: "isb", TeamID: team.ID, PID: i + 1, StartedAt: at(i),
			EndedAt: end, EndCause: reason.EndExited}); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, store.LogLine{SandboxID: "isb", TeamID: team.ID, Time: at(i), Level: "info", Message: "line"})
	}
	if err := db.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	// Every event queued a pending delivery; deliver the first 25 so they may go.
	ds, err := db.ClaimDeliveries(ctx, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 25)
	if err != nil || len(ds) != 25 {
		t.Fatalf("claim: %d %v", len(ds), err)
	}
	for _, d := range ds {
		if err := db.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: d.Delivery.ID, Attempt: 1, StartedAt: d.Event.Timestamp, StatusCode: 200},
			store.DeliveryDelivered); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := at(20) // rows 0..19 are older
	for _, d := range []store.Dataset{store.DatasetSamples, store.DatasetCommands, store.DatasetEvents} {
		t.Run(d.String()+": everything older than the TTL goes, in batches", func(t *testing.T) {
			n := drain(t, func(b int) (int64, error) { return db.PruneBefore(ctx, d, cutoff, b) })
			u, err := db.Usage(ctx, d, true)
			if err != nil {
				t.Fatal(err)
			}
			if n != 20 || u.Rows != 10 || !u.Oldest.Equal(at(20)) || u.Bytes <= 0 {
				t.Errorf("pruned %d, usage %+v; want 20 pruned, 10 left from %v", n, u, at(20))
			}
		})
	}
	t.Run("webhook_deliveries: pruning events took their deliveries; a cap prunes the oldest finished ones, never a pending one", func(t *testing.T) {
		u, _ := db.Usage(ctx, store.DatasetDeliveries, false)
		if u.Rows != 10 {
			t.Fatalf("deliveries left %d, want 10 (5 delivered, 5 pending)", u.Rows)
		}
		drain(t, func(b int) (int64, error) { return db.PruneOverCap(ctx, store.DatasetDeliveries, 2, b) })
		u, _ = db.Usage(ctx, store.DatasetDeliveries, false)
		if u.Rows != 5 {
			t.Errorf("deliveries left %d, want the 5 pending ones", u.Rows)
		}
	})
	t.Run("log_lines: a cap in lines keeps the newest", func(t *testing.T) {
		drain(t, func(b int) (int64, error) { return db.PruneOverCap(ctx, store.DatasetLogs, 12, b) })
		u, _ := db.Usage(ctx, store.DatasetLogs, false)
		if u.Rows > 12 {
			t.Errorf("%d lines left over a cap of 12", u.Rows)
		}
	})
	t.Run("an event with a pending delivery stays whatever its age", func(t *testing.T) {
		drain(t, func(b int) (int64, error) { return db.PruneBefore(ctx, store.DatasetEvents, time.Now(), b) })
		u, _ := db.Usage(ctx, store.DatasetEvents, false)
		if u.Rows != 5 {
			t.Errorf("%d events left, want the 5 with pending deliveries", u.Rows)
		}
	})
}
