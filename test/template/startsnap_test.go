package template_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// startMarker is a start command that records, once, the PID it runs as and when it started,
// then serves port 8123 as that same process (exec keeps the PID).
const startMarker = `echo "$$ $(date +%s%N)" > /tmp/started && exec python3 -m http.server 8123`

// readyCheck passes once the port answers.
const readyCheck = `curl -sf -o /dev/null http://127.0.0.1:8123/`

// whatRuns reports, from inside a sandbox, the marker, the PID serving the port, and
// whether the port answers at once (no retry).
const whatRuns = `cat /tmp/started; pgrep -xf 'python3 -m http.server 8123'; curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8123/`

func skipWithoutCheckpoints(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("criu", "--version").Output(); err != nil || !strings.Contains(string(out), "Version: 4") {
		t.Skipf("start snapshots need CRIU 4 (scripts/criu.sh builds it): criu --version: %q %v", out, err)
	}
}

// buildStartTemplate builds name on base with startMarker and readyCheck, returning its log.
func buildStartTemplate(ctx context.Context, t *testing.T, client *cove.Client, name string) string {
	t.Helper()
	return buildStartTemplateWith(ctx, t, client, name, "echo built > /tmp/built-at-build")
}

// buildStartTemplateWith builds name with the RUN step run.
func buildStartTemplateWith(ctx context.Context, t *testing.T, client *cove.Client, name, run string) string {
	t.Helper()
	var lines []string
	st, err := client.BuildTemplate(ctx, name, cove.TemplateDefinition{FromTemplate: "base", StartCmd: startMarker, ReadyCmd: readyCheck,
		Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{run}}}},
		cove.TemplateBuildOptions{OnLog: func(e cove.BuildLogEntry) { lines = append(lines, e.Message) }})
	log := strings.Join(lines, "\n")
	if err != nil || st.Status != "ready" {
		t.Fatalf("build %s: %v\n%s", name, err, log)
	}
	return log
}

// runIn creates a sandbox of template and returns what whatRuns prints in it.
func runIn(ctx context.Context, t *testing.T, client *cove.Client, template string) (*cove.Sandbox, []string) {
	t.Helper()
	sb, err := client.Create(ctx, cove.SandboxOptions{Template: template})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })
	res, err := sb.Commands.Run(ctx, whatRuns)
	if err != nil {
		t.Fatalf("%s: %v (%+v)", sb.ID, err, res)
	}
	out := strings.Fields(res.Stdout)
	if len(out) != 4 {
		t.Fatalf("%s: want marker pid, time, serving pid and status, got %q", sb.ID, res.Stdout)
	}
	return sb, out
}

