package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// viewer is a browser-like client of the console: a cookie jar, no redirects followed
// for POSTs unless asked.
type viewer struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newViewer(t *testing.T, base string) *viewer {
	jar, _ := cookiejar.New(nil)
	return &viewer{t: t, base: base, hc: &http.Client{Jar: jar}}
}

func (v *viewer) get(path string) (int, string) {
	v.t.Helper()
	res, err := v.hc.Get(v.base + path)
	if err != nil {
		v.t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (v *viewer) post(path string, form url.Values) (int, string) {
	v.t.Helper()
	res, err := v.hc.PostForm(v.base+path, form)
	if err != nil {
		v.t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func (v *viewer) csrf(page string) string {
	v.t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		v.t.Fatalf("no csrf token on the page:\n%s", page)
	}
	return m[1]
}

func (v *viewer) signIn(key string) string {
	v.t.Helper()
	code, page := v.post("/dashboard/login", url.Values{"key": {key}})
	if code != http.StatusOK || !strings.Contains(page, "<h1>Sandboxes") {
		v.t.Fatalf("sign in: %d\n%s", code, page)
	}
	return page
}

func TestConsole(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(map[string]any{"metadata": map[string]string{"taskId": "console-7"}})

	t.Run("signed-out pages send the viewer to sign in", func(t *testing.T) {
		v := newViewer(t, s.URL)
		code, page := v.get("/dashboard/sandboxes/" + id)
		if code != http.StatusOK || !strings.Contains(page, `action="/dashboard/login"`) {
			t.Fatalf("got %d, want the sign-in page:\n%s", code, page)
		}
	})

	t.Run("a wrong key is refused and the page names the request id", func(t *testing.T) {
		v := newViewer(t, s.URL)
		code, page := v.post("/dashboard/login", url.Values{"key": {"e2b_nope"}})
		if code != http.StatusUnauthorized || !strings.Contains(page, "invalid or revoked API key") || !strings.Contains(page, "request <code") {
			t.Fatalf("got %d:\n%s", code, page)
		}
	})

	t.Run("the session cookie is HttpOnly and SameSite=Strict", func(t *testing.T) {
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
			PostForm(s.URL+"/dashboard/login", url.Values{"key": {s.Key}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		c := res.Header.Get("Set-Cookie")
		if !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") {
			t.Fatalf("Set-Cookie = %q", c)
		}
	})

	v := newViewer(t, s.URL)
	list := v.signIn(s.Key)

	t.Run("the team's sandbox is listed with its metadata and found by metadata filter", func(t *testing.T) {
		if !strings.Contains(list, id) || !strings.Contains(list, "taskId=console-7") {
			t.Fatalf("list lacks %s:\n%s", id, list)
		}
		_, page := v.get("/dashboard/?meta=taskId%3Dother")
		if strings.Contains(page, id) {
			t.Fatalf("filter taskId=other still lists %s", id)
		}
		_, page = v.get("/dashboard/?state=running&meta=taskId%3Dconsole-7")
		if !strings.Contains(page, id) {
			t.Fatalf("filter taskId=console-7 lost %s", id)
		}
	})

	t.Run("a sandbox created through the API is pushed to the live list", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/dashboard/live?meta=taskId%3Dlive-1", nil)
		res, err := v.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
			t.Fatalf("live: %d %s", res.StatusCode, ct)
		}
		lines := bufio.NewScanner(res.Body)
		event := func() string { // the data of the next event
			var data []string
			for lines.Scan() {
				l := lines.Text()
				if l == "" && data != nil {
					return strings.Join(data, "\n")
				}
				if d, ok := strings.CutPrefix(l, "data: "); ok {
					data = append(data, d)
				}
			}
			t.Fatalf("live stream ended: %v", lines.Err())
			return ""
		}
		if first := event(); !strings.HasPrefix(first, "0\n") || !strings.Contains(first, "No sandboxes match") {
			t.Fatalf("first event: %q", first)
		}
		live := a.create(map[string]any{"metadata": map[string]string{"taskId": "live-1"}})
		if next := event(); !strings.HasPrefix(next, "1\n") || !strings.Contains(next, `data-id="`+live+`"`) {
			t.Fatalf("after create: %q", next)
		}
	})

	t.Run("a bad filter is a 400 naming the field", func(t *testing.T) {
		code, page := v.get("/dashboard/?state=sleepy")
		if code != http.StatusBadRequest || !strings.Contains(page, "state:") {
			t.Fatalf("got %d:\n%s", code, page)
		}
	})

	t.Run("another team's key sees none of it", func(t *testing.T) {
		team := strings.TrimSpace(cli(t, s, "team", "create", "console-other"))
		out := cli(t, s, "apikey", "create", "b", "--team", team)
		b := newViewer(t, s.URL)
		if page := b.signIn(strings.Fields(out)[0]); strings.Contains(page, id) {
			t.Fatalf("other team's list shows %s", id)
		}
		if code, _ := b.get("/dashboard/sandboxes/" + id); code != http.StatusNotFound {
			t.Fatalf("other team's sandbox page: %d, want 404", code)
		}
		_, page := b.get("/dashboard/")
		if code, _ := b.post("/dashboard/sandboxes/"+id+"/kill", url.Values{"csrf": {b.csrf(page)}}); code != http.StatusNotFound {
			t.Fatalf("other team's kill: %d, want 404", code)
		}
	})

	t.Run("an action without the session's csrf token is refused and changes nothing", func(t *testing.T) {
		code, _ := v.post("/dashboard/sandboxes/"+id+"/kill", url.Values{"csrf": {"forged"}})
		if code != http.StatusForbidden {
			t.Fatalf("got %d, want 403", code)
		}
		if code, out, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || out["state"] != "running" {
			t.Fatalf("sandbox after forged kill: %d %v", code, out)
		}
	})

	t.Run("set timeout rejects a bad value with the field named", func(t *testing.T) {
		_, page := v.get("/dashboard/sandboxes/" + id)
		code, body := v.post("/dashboard/sandboxes/"+id+"/timeout", url.Values{"csrf": {v.csrf(page)}, "timeout": {"soon"}})
		if code != http.StatusBadRequest || !strings.Contains(body, "timeout:") {
			t.Fatalf("got %d:\n%s", code, body)
		}
	})

	t.Run("a command run through the API shows its record and log line, and the log search finds it", func(t *testing.T) {
		run(t, s, id, `echo console-hello; echo other-line; exit 4`, "req-console-1")
		var page string
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, page = v.get("/dashboard/sandboxes/" + id)
			logs := section(page, `id="logs"`)
			if strings.Contains(logs, "console-hello") && strings.Contains(page, `class="cause">exited`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no command record and log line after 10 s:\n%s", page)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(page, "req-console-1") || !strings.Contains(page, "<td>4</td>") {
			t.Errorf("command record lacks its request id or exit code 4:\n%s", page)
		}
		_, found := v.get("/dashboard/sandboxes/" + id + "?q=console-hello")
		logs := section(found, `id="logs"`)
		if !strings.Contains(logs, "console-hello") || strings.Contains(logs, "other-line") {
			t.Errorf("search console-hello: %s", logs)
		}
	})

	t.Run("the logs page finds the command's line across the team's sandboxes, and only the team's", func(t *testing.T) {
		code, page := v.get("/dashboard/logs?q=console-hello&level=info&meta=taskId%3Dconsole-7")
		res := section(page, `id="logresults"`)
		if code != http.StatusOK || !strings.Contains(res, "console-hello") || !strings.Contains(res, `href="/dashboard/sandboxes/`+id+`"`) || strings.Contains(res, "other-line") {
			t.Fatalf("logs search: %d\n%s", code, res)
		}
		writeArtifact(t, "console-logs.html", page)
		team := strings.TrimSpace(cli(t, s, "team", "create", "console-logs-other"))
		other := newViewer(t, s.URL)
		other.signIn(strings.Fields(cli(t, s, "apikey", "create", "c", "--team", team))[0])
		if _, page := other.get("/dashboard/logs?q=console-hello"); strings.Contains(section(page, `id="logresults"`), "console-hello") {
			t.Fatalf("another team's logs search finds the line:\n%s", page)
		}
		if code, _ := other.get("/dashboard/sandboxes/" + id + "/tail"); code != http.StatusNotFound {
			t.Fatalf("another team's tail of %s: %d, want 404", id, code)
		}
	})

	t.Run("the trace of the command's request id shows its end cause and links the sandbox", func(t *testing.T) {
		code, page := v.get("/dashboard/trace?id=req-console-1")
		tl := section(page, `id="waterfall"`)
		if code != http.StatusOK || !strings.Contains(tl, "exited 4") || !strings.Contains(tl, "end_cause=exited") ||
			!strings.Contains(tl, `href="/dashboard/sandboxes/`+id+`"`) {
			t.Fatalf("trace: %d\n%s", code, page)
		}
		writeArtifact(t, "console-trace.html", page)
	})

	t.Run("a kill from the console is recorded with reason request and the viewer's key as actor", func(t *testing.T) {
		_, page := v.get("/dashboard/sandboxes/" + id)
		writeArtifact(t, "console-sandbox.html", page)
		code, body := v.post("/dashboard/sandboxes/"+id+"/kill", url.Values{"csrf": {v.csrf(page)}})
		if code != http.StatusOK || !strings.Contains(body, `id="kill-reason">request<`) {
			t.Fatalf("after kill: %d\n%s", code, body)
		}
		writeArtifact(t, "console-killed.html", body)
		life := section(body, `id="lifecycle"`)
		if !strings.Contains(life, `class="src">sandbox.lifecycle.created<`) || !strings.Contains(life, `class="src">sandbox.lifecycle.killed<`) || !strings.Contains(life, "<dt>kill reason</dt><dd>request</dd>") ||
			!strings.Contains(life, "<summary>Post-mortem at ") || !strings.Contains(life, `class="processes"`) || strings.Contains(life, "map[") {
			t.Errorf("lifecycle lacks created and killed with reason request and its post-mortem:\n%s", life)
		}
		created := regexp.MustCompile(`"msg":"sandbox created".*"api_key.id":"([^"]+)"`).FindStringSubmatch(s.Logs())
		actor := regexp.MustCompile(`id="kill-actor">([^ ]+) `).FindStringSubmatch(body)
		if created == nil || actor == nil || actor[1] != created[1] {
			t.Fatalf("kill actor %v, want the signed-in key %v", actor, created)
		}
		killedWith(t, a, id, "request")
	})

	t.Run("the events page lists the sandbox's lifecycle with the kill's reason", func(t *testing.T) {
		code, page := v.get("/dashboard/events?sandbox=" + id)
		ev := section(page, `id="events"`)
		if code != http.StatusOK || !strings.Contains(ev, "sandbox.lifecycle.created") || !strings.Contains(ev, "kill reason: request") {
			t.Fatalf("events: %d\n%s", code, ev)
		}
	})

	t.Run("a key made in the console works on the API until it is revoked there", func(t *testing.T) {
		_, page := v.get("/dashboard/keys")
		code, page := v.post("/dashboard/keys", url.Values{"csrf": {v.csrf(page)}, "name": {"from-console"}})
		m := regexp.MustCompile(`id="new-key" class="copy" tabindex="0">(e2b_[0-9a-f]+)<`).FindStringSubmatch(page)
		if code != http.StatusOK || m == nil {
			t.Fatalf("create key: %d\n%s", code, page)
		}
		k := client{t: t, url: s.URL, key: m[1]}
		if code, _, _ := k.do(http.MethodGet, "/v2/sandboxes", nil); code != http.StatusOK {
			t.Fatalf("the new key on the API: %d", code)
		}
		row := regexp.MustCompile(`<tr data-key="([^"]+)"><td>from-console<`).FindStringSubmatch(page)
		if row == nil {
			t.Fatalf("the new key is not listed:\n%s", page)
		}
		if code, _ := v.post("/dashboard/keys/"+row[1]+"/revoke", url.Values{"csrf": {v.csrf(page)}}); code != http.StatusOK {
			t.Fatalf("revoke: %d", code)
		}
		if code, _, _ := k.do(http.MethodGet, "/v2/sandboxes", nil); code != http.StatusUnauthorized {
			t.Fatalf("the revoked key on the API: %d, want 401", code)
		}
	})

	t.Run("the health page shows the server's sandboxes, kills by reason, disk space and webhook attempts", func(t *testing.T) {
		code, page := v.get("/dashboard/health")
		if code != http.StatusOK || !strings.Contains(page, `id="m-cove_sandboxes"`) || !strings.Contains(page, "kill_reason=request") ||
			!strings.Contains(page, "<td>dir=data</td>") || !strings.Contains(page, `id="m-cove_webhook_attempts_total"`) {
			t.Fatalf("health: %d\n%s", code, page)
		}
	})

	t.Run("the admin token sees every team", func(t *testing.T) {
		tok, err := os.ReadFile(filepath.Join(s.DataDir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		ad := newViewer(t, s.URL)
		ad.signIn(strings.TrimSpace(string(tok)))
		if _, page := ad.get("/dashboard/?state=killed"); !strings.Contains(page, id) {
			t.Fatalf("admin's killed list lacks %s", id)
		}
		code, page := ad.get("/dashboard/trace?id=req-console-1")
		if tl := section(page, `id="waterfall"`); code != http.StatusOK || !strings.Contains(tl, "exited 4") || !strings.Contains(tl, "team.id=") {
			t.Fatalf("admin's trace: %d\n%s", code, page)
		}
	})

	t.Run("sign out ends the session", func(t *testing.T) {
		_, page := v.get("/dashboard/")
		v.post("/dashboard/logout", url.Values{"csrf": {v.csrf(page)}})
		if _, page := v.get("/dashboard/"); !strings.Contains(page, `action="/dashboard/login"`) {
			t.Fatalf("still signed in after sign out:\n%s", page)
		}
	})
}

// writeArtifact keeps a rendered page in $COVE_TEST_ARTIFACTS (or the test's temp dir).
func writeArtifact(t *testing.T, name, body string) {
	dir := os.Getenv("COVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Errorf("write artifact %s: %v", name, err)
	}
}

// section is the page from marker on; "" when the page lacks it.
func section(page, marker string) string {
	i := strings.Index(page, marker)
	if i < 0 {
		return ""
	}
	return page[i:]
}

func TestConsoleSessionsSurviveARestart(t *testing.T) {
	s := covetest.Start(t, "")
	team := strings.TrimSpace(cli(t, s, "team", "create", "console-restart"))
	key := strings.Fields(cli(t, s, "apikey", "create", "viewer", "--team", team))[0]
	v := newViewer(t, s.URL)
	v.signIn(key)

	s.Stop()
	s.Restart()
	v.base = s.URL
	t.Run("a session signed in before the restart still works", func(t *testing.T) {
		if code, page := v.get("/dashboard/"); code != http.StatusOK || !strings.Contains(page, "<h1>Sandboxes") {
			t.Fatalf("after restart: %d\n%s", code, page)
		}
	})
	t.Run("revoking its key from the CLI ends the session", func(t *testing.T) {
		_, page := v.get("/dashboard/keys")
		row := regexp.MustCompile(`<tr data-key="([^"]+)"><td>viewer<`).FindStringSubmatch(page)
		if row == nil {
			t.Fatalf("key not listed:\n%s", page)
		}
		cli(t, s, "apikey", "revoke", row[1], "--team", team)
		if _, page := v.get("/dashboard/"); !strings.Contains(page, `action="/dashboard/login"`) {
			t.Fatalf("still signed in with a revoked key:\n%s", page)
		}
	})
}

func TestConsoleShowsTemplateBuilds(t *testing.T) {
	s := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	st, err := client.BuildTemplate(ctx, "console-tpl", cove.TemplateDefinition{FromTemplate: "base", Steps: []cove.TemplateStep{
		{Type: "ENV", Args: []string{"WHO", "console"}},
		{Type: "RUN", Args: []string{"echo built-for-the-console-$WHO"}},
	}}, cove.TemplateBuildOptions{})
	if err != nil || st.Status != "ready" {
		t.Fatalf("build: %+v, %v", st, err)
	}
	v := newViewer(t, s.URL)
	v.signIn(s.Key)

	t.Run("the build made through the API is listed on the Templates page", func(t *testing.T) {
		_, page := v.get("/dashboard/templates")
		for _, want := range []string{`<tr data-build="` + st.BuildID + `">`, `<td>console-tpl</td><td class="st-ready">ready</td>`, "<td>0/2</td>", `href="/dashboard/trace?id=`} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q:\n%s", want, section(page, `id="builds"`))
			}
		}
	})

	t.Run("its build page shows its steps and its log lines", func(t *testing.T) {
		page := waitBuildPage(t, v, st.BuildID, "built-for-the-console-console")
		for _, want := range []string{"ENV WHO=console", "RUN echo built-for-the-console-$WHO", "<td>built</td>"} {
			if !strings.Contains(page, want) {
				t.Errorf("build page lacks %q:\n%s", want, section(page, `id="steps"`))
			}
		}
		writeArtifact(t, "console-build.html", page)
		m := regexp.MustCompile(`href="/dashboard/trace\?id=([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("build page has no request link")
		}
		if _, trace := v.get("/dashboard/trace?id=" + m[1]); !strings.Contains(trace, "built-for-the-console-console") {
			t.Errorf("the trace of the build's request lacks its log line:\n%s", section(trace, `id="waterfall"`))
		}
	})

	t.Run("a failed build's page names the step and the error", func(t *testing.T) {
		_, err := client.BuildTemplate(ctx, "console-bad", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo going-down; exit 4"}}}}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) {
			t.Fatalf("build: %v, want a BuildError", err)
		}
		page := waitBuildPage(t, v, be.BuildID, "going-down")
		for _, want := range []string{`class="st-error">error`, "Failed at step 1", "exit status 4"} {
			if !strings.Contains(page, want) {
				t.Errorf("failed build's page lacks %q:\n%s", want, section(page, "<h1>"))
			}
		}
		if _, list := v.get("/dashboard/templates"); !strings.Contains(list, `<tr data-build="`+be.BuildID+`">`) {
			t.Errorf("the Templates page does not list the failed build %s", be.BuildID)
		}
	})

	t.Run("another team's key gets a 404 and sees none of the builds", func(t *testing.T) {
		team := strings.TrimSpace(cli(t, s, "team", "create", "console-builds-other"))
		b := newViewer(t, s.URL)
		b.signIn(strings.Fields(cli(t, s, "apikey", "create", "b", "--team", team))[0])
		if code, _ := b.get("/dashboard/builds/" + st.BuildID); code != http.StatusNotFound {
			t.Fatalf("other team's build page: %d, want 404", code)
		}
		if code, _ := b.get("/dashboard/builds/" + st.BuildID + "/tail"); code != http.StatusNotFound {
			t.Fatalf("other team's build tail: %d, want 404", code)
		}
		if _, page := b.get("/dashboard/templates"); strings.Contains(page, st.BuildID) {
			t.Fatalf("other team's templates page lists build %s", st.BuildID)
		}
	})
}

// waitBuildPage returns build id's console page once it shows the log line line: the log
// store takes lines in batches, after the build is ready.
func waitBuildPage(t *testing.T, v *viewer, id, line string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, page := v.get("/dashboard/builds/" + id)
		if code == http.StatusOK && strings.Contains(page, line) {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("build page (%d) lacks the log line %q after a minute:\n%s", code, line, page)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
