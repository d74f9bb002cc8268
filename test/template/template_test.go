// Package template_test drives template builds end to end: the official npm e2b SDK's
// Template builder against a real `cove server` on a template store of the test's own (its
// base is the shared one), then sandboxes from what it built.
package template_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/oci/ocitest"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// TestOfficialSDKBuildsTemplates runs test/compat/template.test.mjs, the npm SDK's Template
// builder, on each runtime: a server's builds run on its default engine.
func TestOfficialSDKBuildsTemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server and node: skipped under -short")
	}
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		registry := ocitest.Registry(t) // on loopback: the server must allow it
		server := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t), Args: []string{"--registry-allow", registry}})
		ocitest.Push(t, registry+"/cove/busybox:1", busyboxImage(t))
		covetest.RunSDKScenarios(t, "template.test.mjs", server.URL, server.Key,
			"COVE_TEST_REGISTRY="+registry, "COVE_TEST_REGISTRY_USER="+ocitest.User, "COVE_TEST_REGISTRY_PASSWORD="+ocitest.Password)
	})
}

// busyboxImage is an image of the test busybox rootfs, with a /bin/bash that is busybox's
// sh (the SDK runs commands with bash) and a command of its own.
func busyboxImage(t *testing.T) v1.Image {
	return ocitest.Image(t, runtimetest.BusyboxRootfs(t), map[string]string{
		"bin/bash":            "#!/bin/sh\nexec /bin/sh \"$@\"\n",
		"usr/local/bin/hello": "#!/bin/sh\necho hello from the image\n",
	}, v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "FROM_IMAGE=yes"}})
}

func TestCLIBuildsFromImages(t *testing.T) {
	covetest.Skip(t)
	templates := covetest.OwnTemplates(t)
	registry := ocitest.Registry(t)
	img := busyboxImage(t)
	ocitest.Push(t, registry+"/cove/busybox:1", img)
	bin := covetest.Binary(t)
	ctxDir := t.TempDir()
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+registry+"/cove/busybox:1\nRUN hello > /from-image.txt\n"), 0o644)

	t.Run("a Dockerfile FROM an image in a registry builds", func(t *testing.T) {
		cmd := exec.Command(bin, "template", "build", "on-image", "--data", t.TempDir(), "--templates", templates, "-f", filepath.Join(ctxDir, "Dockerfile"), ctxDir)
		cmd.Env = append(os.Environ(), "COVE_REGISTRY_USERNAME="+ocitest.User, "COVE_REGISTRY_PASSWORD="+ocitest.Password)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "template on-image ready") || !strings.Contains(string(out), "==> pull "+registry) {
			t.Fatalf("build: %v\n%s", err, out)
		}
		layers, _ := filepath.Glob(filepath.Join(templates, ".layers", "*", "diff", "from-image.txt"))
		if len(layers) != 1 {
			t.Fatalf("no layer holds the RUN step's file: %v", layers)
		}
		if b, _ := os.ReadFile(layers[0]); string(b) != "hello from the image\n" {
			t.Fatalf("from-image.txt = %q", b)
		}
	})

	t.Run("without the registry's credentials the pull fails and says so", func(t *testing.T) {
		out, err := exec.Command(bin, "template", "build", "no-creds", "--data", t.TempDir(), "--templates", t.TempDir(), "-f", filepath.Join(ctxDir, "Dockerfile"), ctxDir).CombinedOutput()
		if err == nil || !strings.Contains(strings.ToLower(string(out)), "unauthorized") {
			t.Fatalf("build without credentials: %v\n%s", err, out)
		}
	})

	t.Run("cove template import takes a docker save archive", func(t *testing.T) {
		archive := ocitest.Save(t, "cove/busybox:saved", img)
		out, err := exec.Command(bin, "template", "import", "saved", archive, "--data", t.TempDir(), "--templates", templates).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "template saved ready") {
			t.Fatalf("import: %v\n%s", err, out)
		}
		if b, err := os.ReadFile(filepath.Join(templates, "saved", "rootfs", "usr/local/bin/hello")); err != nil || !strings.Contains(string(b), "hello from the image") {
			t.Fatalf("imported hello = %q, %v", b, err)
		}
	})
}

func TestGoSDKAndCLIBuildTemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	server := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("hello from go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})

	t.Run("the CLI pushes a template whose steps run on the server", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, covetest.Binary(t), "template", "push", "go-tpl", "--api-url", server.URL, "--api-key", server.Key,
			"--context", ctxDir, "--step", "COPY hello.txt /home/user/", "--step", "ENV WHO=cli", "--step", "RUN cat hello.txt > copy.txt && echo $WHO >> copy.txt")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "template go-tpl ready") || !strings.Contains(string(out), "==> [3/3] RUN") {
			t.Fatalf("cove template push: %v\n%s", err, out)
		}
	})

	t.Run("the Go SDK rebuilds it from the cache and a sandbox sees the steps", func(t *testing.T) {
		var lines []string
		st, err := client.BuildTemplate(ctx, "go-tpl", cove.TemplateDefinition{FromTemplate: "base", Steps: []cove.TemplateStep{
			{Type: "COPY", Args: []string{"hello.txt", "/home/user/"}},
			{Type: "ENV", Args: []string{"WHO", "cli"}},
			{Type: "RUN", Args: []string{"cat hello.txt > copy.txt && echo $WHO >> copy.txt"}},
		}}, cove.TemplateBuildOptions{ContextDir: ctxDir, OnLog: func(e cove.BuildLogEntry) { lines = append(lines, e.Message) }})
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != "ready" || strings.Count(strings.Join(lines, "\n"), "cached: layer") != 2 {
			t.Fatalf("status %s, log:\n%s", st.Status, strings.Join(lines, "\n"))
		}
		sb, err := client.Create(ctx, cove.SandboxOptions{Template: "go-tpl"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Kill(context.Background()) })
		res, err := sb.Commands.Run(ctx, "cat copy.txt; echo $WHO")
		if err != nil || res.Stdout != "hello from go\ncli\ncli\n" {
			t.Fatalf("stdout %q, %v", res.Stdout, err)
		}
	})

	t.Run("a failing step is a BuildError naming the step", func(t *testing.T) {
		_, err := client.BuildTemplate(ctx, "go-bad", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo going-down; exit 4"}}}}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) || be.Step != "1" || !strings.Contains(be.Message, "exit status 4") || !strings.Contains(be.Message, "going-down") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("bad definitions are refused with a 400 naming the problem", func(t *testing.T) {
		_, err := client.BuildTemplate(ctx, "go-bad", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "FROB", Args: []string{"x"}}}}, cove.TemplateBuildOptions{})
		var ce *cove.Error
		if !errors.As(err, &ce) || ce.StatusCode != 400 || !strings.Contains(err.Error(), "FROB") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("tags: the SDK tags a build and the CLI lists and removes tags", func(t *testing.T) {
		if err := client.TagTemplate(ctx, "go-tpl", "v1", "stable"); err != nil {
			t.Fatal(err)
		}
		cli := func(args ...string) string {
			out, err := exec.CommandContext(ctx, covetest.Binary(t), append(append([]string{"template"}, args...),
				"--api-url", server.URL, "--api-key", server.Key)...).CombinedOutput()
			if err != nil {
				t.Fatalf("cove template %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		if out := cli("tags", "go-tpl"); !strings.Contains(out, "default\t") || !strings.Contains(out, "stable\t") || !strings.Contains(out, "v1\t") {
			t.Fatalf("tags:\n%s", out)
		}
		cli("untag", "go-tpl", "v1")
		tags, err := client.TemplateTags(ctx, "go-tpl")
		if err != nil || len(tags) != 2 || tags[1].Tag != "stable" {
			t.Fatalf("tags after untag: %+v, %v", tags, err)
		}
		sb, err := client.Create(ctx, cove.SandboxOptions{Template: "go-tpl:stable"})
		if err != nil {
			t.Fatal(err)
		}
		sb.Kill(ctx)
	})

	t.Run("another team sees the template once it is public, and may never rebuild, tag or delete it", func(t *testing.T) {
		hostCLI := func(args ...string) string {
			cmd := exec.CommandContext(ctx, covetest.Binary(t), args...)
			cmd.Env = append(os.Environ(), "COVE_DATA="+server.DataDir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("cove %v: %v\n%s", args, err, out)
			}
			return strings.TrimSpace(string(out))
		}
		team := hostCLI("team", "create", "other-builders")
		key := strings.Fields(hostCLI("apikey", "create", "other", "--team", team))[0]
		other := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: key})
		var ce *cove.Error
		if _, err := other.Create(ctx, cove.SandboxOptions{Template: "go-tpl"}); !errors.As(err, &ce) || ce.StatusCode != 404 {
			t.Fatalf("another team starts a sandbox from a private template: %v, want 404", err)
		}
		if _, err := other.Template(ctx, "go-tpl"); !errors.As(err, &ce) || ce.StatusCode != 404 {
			t.Fatalf("another team reads a private template: %v, want 404", err)
		}
		var patched struct {
			Names []string `json:"names"`
		}
		if code := sendJSON(t, server.URL, key, http.MethodPatch, "/templates/go-tpl", map[string]any{"public": true}, &patched); code != 404 {
			t.Fatalf("another team makes the template public: %d, want 404", code)
		}
		if code := sendJSON(t, server.URL, server.Key, http.MethodPatch, "/v2/templates/go-tpl", map[string]any{"public": true}, &patched); code != 200 || len(patched.Names) != 1 {
			t.Fatalf("the owner makes the template public: %d %+v", code, patched)
		}
		sb, err := other.Create(ctx, cove.SandboxOptions{Template: "go-tpl"})
		if err != nil {
			t.Fatalf("another team starts a sandbox from the public template: %v", err)
		}
		sb.Kill(ctx)
		for what, err := range map[string]error{
			"delete":      other.DeleteTemplate(ctx, "go-tpl"),
			"tag":         other.TagTemplate(ctx, "go-tpl", "mine"),
			"delete base": other.DeleteTemplate(ctx, "base"),
		} {
			if !errors.As(err, &ce) || ce.StatusCode != 403 {
				t.Errorf("%s by another team: %v, want 403", what, err)
			}
		}
		_, err = other.BuildTemplate(ctx, "go-tpl", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"true"}}}}, cove.TemplateBuildOptions{})
		if !errors.As(err, &ce) || ce.StatusCode != 403 {
			t.Errorf("rebuild by another team: %v, want 403", err)
		}

		// Uploads are each team's own: naming the first team's files hash finds nothing.
		hash, err := build.ArchiveContext(ctxDir, "hello.txt", "/home/user/", io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			BuildID string `json:"buildID"`
		}
		if code := sendJSON(t, server.URL, key, http.MethodPost, "/v3/templates", map[string]any{"name": "borrowed"}, &req); code != 202 {
			t.Fatalf("request a build: %d", code)
		}
		var fail struct {
			Message string `json:"message"`
		}
		code := sendJSON(t, server.URL, key, http.MethodPost, "/v2/templates/borrowed/builds/"+req.BuildID, map[string]any{"fromTemplate": "base",
			"steps": []map[string]any{{"type": "COPY", "args": []string{"hello.txt", "/home/user/"}, "filesHash": hash}}}, &fail)
		if code != 400 || !strings.Contains(fail.Message, "no files were uploaded") {
			t.Fatalf("a COPY of another team's upload: %d %q, want 400", code, fail.Message)
		}
	})

	t.Run("a fromImage on the server's own port is refused before any pull, naming the address", func(t *testing.T) {
		var req struct {
			BuildID string `json:"buildID"`
		}
		if code := sendJSON(t, server.URL, server.Key, http.MethodPost, "/v3/templates", map[string]any{"name": "own-port"}, &req); code != 202 {
			t.Fatalf("request a build: %d", code)
		}
		var fail struct {
			Message string `json:"message"`
		}
		self := strings.TrimPrefix(server.URL, "http://")
		code := sendJSON(t, server.URL, server.Key, http.MethodPost, "/v2/templates/own-port/builds/"+req.BuildID, map[string]any{"fromImage": self + "/cove/x:1"}, &fail)
		if code != 403 || !strings.Contains(fail.Message, "127.0.0.1") || !strings.Contains(fail.Message, "loopback") {
			t.Fatalf("fromImage %s/cove/x:1: %d %q, want 403 naming the address", self, code, fail.Message)
		}
	})

	t.Run("delete removes the template", func(t *testing.T) {
		if err := client.DeleteTemplate(ctx, "go-tpl"); err != nil {
			t.Fatal(err)
		}
		var ce *cove.Error
		if _, err := client.Template(ctx, "go-tpl"); !errors.As(err, &ce) || ce.StatusCode != 404 {
			t.Fatalf("get after delete: %v", err)
		}
	})
}

