// Package server tests cove server's lifecycle guarantees end to end: tenancy, every kill
// path's reason, auto-pause on timeout, concurrent transitions, and /metrics hygiene.
package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

type client struct {
	t   *testing.T
	url string
	key string
}

func (c client) do(method, path string, body any, hdr ...string) (int, map[string]any, http.Header) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.url+path, r)
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out, res.Header
}

func (c client) create(body map[string]any) string {
	c.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if body["templateID"] == nil {
		body["templateID"] = "base"
	}
	code, out, _ := c.do(http.MethodPost, "/sandboxes", body)
	if code != http.StatusCreated {
		c.t.Fatalf("create: %d %v", code, out)
	}
	id := out["sandboxID"].(string)
	c.t.Cleanup(func() { c.do(http.MethodDelete, "/sandboxes/"+id, nil) })
	return id
}

// cli runs a cove CLI verb on the server's data dir.
func cli(t *testing.T, s *covetest.Server, args ...string) string {
	t.Helper()
	cmd := exec.Command(covetest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "COVE_DATA="+s.DataDir, "COVE_API_URL="+s.URL, covetest.TemplatesEnv+"="+covetest.Templates(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func killedWith(t *testing.T, c client, id, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, out, _ := c.do(http.MethodGet, "/sandboxes/"+id, nil)
		msg, _ := out["message"].(string)
		if code == http.StatusNotFound && strings.Contains(msg, "was killed: "+why) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q, want 404 saying it was killed: %s", id, code, msg, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLifecycle(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}

	t.Run("another team's sandbox is a 404 for every call", func(t *testing.T) {
		team := strings.TrimSpace(cli(t, s, "team", "create", "other"))
		out := cli(t, s, "apikey", "create", "b", "--team", team)
		b := client{t: t, url: s.URL, key: strings.Fields(out)[0]}
		id := a.create(nil)
		for _, call := range []struct{ method, path string }{
			{http.MethodGet, "/sandboxes/" + id}, {http.MethodDelete, "/sandboxes/" + id},
			{http.MethodPost, "/sandboxes/" + id + "/pause"}, {http.MethodPost, "/sandboxes/" + id + "/timeout"},
			{http.MethodPost, "/v2/sandboxes/" + id + "/connect"},
		} {
			if code, body, _ := b.do(call.method, call.path, map[string]any{"timeout": 10}); code != http.StatusNotFound {
				t.Errorf("%s %s as another team: %d %v", call.method, call.path, code, body)
			}
		}
		if code, _, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK {
			t.Errorf("the owner lost its sandbox: %d", code)
		}
	})

	t.Run("an unknown or missing API key is a 401", func(t *testing.T) {
		for _, key := range []string{"", "e2b_0000000000000000000000000000000000000000"} {
			c := client{t: t, url: s.URL, key: key}
			if code, _, _ := c.do(http.MethodGet, "/v2/sandboxes", nil); code != http.StatusUnauthorized {
				t.Errorf("key %q: %d", key, code)
			}
		}
	})

	t.Run("an admin kill is recorded with reason admin and counted", func(t *testing.T) {
		id := a.create(nil)
		if code, _, _ := (client{t: t, url: s.URL}).do(http.MethodDelete, "/admin/sandboxes/"+id, nil, "X-Admin-Token", "wrong"); code != http.StatusUnauthorized {
			t.Errorf("admin kill with a wrong token: %d", code)
		}
		if out := cli(t, s, "admin", "kill", id); !strings.Contains(out, "killed") {
			t.Fatalf("cove admin kill: %s", out)
		}
		killedWith(t, a, id, "admin")
		res, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(res.Body)
		if !bytes.Contains(m, []byte(`cove_sandboxes_killed_total{kill_reason="admin"} 1`)) {
			t.Errorf("/metrics lacks the admin kill:\n%s", grep(m, "cove_sandboxes_killed_total"))
		}
		if bytes.Contains(m, []byte(id)) {
			t.Error("/metrics names a sandbox id")
		}
	})

	t.Run("a timeout kills with reason timeout", func(t *testing.T) {
		id := a.create(map[string]any{"timeout": 1})
		killedWith(t, a, id, "timeout")
		if !strings.Contains(s.Logs(), `"request_id":"system","sandbox.id":"`+id) && !strings.Contains(s.Logs(), id) {
			t.Error("no system kill line")
		}
	})

	t.Run("a timeout with autoPause pauses instead of killing", func(t *testing.T) {
		id := a.create(map[string]any{"timeout": 1, "autoPause": true})
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, out, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil)
			if out["state"] == "paused" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("state %v 5 s after a 1 s timeout with autoPause", out["state"])
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code, _, _ := a.do(http.MethodPost, "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 30}); code != http.StatusCreated {
			t.Errorf("connect to the auto-paused sandbox: %d, want 201 (resumed)", code)
		}
	})

	t.Run("two concurrent pauses give one 204 and one 409", func(t *testing.T) {
		id := a.create(nil)
		var wg sync.WaitGroup
		codes := make(chan int, 2)
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, _, _ := a.do(http.MethodPost, "/sandboxes/"+id+"/pause", nil)
				codes <- code
			}()
		}
		wg.Wait()
		close(codes)
		got := map[int]int{}
		for c := range codes {
			got[c]++
		}
		if got[http.StatusNoContent] != 1 || got[http.StatusConflict] != 1 {
			t.Errorf("codes %v, want one 204 and one 409", got)
		}
	})

	t.Run("connect extends a running sandbox's timeout and never shortens it", func(t *testing.T) {
		id := a.create(map[string]any{"timeout": 100})
		_, before, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil)
		if code, _, _ := a.do(http.MethodPost, "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 10}); code != http.StatusOK {
			t.Fatalf("connect: %d", code)
		}
		_, after, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil)
		if before["endAt"] != after["endAt"] {
			t.Errorf("connect with a shorter timeout moved endAt from %v to %v", before["endAt"], after["endAt"])
		}
	})

	t.Run("a paused sandbox whose template was removed is killed as template_missing", func(t *testing.T) {
		name := fmt.Sprintf("tm-%d", time.Now().UnixNano()%1e9)
		cli(t, s, "template", "build", name, "--from", "base", "--run", "echo marked > /etc/cove-test-mark", "--templates", covetest.Templates(t))
		id := a.create(map[string]any{"templateID": name})
		if code, _, _ := a.do(http.MethodPost, "/sandboxes/"+id+"/pause", nil); code != http.StatusNoContent {
			t.Fatalf("pause: %d", code)
		}
		cli(t, s, "template", "rm", name, "--templates", covetest.Templates(t))
		code, out, _ := a.do(http.MethodPost, "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 30})
		if code != http.StatusNotFound || !strings.Contains(fmt.Sprint(out["message"]), "template_missing") {
			t.Errorf("connect after the template was removed: %d %v", code, out)
		}
		killedWith(t, a, id, "template_missing")
	})

	t.Run("a missing template is refused clearly", func(t *testing.T) {
		code, out, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "no-such-template"})
		if code != http.StatusNotFound || !strings.Contains(fmt.Sprint(out["message"]), "no-such-template") {
			t.Errorf("create on a missing template: %d %v", code, out)
		}
	})
}