func TestTemplatesStartFromASnapshotTakenAfterTheReadyCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	skipWithoutCheckpoints(t)
	templates := covetest.OwnTemplates(t)
	server := covetest.StartWithTemplates(t, "", templates)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
	log := buildStartTemplate(ctx, t, client, "started")

	t.Run("the build log shows the start command run once, its ready check and the snapshot", func(t *testing.T) {
		for _, want := range []string{"==> start command: ", "ready check passed in ", "==> start snapshot: "} {
			if !strings.Contains(log, want) {
				t.Errorf("the build log lacks %q:\n%s", want, log)
			}
		}
		if strings.Contains(log, "unavailable") {
			t.Errorf("the build took no snapshot:\n%s", log)
		}
	})

	t.Run("the start command's output is in the build log", func(t *testing.T) {
		var lines []string
		_, err := client.BuildTemplate(ctx, "chatty", cove.TemplateDefinition{FromTemplate: "base",
			StartCmd: `echo starting the server; sleep 1; exec python3 -m http.server 8125`, ReadyCmd: `curl -sf -o /dev/null http://127.0.0.1:8125/`},
			cove.TemplateBuildOptions{OnLog: func(e cove.BuildLogEntry) { lines = append(lines, e.Message) }})
		if log := strings.Join(lines, "\n"); err != nil || !strings.Contains(log, "    start: starting the server") {
			t.Fatalf("%v\n%s", err, log)
		}
	})

	t.Run("the template lists its snapshot with its size and the ready check's time", func(t *testing.T) {
		info, err := client.Template(ctx, "started")
		if err != nil {
			t.Fatal(err)
		}
		sn := info.StartSnapshot
		if sn == nil || sn.SizeBytes <= 0 || sn.ReadyMS <= 0 || sn.BuildID != info.BuildID {
			t.Fatalf("start snapshot %+v (build %s)", sn, info.BuildID)
		}
		out, err := exec.CommandContext(ctx, covetest.Binary(t), "template", "ls", "--data", server.DataDir, "--templates", templates).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "START SNAPSHOT") || !strings.Contains(string(out), "ready ") {
			t.Fatalf("cove template ls: %v\n%s", err, out)
		}
	})

	var first []string
	t.Run("a sandbox of the template has the start command running since the build, its port answering", func(t *testing.T) {
		_, first = runIn(ctx, t, client, "started")
		if first[0] != first[2] {
			t.Errorf("the port is served by pid %s, not by the start command's %s", first[2], first[0])
		}
		if first[3] != "200" {
			t.Errorf("the port answered %s at once after create", first[3])
		}
	})

	t.Run("a second sandbox sees the same marker: the command ran once, at build", func(t *testing.T) {
		if first == nil {
			t.Skip("the first sandbox failed")
		}
		_, second := runIn(ctx, t, client, "started")
		if strings.Join(second[:3], " ") != strings.Join(first[:3], " ") || second[3] != "200" {
			t.Errorf("first sandbox %q, second %q", first, second)
		}
	})

	t.Run("each sandbox is independent: its own files and hostname", func(t *testing.T) {
		one, _ := runIn(ctx, t, client, "started")
		if res, err := one.Commands.Run(ctx, "hostname"); err != nil || res.Stdout != one.ID+"\n" {
			t.Errorf("hostname %q, %v; want the sandbox's id %s", res.Stdout, err, one.ID)
		}
		if _, err := one.Commands.Run(ctx, "echo mine > /tmp/own"); err != nil {
			t.Fatal(err)
		}
		other, _ := runIn(ctx, t, client, "started")
		res, err := other.Commands.Run(ctx, "test -e /tmp/own && echo shared || echo own")
		if err != nil || res.Stdout != "own\n" {
			t.Fatalf("%q %v", res.Stdout, err)
		}
	})

	t.Run("a restored sandbox pauses to disk, resumes and forks as any other, its start command running on", func(t *testing.T) {
		if first == nil {
			t.Skip("the first sandbox failed")
		}
		sb, _ := runIn(ctx, t, client, "started")
		if err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Resume(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		forks, err := sb.Fork(ctx, cove.ForkOptions{Count: 1})
		if err != nil || len(forks) != 1 || forks[0].Err != nil {
			t.Fatalf("fork: %+v %v", forks, err)
		}
		t.Cleanup(func() { _ = forks[0].Sandbox.Kill(context.Background()) })
		for _, s := range []*cove.Sandbox{sb, forks[0].Sandbox} {
			res, err := s.Commands.Run(ctx, whatRuns+"; hostname")
			if out := strings.Fields(res.Stdout); err != nil || len(out) != 5 || out[1] != first[1] || out[0] != out[2] || out[3] != "200" || out[4] != s.ID {
				t.Errorf("%s: %q %v; the build's start was %q", s.ID, res.Stdout, err, first)
			}
		}
	})

	t.Run("each restored sandbox's envd takes its own access token, though the build sandbox had none", func(t *testing.T) {
		a, b := createSecure(t, server, "started"), createSecure(t, server, "started")
		for _, c := range []struct {
			name, id, token string
			want            connect.Code // 0: success
		}{
			{"no token is refused", a.SandboxID, "", connect.CodeUnauthenticated},
			{"another copy's token is refused", a.SandboxID, b.EnvdAccessToken, connect.CodeUnauthenticated},
			{"its own token is taken", a.SandboxID, a.EnvdAccessToken, 0},
			{"and the other copy's own", b.SandboxID, b.EnvdAccessToken, 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				req := connect.NewRequest(&process.ListRequest{})
				req.Header().Set("E2b-Sandbox-Id", c.id)
				req.Header().Set("E2b-Sandbox-Port", "49983")
				if c.token != "" {
					req.Header().Set("X-Access-Token", c.token)
				}
				_, err := processconnect.NewProcessClient(http.DefaultClient, server.URL).List(ctx, req)
				if got := connect.CodeOf(err); (c.want == 0) != (err == nil) || c.want != 0 && got != c.want {
					t.Errorf("process.List: %v (code %v), want code %v", err, got, c.want)
				}
			})
		}
	})

	t.Run("creates restore the snapshot rather than start the command, and their created events say from which build", func(t *testing.T) {
		if n := strings.Count(server.Logs(), "sandbox restored from its template's start snapshot"); n < 2 {
			t.Fatalf("%d restores logged", n)
		}
		info, err := client.Template(ctx, "started")
		if err != nil {
			t.Fatal(err)
		}
		evs, err := client.Events(ctx, "", cove.EventOptions{Types: []string{cove.EventSandboxCreated}})
		if err != nil || len(evs) == 0 {
			t.Fatalf("%d created events, %v", len(evs), err)
		}
		d, err := evs[0].Data()
		if c, ok := d.(*cove.CreatedEventData); err != nil || !ok || c.StartSnapshotBuild != info.BuildID {
			t.Fatalf("created event %s: %+v %v (build %s)", evs[0].EventData, d, err, info.BuildID)
		}
		st, err := client.TemplateBuild(ctx, "started", info.BuildID, 0)
		if err != nil || st.StartSnapshot == nil || st.StartSnapshot.SizeBytes != info.StartSnapshot.SizeBytes {
			t.Fatalf("build status %+v %v", st, err)
		}
	})

	t.Run("a rebuild with nothing changed reuses the snapshot, and so does a tag of that build", func(t *testing.T) {
		if first == nil {
			t.Skip("the first sandbox failed")
		}
		if err := client.TagTemplate(ctx, "started", "v1"); err != nil {
			t.Fatal(err)
		}
		if log := buildStartTemplate(ctx, t, client, "started"); !strings.Contains(log, "==> start snapshot: cached") {
			t.Fatalf("the rebuild took a new snapshot:\n%s", log)
		}
		for _, ref := range []string{"started", "started:v1"} {
			if _, now := runIn(ctx, t, client, ref); now[1] != first[1] || now[3] != "200" {
				t.Fatalf("from %s %q, before the rebuild %q", ref, now, first)
			}
		}
	})

	t.Run("a rebuild with a changed step takes a new snapshot; the tag of the old build then starts the command", func(t *testing.T) {
		if first == nil {
			t.Skip("the first sandbox failed")
		}
		if log := buildStartTemplateWith(ctx, t, client, "started", "echo changed > /tmp/built-at-build"); strings.Contains(log, "cached, taken") {
			t.Fatalf("the changed build reused the snapshot:\n%s", log)
		}
		_, renewed := runIn(ctx, t, client, "started")
		_, tagged := runIn(ctx, t, client, "started:v1")
		if renewed[1] == first[1] || tagged[1] == first[1] || tagged[1] == renewed[1] || tagged[0] != tagged[2] || tagged[3] != "200" {
			t.Fatalf("before %q, the name now %q, the old tag %q", first, renewed, tagged)
		}
	})

	t.Run("deleting the template deletes its snapshot", func(t *testing.T) {
		dir := filepath.Join(templates, "started", "start-snapshot")
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("no snapshot at %s: %v", dir, err)
		}
		if err := client.DeleteTemplate(ctx, "started"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s is still there: %v", dir, err)
		}
	})
}