func TestCLIBuildsFromADockerfile(t *testing.T) {
	covetest.Skip(t)
	templates := covetest.OwnTemplates(t)
	ctxDir := t.TempDir()
	os.WriteFile(filepath.Join(ctxDir, "greet.sh"), []byte("#!/bin/sh\necho \"$GREETING from $(whoami) in $(pwd)\"\n"), 0o644)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(`FROM base
ARG WHO=docker
ENV GREETING="hello $WHO"
WORKDIR /srv
COPY --chmod=755 greet.sh /usr/local/bin/
RUN greet.sh > /srv/greeting.txt
USER user
CMD ["sleep", "infinity"]
`), 0o644)
	bin := covetest.Binary(t)
	build := func(extra ...string) string {
		args := append([]string{"template", "build", "docker-tpl", "--data", t.TempDir(), "--templates", templates,
			"-f", filepath.Join(ctxDir, "Dockerfile"), ctxDir}, extra...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := build("--build-arg", "WHO=cli")
	if !strings.Contains(out, "template docker-tpl ready") {
		t.Fatalf("output:\n%s", out)
	}
	found := false
	layers, _ := filepath.Glob(filepath.Join(templates, ".layers", "*", "diff", "srv", "greeting.txt"))
	for _, l := range layers {
		if g, _ := os.ReadFile(l); string(g) == "hello cli from root in /srv\n" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no layer holds /srv/greeting.txt as the RUN step wrote it (%v)", layers)
	}
	if again := build("--build-arg", "WHO=cli", "--replace"); strings.Count(again, "cached: layer") != 3 {
		t.Fatalf("rebuild was not all cached:\n%s", again)
	}
	bad := filepath.Join(ctxDir, "Bad.Dockerfile")
	os.WriteFile(bad, []byte("FROM base\nHEALTHCHECK CMD true\n"), 0o644)
	res, err := exec.Command(bin, "template", "build", "bad", "--data", t.TempDir(), "--templates", templates, "-f", bad, ctxDir).CombinedOutput()
	if err == nil || !strings.Contains(string(res), "line 2 (HEALTHCHECK)") {
		t.Fatalf("bad Dockerfile: %v\n%s", err, res)
	}
}

// sendJSON sends in as JSON to url+path with key and decodes the answer into out.
func sendJSON(t *testing.T, url, key, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url+path, body)
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	json.NewDecoder(res.Body).Decode(out)
	return res.StatusCode
}