func grep(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestResourceMetrics(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)
	get := func(c client, path string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
		req.Header.Set("X-API-Key", c.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	t.Run("samples arrive in E2B's shape with network fields", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, b := get(a, "/sandboxes/"+id+"/metrics")
			var samples []map[string]any
			_ = json.Unmarshal(b, &samples)
			if code == http.StatusOK && len(samples) >= 2 {
				last := samples[len(samples)-1]
				for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal", "netRxBytes", "netTxBytes"} {
					if _, ok := last[k]; !ok {
						t.Errorf("sample lacks %s: %v", k, last)
					}
				}
				if last["memUsed"].(float64) <= 0 || last["memTotal"].(float64) != 512<<20 {
					t.Errorf("memory in sample: %v", last)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no samples after 10 s: %d %s", code, b)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	t.Run("envd's own /metrics agrees with the sandbox's limits", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/metrics", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]float64
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m["mem_total"] != 512<<20 || m["mem_used"] <= 0 || m["mem_used"] > 512<<20 || m["disk_total"] <= 0 {
			t.Errorf("envd /metrics %v: want the sandbox's 512 MiB limit as mem_total", m)
		}
		var samples []map[string]any
		get(a, "/sandboxes/"+id+"/metrics")
		code, b := get(a, "/sandboxes/"+id+"/metrics")
		_ = json.Unmarshal(b, &samples)
		if code == http.StatusOK && len(samples) > 0 {
			host := samples[len(samples)-1]["memUsed"].(float64)
			if ratio := m["mem_used"] / host; ratio < 0.5 || ratio > 2 {
				t.Errorf("envd says %v bytes used, the host's sampler %v", m["mem_used"], host)
			}
		}
	})
	t.Run("the CLI shows one sandbox's samples, and several sandboxes' newest through the Go SDK", func(t *testing.T) {
		t.Setenv("COVE_API_KEY", s.Key)
		out := cli(t, s, "sandbox", "metrics", id)
		if !strings.Contains(out, "SANDBOX") || !strings.Contains(out, id) || !strings.Contains(out, "512.0 MiB") {
			t.Errorf("cove sandbox metrics %s:\n%s", id, out)
		}
		other := a.create(nil)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var latest map[string]map[string]any
			out := cli(t, s, "sandbox", "metrics", "--json", id, other, "inot-a-sandbox")
			if err := json.Unmarshal([]byte(out), &latest); err != nil {
				t.Fatalf("--json: %v\n%s", err, out)
			}
			_, hasOther := latest[other]
			if latest[id] != nil && hasOther {
				if len(latest) != 2 {
					t.Errorf("unknown ids must be left out: %v", latest)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no newest sample for both sandboxes after 10 s: %s", out)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	t.Run("another team's sandbox metrics are a 404", func(t *testing.T) {
		team := strings.TrimSpace(cli(t, s, "team", "create", "m"))
		b := client{t: t, url: s.URL, key: strings.Fields(cli(t, s, "apikey", "create", "m", "--team", team))[0]}
		if code, body := get(b, "/sandboxes/"+id+"/metrics"); code != http.StatusNotFound {
			t.Errorf("%d %s", code, body)
		}
	})
}
