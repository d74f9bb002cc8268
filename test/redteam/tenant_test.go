package redteam

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// victimSecret is the value of team A's secret.
const victimSecret = "rt-victim-secret-value-5e1f"

// victim is what team A owns: the ids team B's key is thrown at.
type victim struct {
	sandbox, template, templateName, build, volume, volumeName, snapshot, secret string
}

func makeVictim(t *testing.T) victim {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a := client(env.keyA)
	var v victim
	sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 10 * time.Minute})
	v.sandbox = sb.ID
	v.templateName = "rt-victim-tpl"
	st, err := a.BuildTemplate(ctx, v.templateName, cove.TemplateDefinition{FromTemplate: "base",
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo victim > victim.txt"}}}}, cove.TemplateBuildOptions{})
	if err != nil {
		t.Fatalf("team A builds a template: %v", err)
	}
	v.template, v.build = st.TemplateID, st.BuildID
	vol, err := a.CreateVolume(ctx, "rt-victim-vol")
	if err != nil {
		t.Fatalf("team A creates a volume: %v", err)
	}
	v.volume, v.volumeName = vol.ID, vol.Name
	t.Cleanup(func() { _ = a.DeleteVolume(context.Background(), vol.ID) })
	snapSB := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 10 * time.Minute})
	snap, err := a.CreateSnapshot(ctx, snapSB.ID, "rt-victim-snap")
	if err != nil {
		t.Fatalf("team A snapshots a sandbox: %v", err)
	}
	v.snapshot = snap.ID
	t.Cleanup(func() { _ = a.DeleteSnapshot(context.Background(), snap.ID) })
	sec, err := a.CreateSecret(ctx, "rt-victim-secret", victimSecret, nil)
	if err != nil {
		t.Fatalf("team A creates a secret: %v", err)
	}
	v.secret = sec.ID
	t.Cleanup(func() { _ = a.DeleteSecret(context.Background(), sec.ID) })
	return v
}