// getJSON GETs path from the server with its key and decodes the answer.
func getJSON(t *testing.T, s *covetest.Server, path string, out any) int {
	t.Helper()
	return sendJSON(t, s.URL, s.Key, http.MethodGet, path, nil, out)
}

func TestBuildsAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	server := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
	st, err := client.BuildTemplate(ctx, "logged", cove.TemplateDefinition{FromTemplate: "base",
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo needle-in-the-build-log"}}}}, cove.TemplateBuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	server.Stop()
	server.Restart()

	t.Run("a build's log outlives the server, in the store, and reads by the build id as a sandbox's", func(t *testing.T) {
		var status struct {
			Status     string `json:"status"`
			LogEntries []struct {
				Message string `json:"message"`
			} `json:"logEntries"`
		}
		getJSON(t, server, "/templates/logged/builds/"+st.BuildID+"/status", &status)
		var all []string
		for _, e := range status.LogEntries {
			all = append(all, e.Message)
		}
		if status.Status != "ready" || !strings.Contains(strings.Join(all, "\n"), "needle-in-the-build-log") {
			t.Fatalf("status %s, log:\n%s", status.Status, strings.Join(all, "\n"))
		}
		var found struct {
			Logs []struct {
				Message string            `json:"message"`
				Fields  map[string]string `json:"fields"`
			} `json:"logs"`
		}
		if code := getJSON(t, server, "/v2/sandboxes/"+st.BuildID+"/logs?search=needle", &found); code != 200 || len(found.Logs) == 0 {
			t.Fatalf("search the build's log: %d %+v", code, found)
		}
		if found.Logs[0].Fields["build.id"] != st.BuildID || found.Logs[0].Fields["build.step"] != "1" {
			t.Fatalf("fields = %v", found.Logs[0].Fields)
		}
	})

	t.Run("a build the server crashed during is failed as orphaned and leaves no template", func(t *testing.T) {
		client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key}) // the restart moved the port
		started := make(chan string, 1)
		buildCtx, stop := context.WithCancel(ctx)
		defer stop()
		go client.BuildTemplate(buildCtx, "crashed", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo started; sleep 300"}}}},
			cove.TemplateBuildOptions{OnLog: func(e cove.BuildLogEntry) {
				if e.Message == "started" {
					select {
					case started <- "":
					default:
					}
				}
			}})
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the build never started its step")
		}
		server.Crash()
		server.Restart()
		client = cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
		info, err := client.Template(ctx, "crashed")
		var ce *cove.Error
		if err == nil || !errors.As(err, &ce) || ce.StatusCode != 404 {
			t.Fatalf("the crashed build's template: %+v, %v", info, err)
		}
		var status struct {
			Status string `json:"status"`
			Reason struct {
				Message string `json:"message"`
			} `json:"reason"`
		}
		// The build's record is in the server's store: find its id there.
		db, err := sqlite.Open(ctx, filepath.Join(server.DataDir, "cove.db"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := db.ListTemplateBuilds(ctx, "crashed")
		db.Close()
		if err != nil || len(recs) != 1 {
			t.Fatalf("records of the crashed build: %+v, %v", recs, err)
		}
		id := recs[0].ID
		getJSON(t, server, "/templates/crashed/builds/"+id+"/status", &status)
		if status.Status != "error" || !strings.Contains(status.Reason.Message, "orphaned") {
			t.Fatalf("status = %+v", status)
		}
	})
}
