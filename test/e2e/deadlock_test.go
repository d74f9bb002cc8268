package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestKillRacingCreate checks that DELETE of a sandbox while other sandboxes are being
// created completes, and that the server stays responsive.
func TestKillRacingCreate(t *testing.T) {
	need(t)
	// A kill holds the sandbox's lock and then takes the orchestrator's; the evictor, woken
	// by a create's TTL, once took them the other way round and wedged every later call.
	for i := 1; i <= repeat(t); i++ {
		t.Run(fmt.Sprintf("attempt %d: DELETE racing three creates answers within 30 s", i), func(t *testing.T) {
			victim := create(t, nil)
			var wg sync.WaitGroup
			done := make(chan struct{})
			wg.Add(4)
			go func() {
				defer wg.Done()
				if status, b := call(t, http.MethodDelete, "/sandboxes/"+victim.ID, nil); status != http.StatusNoContent {
					t.Errorf("DELETE /sandboxes/%s: %d %s", victim.ID, status, b)
				}
			}()
			for range 3 {
				go func() {
					defer wg.Done()
					body := map[string]any{"templateID": "base", "timeout": 60}
					status, b := call(t, http.MethodPost, "/sandboxes", body)
					if status != http.StatusCreated {
						t.Errorf("POST /sandboxes: %d %s", status, b)
						return
					}
					var sb sandbox
					if json.Unmarshal(b, &sb) == nil {
						t.Cleanup(func() { call(t, http.MethodDelete, "/sandboxes/"+sb.ID, nil) })
					}
				}()
			}
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("DELETE and creates still unanswered after 30 s: the server is wedged")
			}
		})
	}
}