// TestOfficialSDKStartSnapshots runs test/compat/startsnap.test.mjs, the npm SDK's setStartCmd
// with waitForPort, on each runtime: runc's start snapshots are CRIU's, runsc's its own.
func TestOfficialSDKStartSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server and node: skipped under -short")
	}
	covetest.EachRuntime(t, func(t *testing.T, engine runtime.Engine) {
		if engine == runtime.EngineRunc {
			skipWithoutCheckpoints(t)
		}
		server := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
		covetest.RunSDKScenarios(t, "startsnap.test.mjs", server.URL, server.Key)
	})
}

func TestWithoutCheckpointsTemplatesStartTheCommandAtCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	covetest.Binary(t) // built before PATH loses what a build needs
	// The server finds no criu: /usr/local/sbin is where scripts/criu.sh installs it.
	t.Setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
	if _, err := exec.LookPath("criu"); err == nil {
		t.Skip("a criu binary is on the system PATH: this test needs a server without one")
	}
	server := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
	log := buildStartTemplate(ctx, t, client, "cold")

	t.Run("the build log says there is no snapshot and why", func(t *testing.T) {
		if !strings.Contains(log, "==> start snapshot: unavailable") || !strings.Contains(log, "CRIU") {
			t.Fatalf("build log:\n%s", log)
		}
		info, err := client.Template(ctx, "cold")
		if err != nil || info.StartSnapshot != nil {
			t.Fatalf("%+v %v", info, err)
		}
	})

	t.Run("each create starts the command and waits for its ready check", func(t *testing.T) {
		_, first := runIn(ctx, t, client, "cold")
		_, second := runIn(ctx, t, client, "cold")
		if first[3] != "200" || second[3] != "200" {
			t.Fatalf("the port did not answer after create: %q %q", first, second)
		}
		if first[1] == second[1] {
			t.Fatalf("both sandboxes have the marker of one start: %q %q", first, second)
		}
	})
}

