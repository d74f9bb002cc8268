package events

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

func TestLimitsTellATeamOncePerLimitAndSandboxEveryTenSeconds(t *testing.T) {
	db := newDB(t)
	team := newTeam(t, db)
	l := NewLimits(newBus(t, db), nil)
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	ctx := context.Background()
	reach := func(sandbox, limit string) { l.Reached(ctx, team, sandbox, "base", limit, "refused: "+limit) }

	for range 100 { // a client retrying a refused create in a loop
		reach("", cove.LimitTeamSandboxes)
	}
	reach("", cove.LimitTeamVCPUs)                             // another limit
	reach("i-one", cove.LimitTeamLogBytes)                     // one sandbox's dropped lines
	reach("i-two", cove.LimitTeamLogBytes)                     // another's
	l.Reached(ctx, "", "", "", cove.LimitHostFiles, "no team") // nobody to tell
	now = now.Add(LimitEvery)
	reach("", cove.LimitTeamSandboxes) // ten seconds on: told again

	page, err := db.ListEvents(ctx, store.EventFilter{TeamID: team, Types: []string{string(LimitReached)}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range page.Events {
		v, err := cove.EventDataFor(e.Type)
		if err != nil {
			t.Fatal(err)
		}
		d := v.(*cove.LimitReachedEventData)
		if err := json.Unmarshal(e.Data, d); err != nil || d.Detail != "refused: "+d.Limit {
			t.Errorf("event %s: data %s (%v)", e.ID, e.Data, err)
		}
		got[d.Limit+"/"+e.SandboxID]++
	}
	want := map[string]int{cove.LimitTeamSandboxes + "/": 2, cove.LimitTeamVCPUs + "/": 1, cove.LimitTeamLogBytes + "/i-one": 1, cove.LimitTeamLogBytes + "/i-two": 1}
	if len(got) != len(want) {
		t.Errorf("events %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d events, want %d (all %v)", k, got[k], n, got)
		}
	}
}

func TestOnlyTheLimitEventMayNameNoSandbox(t *testing.T) {
	db := newDB(t)
	b := newBus(t, db)
	team := newTeam(t, db)
	if err := b.Emit(context.Background(), Event{Type: SandboxKilled, TeamID: team}); err == nil {
		t.Error("a killed event without a sandbox was recorded")
	}
	if err := b.Emit(context.Background(), Event{Type: LimitReached, TeamID: team, Data: &cove.LimitReachedEventData{Limit: cove.LimitHostFiles}}); err != nil {
		t.Errorf("a limit event without a sandbox: %v", err)
	}
	if NewLimits(nil, nil) != nil {
		t.Error("limits without an emitter")
	}
	var none *Limits
	none.Reached(context.Background(), team, "", "", cove.LimitHostFiles, "") // no panic: tells nobody
}