// TestFloorCrossTenant throws team B's key at team A's sandbox, template, build, volume,
// snapshot, secret and team ids across every REST route: each must be refused (a 4xx), no
// list of B's may name A's ids, and A's things must be intact afterwards.
func TestFloorCrossTenant(t *testing.T) {
	need(t)
	defer report(t, classCrossTenant)
	v := makeVictim(t)
	sb, tpl, bld := url.PathEscape(v.sandbox), url.PathEscape(v.template), url.PathEscape(v.build)
	vol, snap, sec := url.PathEscape(v.volume), url.PathEscape(v.snapshot), url.PathEscape(v.secret)
	type attempt struct {
		method, path string
		body         any
	}
	attempts := []attempt{
		{"GET", "/sandboxes/" + sb, nil}, {"POST", "/sandboxes/" + sb + "/timeout", map[string]any{"timeout": 1}},
		{"POST", "/sandboxes/" + sb + "/refreshes", map[string]any{"duration": 1}}, {"POST", "/sandboxes/" + sb + "/pause", nil},
		{"POST", "/sandboxes/" + sb + "/resume", map[string]any{"timeout": 60}}, {"POST", "/sandboxes/" + sb + "/connect", map[string]any{"timeout": 60}},
		{"POST", "/v2/sandboxes/" + sb + "/connect", map[string]any{"timeout": 60}}, {"POST", "/sandboxes/" + sb + "/fork", map[string]any{"count": 1}},
		{"POST", "/sandboxes/" + sb + "/snapshots", map[string]any{"name": "rt-stolen"}}, {"PUT", "/sandboxes/" + sb + "/network", map[string]any{"allowOut": []string{"0.0.0.0/0"}}},
		{"GET", "/sandboxes/" + sb + "/logs", nil}, {"GET", "/sandboxes/" + sb + "/metrics", nil}, {"GET", "/v2/sandboxes/" + sb + "/logs", nil},
		{"GET", "/sandboxes/" + sb + "/commands", nil}, {"GET", "/sandboxes/" + sb + "/events", nil},
		{"DELETE", "/sandboxes/" + sb, nil},
		{"GET", "/templates/" + tpl, nil}, {"PATCH", "/templates/" + tpl, map[string]any{"public": true}},
		{"PATCH", "/v2/templates/" + tpl, map[string]any{"public": true}}, {"GET", "/templates/" + tpl + "/builds/" + bld + "/status", nil},
		{"GET", "/templates/" + tpl + "/builds/" + bld + "/logs", nil}, {"POST", "/v2/templates/" + tpl + "/builds/" + bld, map[string]any{"fromTemplate": "base"}},
		{"POST", "/templates/tags", map[string]any{"target": v.templateName + ":latest", "tags": []string{"stolen"}}},
		{"POST", "/templates/tags", map[string]any{"target": v.template + ":latest", "tags": []string{"stolen"}}},
		{"DELETE", "/templates/tags", map[string]any{"name": v.templateName, "tags": []string{"latest"}}},
		{"POST", "/sandboxes", map[string]any{"templateID": v.template}}, {"POST", "/sandboxes", map[string]any{"templateID": v.templateName}},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": v.template}},
		{"POST", "/v2/templates/rt-b-build/builds/x", map[string]any{"fromTemplate": v.template}},
		{"DELETE", "/templates/" + tpl, nil},
		{"GET", "/volumes/" + vol, nil}, {"GET", "/volumecontent/" + vol + "/dir?path=/", nil}, {"GET", "/volumecontent/" + vol + "/file?path=/x", nil},
		{"PUT", "/volumecontent/" + vol + "/file?path=/stolen", "x"}, {"POST", "/volumecontent/" + vol + "/dir?path=/stolen", nil},
		{"DELETE", "/volumecontent/" + vol + "/path?path=/", nil},
		{"POST", "/sandboxes", map[string]any{"templateID": "base", "volumeMounts": []map[string]any{{"name": v.volumeName, "path": "/mnt/v"}}}},
		{"POST", "/sandboxes", map[string]any{"templateID": "base", "volumeMounts": []map[string]any{{"name": v.volume, "path": "/mnt/v"}}}},
		{"DELETE", "/volumes/" + vol, nil},
		{"POST", "/sandboxes", map[string]any{"templateID": v.snapshot}}, {"POST", "/v2/sandboxes", map[string]any{"templateID": "rt-victim-snap"}},
		{"DELETE", "/snapshots/" + snap, nil},
		{"GET", "/secrets/" + sec, nil}, {"POST", "/secrets/" + sec, map[string]any{"value": "overwritten"}}, {"DELETE", "/secrets/" + sec, nil},
		{"GET", "/teams/" + env.teamA + "/metrics", nil}, {"GET", "/teams/" + env.teamA + "/metrics/max?metric=concurrent_sandboxes", nil},
	}
	var created []string
	for _, at := range attempts {
		var out struct {
			SandboxID string `json:"sandboxID"`
		}
		code, text := call(env.keyB, at.method, at.path, at.body, &out)
		if out.SandboxID != "" {
			created = append(created, out.SandboxID)
		}
		probe(t, classCrossTenant, at.method+" "+at.path, code >= 400 && code < 500, fmt.Sprintf("answered %d %.200s", code, text))
	}
	for _, id := range created {
		_, _ = call(env.keyB, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
	}
	// An upload link names a template but is the caller team's (E2B's route shape): what B
	// uploads through a link "for" A's template must not become A's.
	hash := strings.Repeat("0", 60) + "5eed"
	var link struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	code, text := call(env.keyB, http.MethodGet, "/templates/"+tpl+"/files/"+hash, nil, &link)
	if link.URL != "" {
		if req, err := http.NewRequest(http.MethodPut, link.URL, strings.NewReader("rt-b-upload")); err == nil {
			if res, err := httpClient.Do(req); err == nil {
				res.Body.Close()
			}
		}
	}
	link.Present = false
	call(env.keyB, http.MethodGet, "/templates/"+tpl+"/files/"+hash, nil, &link)
	t.Logf("control: B's upload is present for B: %v", link.Present)
	link.Present = false
	codeA, textA := call(env.keyA, http.MethodGet, "/templates/"+tpl+"/files/"+hash, nil, &link)
	probe(t, classCrossTenant, "B's upload through a link for A's template is not A's", code < 500 && codeA < 500 && !link.Present,
		fmt.Sprintf("B got %d %.100s; then A got %d %.100s", code, text, codeA, textA))
	// B's lists name nothing of A's.
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running,paused", "/templates", "/v2/templates", "/volumes",
		"/snapshots", "/snapshots?sandboxID=" + sb, "/secrets", "/teams"} {
		code, text := call(env.keyB, http.MethodGet, path, nil, nil)
		leaked := ""
		for _, id := range []string{v.sandbox, v.template, v.volume, v.snapshot, v.secret, v.templateName, env.teamA, env.keyA} {
			if strings.Contains(text, id) {
				leaked = id
			}
		}
		probe(t, classCrossTenant, "GET "+path+" as team B", code < 500 && leaked == "", fmt.Sprintf("answered %d naming %q", code, leaked))
	}
	// A's things are intact.
	for _, path := range []string{"/sandboxes/" + sb, "/templates/" + tpl, "/volumes/" + vol, "/secrets/" + sec} {
		code, text := call(env.keyA, http.MethodGet, path, nil, nil)
		probe(t, classCrossTenant, "team A still has "+path, code == http.StatusOK, fmt.Sprintf("answered %d %.200s", code, text))
	}
	var snaps []cove.SnapshotInfo
	code, _ = call(env.keyA, http.MethodGet, "/snapshots", nil, &snaps)
	found := false
	for _, s := range snaps {
		found = found || s.ID == v.snapshot
	}
	probe(t, classCrossTenant, "team A still has its snapshot", code == http.StatusOK && found, fmt.Sprintf("answered %d, %d snapshots", code, len(snaps)))
}

// TestPlantedSecrets runs last: no answer the server gave during the run (bodies and
// headers, every class) and no line of its log holds a planted secret value.
func TestPlantedSecrets(t *testing.T) {
	need(t)
	defer report(t, classPlanted)
	answers.mu.Lock()
	seen, leaks := answers.seen, answers.leaks
	answers.mu.Unlock()
	probe(t, classPlanted, fmt.Sprintf("%d answers", seen), len(leaks) == 0, fmt.Sprintf("held a planted secret: %v", leaks))
	log, _ := os.ReadFile(env.server.LogPath)
	for _, p := range planted {
		probe(t, classPlanted, fmt.Sprintf("the server's log and %.12s...", p), !strings.Contains(string(log), p), "the server's log holds it")
	}
}
