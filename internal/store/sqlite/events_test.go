package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func webhook(teamID, id string, types ...string) *store.Webhook {
	return &store.Webhook{ID: id, TeamID: teamID, URL: "http://127.0.0.1:1/", Events: types, Secret: "s", CreatedAt: base}
}

func event(teamID, id, typ string, at time.Time) *store.Event {
	return &store.Event{ID: id, Type: typ, Timestamp: at, TeamID: teamID, SandboxID: "sb", TemplateID: "base",
		Metadata: map[string]string{"k": "v"}, RequestID: "req", Data: json.RawMessage(`{"a":1}`)}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	team, other := newTeam(t, db, "a"), newTeam(t, db, "b")
	for _, w := range []*store.Webhook{
		webhook(team.ID, "wh_killed", "sandbox.lifecycle.killed"),
		webhook(team.ID, "wh_both", "sandbox.lifecycle.created", "sandbox.lifecycle.killed"),
		webhook(other.ID, "wh_other", "sandbox.lifecycle.killed"),
	} {
		if err := db.InsertWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("an event queues one delivery per subscribed webhook of its team", func(t *testing.T) {
		n, err := db.InsertEvent(ctx, event(team.ID, "evt_1", "sandbox.lifecycle.killed", base))
		if err != nil || n != 2 {
			t.Fatalf("InsertEvent = %d, %v; want 2 deliveries", n, err)
		}
		if n, err := db.InsertEvent(ctx, event(team.ID, "evt_2", "sandbox.lifecycle.paused", base)); err != nil || n != 0 {
			t.Fatalf("unsubscribed type: %d, %v", n, err)
		}
	})

	t.Run("a failed event insert queues nothing", func(t *testing.T) {
		if _, err := db.InsertEvent(ctx, event(team.ID, "evt_1", "sandbox.lifecycle.killed", base)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate id: %v", err)
		}
		ds, _ := db.ListDeliveries(ctx, team.ID, "wh_killed", 10)
		if len(ds) != 1 {
			t.Fatalf("%d deliveries after a failed insert, want 1", len(ds))
		}
	})

	t.Run("a claim leases deliveries so a second claim skips them", func(t *testing.T) {
		now := time.Now()
		first, err := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10)
		if err != nil || len(first) != 2 {
			t.Fatalf("claim: %d, %v", len(first), err)
		}
		if first[0].Event.Metadata["k"] != "v" || string(first[0].Event.Data) != `{"a":1}` || first[0].Webhook.Secret != "s" {
			t.Errorf("claimed %+v %+v", first[0].Event, first[0].Webhook)
		}
		if again, _ := db.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10); len(again) != 0 {
			t.Errorf("second claim got %d leased deliveries", len(again))
		}
		if at, ok, _ := db.NextDeliveryAt(ctx); !ok || at.Before(now.Add(59*time.Second)) {
			t.Errorf("next delivery at %v (%v), want the lease end", at, ok)
		}

		// One succeeds, one is retried later.
		next := now.Add(time.Hour)
		if err := db.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: first[0].Delivery.ID, Attempt: 1,
			StartedAt: now, StatusCode: 200, Latency: 3 * time.Millisecond}, store.DeliveryDelivered); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: first[1].Delivery.ID, Attempt: 1,
			StartedAt: now, StatusCode: 503, ErrorClass: "http_status", NextRetryAt: &next}, store.DeliveryPending); err != nil {
			t.Fatal(err)
		}
		if at, ok, _ := db.NextDeliveryAt(ctx); !ok || !at.Equal(fromMicros(toMicros(next))) {
			t.Errorf("next delivery at %v, want %v", at, next)
		}
		if due, _ := db.ClaimDeliveries(ctx, now.Add(2*time.Hour), now.Add(3*time.Hour), 10); len(due) != 1 ||
			due[0].Delivery.Attempts != 1 {
			t.Fatalf("claim after the retry time: %+v", due)
		}
		// A restart ends every lease.
		if err := db.ReleaseLeases(ctx); err != nil {
			t.Fatal(err)
		}
		if at, _, _ := db.NextDeliveryAt(ctx); !at.Equal(fromMicros(toMicros(next))) {
			t.Errorf("after ReleaseLeases, next at %v, want %v", at, next)
		}
	})

	t.Run("deleting a webhook deletes its deliveries, and recording on one is ErrNotFound", func(t *testing.T) {
		ds, _ := db.ListDeliveries(ctx, team.ID, "wh_both", 10)
		if len(ds) != 1 {
			t.Fatalf("%d deliveries", len(ds))
		}
		if err := db.DeleteWebhook(ctx, other.ID, "wh_both"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("another team's delete: %v", err)
		}
		if err := db.DeleteWebhook(ctx, team.ID, "wh_both"); err != nil {
			t.Fatal(err)
		}
		err := db.RecordAttempt(ctx, &store.DeliveryAttempt{DeliveryID: ds[0].ID, Attempt: 2, StartedAt: base},
			store.DeliveryFailed)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RecordAttempt on a deleted delivery: %v", err)
		}
	})

	t.Run("listings never cross teams", func(t *testing.T) {
		page, err := db.ListEvents(ctx, store.EventFilter{TeamID: other.ID})
		if err != nil || len(page.Events) != 0 {
			t.Errorf("other team's events: %v %v", page, err)
		}
		if _, err := db.ListEvents(ctx, store.EventFilter{}); err == nil {
			t.Error("ListEvents without a team succeeded")
		}
	})
}