// createSecure creates a secure sandbox of template through the REST API, for its token.
func createSecure(t *testing.T, server *covetest.Server, template string) cove.CreatedSandbox {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"templateID": template, "secure": true})
	req, _ := http.NewRequest(http.MethodPost, server.URL+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-Key", server.Key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var sb cove.CreatedSandbox
	if err := json.NewDecoder(res.Body).Decode(&sb); err != nil || res.StatusCode != http.StatusCreated || sb.EnvdAccessToken == "" {
		t.Fatalf("create: %s, %+v, %v", res.Status, sb, err)
	}
	t.Cleanup(func() {
		c := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
		_ = c.Kill(context.Background(), sb.SandboxID)
	})
	return sb
}

func TestATemplatesBuildSandboxCountsAgainstTheTeamsQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server: skipped under -short")
	}
	skipWithoutCheckpoints(t)
	server := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t), Args: []string{"--quota-sandboxes", "1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.Key})
	sb, err := client.Create(ctx, cove.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a build while the team holds its one sandbox fails naming the quota", func(t *testing.T) {
		_, err := client.BuildTemplate(ctx, "over", cove.TemplateDefinition{FromTemplate: "base", StartCmd: startMarker, ReadyCmd: readyCheck}, cove.TemplateBuildOptions{})
		var be *cove.BuildError
		if !errors.As(err, &be) || !strings.Contains(be.Message, "concurrent sandboxes") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("once the sandbox is gone the build runs", func(t *testing.T) {
		if err := sb.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		buildStartTemplate(ctx, t, client, "over")
	})
}

func TestAHostBuildTakesNoStartSnapshotAndSaysSo(t *testing.T) {
	covetest.Skip(t)
	templates := covetest.OwnTemplates(t)
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM base\nCMD sleep infinity\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(covetest.Binary(t), "template", "build", "on-host", "--data", t.TempDir(), "--templates", templates,
		"-f", filepath.Join(ctxDir, "Dockerfile"), ctxDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "==> start snapshot: none (built without a server") {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ls, err := exec.Command(covetest.Binary(t), "template", "ls", "--data", t.TempDir(), "--templates", templates).CombinedOutput()
	if err != nil || !strings.Contains(string(ls), "on-host") {
		t.Fatalf("ls: %v\n%s", err, ls)
	}
	for _, line := range strings.Split(string(ls), "\n") {
		if strings.HasPrefix(line, "on-host ") && !strings.Contains(line, " none ") {
			t.Fatalf("the ls line of a start command without a snapshot does not say none: %q", line)
		}
	}
}
