package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// receiver is a webhook endpoint that keeps what it was sent.
type receiver struct {
	mu     sync.Mutex
	bodies [][]byte
	sigs   []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.sigs = append(r.sigs, req.Header.Get("e2b-signature"))
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func TestLifecycleEventsAndWebhooks(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--webhook-allow-net", "127.0.0.0/8"}}) // the receiver is on the loopback
	a := client{t: t, url: s.URL, key: s.Key}
	rcv := &receiver{}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)

	code, wh, _ := a.do(http.MethodPost, "/events/webhooks", map[string]any{"url": hook.URL, "events": []string{
		"sandbox.lifecycle.created", "sandbox.lifecycle.paused", "sandbox.lifecycle.resumed", "sandbox.lifecycle.killed"}})
	if code != http.StatusCreated {
		t.Fatalf("register webhook: %d %v", code, wh)
	}
	secret, _ := wh["secret"].(string)
	if secret == "" {
		secret, _ = wh["signatureSecret"].(string)
	}

	id := a.create(map[string]any{"metadata": map[string]string{"taskId": "ev-1"}})
	if code, _, _ := a.do(http.MethodPost, "/sandboxes/"+id+"/pause", nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d", code)
	}
	if code, _, _ := a.do(http.MethodPost, "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 30}); code != http.StatusCreated {
		t.Fatalf("connect: %d", code)
	}
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil, "X-E2B-Request-Id", "req-kill-ev-1"); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}

	t.Run("the events API lists the sandbox's history in order with who caused each step", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/events/sandboxes/"+id+"?order=asc", nil)
		req.Header.Set("X-API-Key", s.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var evs []map[string]any
		if err := json.NewDecoder(res.Body).Decode(&evs); err != nil {
			t.Fatalf("decode: %v", err)
		}
		var types []string
		for _, e := range evs {
			types = append(types, strings.TrimPrefix(e["type"].(string), "sandbox.lifecycle."))
		}
		if strings.Join(types, ",") != "created,paused,resumed,killed" {
			t.Fatalf("event types %v", types)
		}
		killed := evs[3]
		data, _ := killed["eventData"].(map[string]any)
		exec, _ := data["execution"].(map[string]any)
		if data["kill_reason"] != "request" || exec == nil || exec["vcpu_count"] == nil || killed["requestId"] != "req-kill-ev-1" {
			t.Errorf("killed event: %v", killed)
		}
		if md, _ := killed["sandboxMetadata"].(map[string]any); md["taskId"] != "ev-1" {
			t.Errorf("killed event lacks the sandbox's metadata: %v", killed)
		}
	})

	t.Run("the webhook receives every event signed with its secret", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			rcv.mu.Lock()
			n := len(rcv.bodies)
			rcv.mu.Unlock()
			if n >= 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("webhook got %d deliveries, want 4", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for i, b := range rcv.bodies {
			sum := sha256.Sum256(append([]byte(secret), b...))
			if want := base64.RawStdEncoding.EncodeToString(sum[:]); rcv.sigs[i] != want {
				t.Errorf("delivery %d: signature %q, want %q", i, rcv.sigs[i], want)
			}
		}
	})

	t.Run("another team sees none of these events", func(t *testing.T) {
		team := strings.TrimSpace(cli(t, s, "team", "create", "nosy"))
		b := client{t: t, url: s.URL, key: strings.Fields(cli(t, s, "apikey", "create", "n", "--team", team))[0]}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/events/sandboxes/"+id, nil)
		req.Header.Set("X-API-Key", b.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK && strings.Contains(string(body), id) {
			t.Errorf("another team read the events: %s", body)
		}
	})
}
